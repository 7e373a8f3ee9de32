//go:build unix

package store

import (
	"os"
	"path/filepath"
	"sync"
	"syscall"
)

// This file tells a SQLite Store whether another process has its database
// open, so that a process alone on the file knows that its own change feed
// (OnJobChange) hears of every write. Each process holds a shared POSIX
// record lock on the first byte of "<database>-procs" while it has the
// database open; asking whether an exclusive lock could be placed there
// (F_GETLK) answers "yes" only when no other process holds one: a
// process's own locks never conflict with themselves. The kernel drops a
// process's locks when it exits, however it exits.
//
// POSIX locks belong to the process and go when it closes any descriptor of
// the file, so a process keeps one descriptor per file for all its Stores,
// counted, and closes it with the last of them. Two Stores of one process on
// one file do not hear each other's writes: the count makes such a process
// not alone either.

type procsFile struct {
	f *os.File
	n int
}

var (
	procsMu    sync.Mutex
	procsFiles = map[string]*procsFile{}
)

// procsMark is one Store's share of its process's lock.
type procsMark struct{ path string }

// markOpen records that this process has the SQLite database at dbPath open.
// It returns nil when the lock cannot be had (an unwritable folder): the
// Store then never counts itself alone.
func markOpen(dbPath string) *procsMark {
	abs, err := filepath.Abs(dbPath)
	if err != nil {
		return nil
	}
	path := abs + "-procs"
	procsMu.Lock()
	defer procsMu.Unlock()
	if pf := procsFiles[path]; pf != nil {
		pf.n++
		return &procsMark{path: path}
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil
	}
	lk := syscall.Flock_t{Type: syscall.F_RDLCK, Whence: 0, Start: 0, Len: 1}
	if err := syscall.FcntlFlock(f.Fd(), syscall.F_SETLK, &lk); err != nil {
		_ = f.Close()
		return nil
	}
	procsFiles[path] = &procsFile{f: f, n: 1}
	return &procsMark{path: path}
}

// alone reports whether no other Store, of this process or another, has
// the database open.
func (m *procsMark) alone() bool {
	if m == nil {
		return false
	}
	procsMu.Lock()
	defer procsMu.Unlock()
	pf := procsFiles[m.path]
	if pf == nil || pf.n != 1 {
		return false
	}
	lk := syscall.Flock_t{Type: syscall.F_WRLCK, Whence: 0, Start: 0, Len: 1}
	if err := syscall.FcntlFlock(pf.f.Fd(), syscall.F_GETLK, &lk); err != nil {
		return false
	}
	return lk.Type == syscall.F_UNLCK
}

// close gives the Store's share back; the last one closes the file (and
// with it the lock).
func (m *procsMark) close() {
	if m == nil {
		return
	}
	procsMu.Lock()
	defer procsMu.Unlock()
	pf := procsFiles[m.path]
	if pf == nil {
		return
	}
	if pf.n--; pf.n == 0 {
		delete(procsFiles, m.path)
		_ = pf.f.Close()
	}
}
