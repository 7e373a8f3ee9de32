// Package lease gives one worker at a time the right to compute an artefact,
// across processes and hosts that share a file system.
//
// A lease is a file created with O_EXCL (atomic on local file systems and on
// NFSv3 and later); its holder refreshes its modification time while it
// works and removes it when done. A lease whose file has not been refreshed
// for TTL is stale: its holder died, and anyone may take it over. Takeover is
// remove-then-create, so in the narrow window after a crash two workers can
// both win; the artefact is then computed twice, which the atomic-rename
// write protocol makes harmless. Deduplication is exact in every other case.
//
// A released lease's file is kept as a spare of its Leases (renamed to a
// name of its own, up to maxSpares of them) and becomes the next lease's
// file by a hard link to the key's name, which, like O_EXCL, fails when the
// name exists (also on NFS). So a busy holder allocates and frees no inode
// per lease: a small job took three of each. On ext4 without a journal every
// new file of a folder's block group scans past each inode freed there in
// the last minute or more (docs/BENCHMARKS.md, "Why this machine's figures
// move so much" and "Lease files kept for the next lease"); elsewhere the spare costs what a new file does.
package lease

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// Leases manages the lease files under Dir.
type Leases struct {
	// Dir holds the lease files (created when missing).
	Dir string
	// TTL is how long a lease lives without a refresh.
	TTL time.Duration
	// Owner is written into the files, for operators reading them.
	Owner string
	// Now is the clock; nil means time.Now.
	Now func() time.Time

	sweepMu   sync.Mutex
	lastSweep time.Time

	spareMu sync.Mutex
	// spares are the paths of released lease files kept for the next
	// leases; sparePrefix names them (random per Leases, so that processes
	// and hosts sharing Dir never take each other's).
	spares      []string
	sparePrefix string
	spareSeq    uint64
	// noLinks: the file system refused a hard link; leases are created
	// and removed as files of their own.
	noLinks bool
}

// spareMark begins every spare's name; the sweep removes spares older than
// sweepAfter TTLs (a spare is stamped when it becomes a lease again, so an
// old one belongs to a holder that died or went idle).
const spareMark = ".spare-"

// maxSpares bounds the spares one Leases keeps; a release beyond it removes
// the file.
const maxSpares = 64

var keyPattern = regexp.MustCompile(`^[A-Za-z0-9_.-]{1,200}$`)

func (l *Leases) now() time.Time {
	if l.Now != nil {
		return l.Now()
	}
	return time.Now()
}

func (l *Leases) path(key string) (string, error) {
	if !keyPattern.MatchString(key) || key[0] == '.' {
		return "", fmt.Errorf("invalid lease key %q", key)
	}
	return filepath.Join(l.Dir, key+".lease"), nil
}

// TryAcquire takes the lease on key if nobody holds it (or its holder's lease
// went stale) and reports whether it did.
func (l *Leases) TryAcquire(key string) (bool, error) {
	p, err := l.path(key)
	if err != nil {
		return false, err
	}
	if err := mediaroot.MkdirAll(l.Dir, 0o755); err != nil {
		return false, err
	}
	l.maybeSweep()
	for attempt := 0; attempt < 2; attempt++ {
		err := l.create(p)
		if err == nil {
			return true, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return false, err
		}
		if !l.stale(p) {
			return false, nil
		}
		if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return false, err
		}
	}
	return false, nil
}

// create makes the lease file p, failing with fs.ErrExist when it exists:
// from a spare when there is one, else anew with O_EXCL.
func (l *Leases) create(p string) error {
	if sp := l.takeSpare(); sp != "" {
		if err := l.linkSpare(sp, p); err == nil || errors.Is(err, fs.ErrExist) {
			return err
		}
		// Swept meanwhile, or no hard links here: a file of its own.
	}
	return l.stamp(p, os.O_CREATE|os.O_EXCL)
}

// linkSpare makes the spare sp the lease file p: stamped, then linked.
// fs.ErrExist when p exists (sp stays a spare); any other error drops sp,
// and a refused link makes this Leases create and remove files as before.
func (l *Leases) linkSpare(sp, p string) error {
	if err := l.stamp(sp, 0); err != nil {
		_ = os.Remove(sp)
		return err
	}
	err := os.Link(sp, p)
	switch {
	case err == nil:
		// The lease keeps the inode; the spare's name goes.
		_ = os.Remove(sp)
		return nil
	case errors.Is(err, fs.ErrExist):
		l.putSpare(sp)
		return err
	case !errors.Is(err, fs.ErrNotExist):
		l.spareMu.Lock()
		l.noLinks = true
		l.spareMu.Unlock()
	}
	_ = os.Remove(sp)
	return err
}

// stamp opens the file at p for writing with flag (O_CREATE|O_EXCL: a new
// lease; 0: a spare, before it is linked to a key, so that the lease is
// fresh from its first instant), writes the owner and the time into it and
// sets its modification time to now: the file system's clock stamped it,
// and staleness is judged on ours.
func (l *Leases) stamp(p string, flag int) error {
	f, err := os.OpenFile(p, os.O_WRONLY|os.O_TRUNC|flag, 0o644)
	if err != nil {
		return err
	}
	_, _ = fmt.Fprintf(f, "%s %s\n", l.Owner, l.now().UTC().Format(time.RFC3339Nano))
	if err := f.Close(); err != nil {
		return err
	}
	_ = os.Chtimes(p, l.now(), l.now())
	return nil
}

func (l *Leases) takeSpare() string {
	l.spareMu.Lock()
	defer l.spareMu.Unlock()
	n := len(l.spares)
	if n == 0 {
		return ""
	}
	sp := l.spares[n-1]
	l.spares = l.spares[:n-1]
	return sp
}

func (l *Leases) putSpare(sp string) {
	l.spareMu.Lock()
	l.spares = append(l.spares, sp)
	l.spareMu.Unlock()
}

// keepAsSpare renames the released lease file p to a new spare name and
// reports whether it did; false leaves p as it is (no room, no hard links,
// or p gone).
func (l *Leases) keepAsSpare(p string) bool {
	l.spareMu.Lock()
	if l.noLinks || len(l.spares) >= maxSpares {
		l.spareMu.Unlock()
		return false
	}
	if l.sparePrefix == "" {
		var b [8]byte
		_, _ = rand.Read(b[:])
		l.sparePrefix = spareMark + hex.EncodeToString(b[:]) + "-"
	}
	l.spareSeq++
	sp := filepath.Join(l.Dir, l.sparePrefix+strconv.FormatUint(l.spareSeq, 10))
	l.spareMu.Unlock()
	if os.Rename(p, sp) != nil {
		return false
	}
	l.putSpare(sp)
	return true
}

// stale reports whether the lease file at p was last refreshed more than TTL ago.
func (l *Leases) stale(p string) bool {
	fi, err := os.Stat(p)
	if err != nil {
		return errors.Is(err, fs.ErrNotExist)
	}
	return l.now().Sub(fi.ModTime()) > l.TTL
}

// Held reports whether someone holds a live lease on key.
func (l *Leases) Held(key string) bool {
	p, err := l.path(key)
	if err != nil {
		return false
	}
	if _, err := os.Stat(p); err != nil {
		return false
	}
	return !l.stale(p)
}

// Refresh keeps the leases on keys alive.
func (l *Leases) Refresh(keys []string) {
	t := l.now()
	for _, k := range keys {
		if p, err := l.path(k); err == nil {
			_ = os.Chtimes(p, t, t)
		}
	}
}

// Release gives the leases on keys up; their files are kept as spares
// (keepAsSpare) or removed.
func (l *Leases) Release(keys []string) {
	for _, k := range keys {
		if p, err := l.path(k); err == nil && !l.keepAsSpare(p) {
			_ = os.Remove(p)
		}
	}
}

// sweepAfter is how many TTLs a lease file may go unrefreshed before a sweep
// removes it. A live holder refreshes well within one TTL; a file this old
// belongs to a holder killed without releasing (kill -9), whose key may
// never be asked for again, so takeover alone would keep it for ever.
const sweepAfter = 2

// maybeSweep runs Sweep at most once per TTL, from TryAcquire: every
// process that takes leases also cleans up after dead ones, with no
// goroutine of its own.
func (l *Leases) maybeSweep() {
	l.sweepMu.Lock()
	now := l.now()
	due := l.lastSweep.IsZero() || now.Sub(l.lastSweep) >= l.TTL
	if due {
		l.lastSweep = now
	}
	l.sweepMu.Unlock()
	if due {
		_, _ = l.Sweep()
	}
}

// Sweep removes the lease files that no live holder can own: those not
// refreshed for sweepAfter × TTL, and those whose owner ("host/pid", as the
// GPU host writes it) is a process of this host that no longer exists; and
// the spares not used for sweepAfter × TTL (a live Leases whose spare went
// makes its next lease anew). It returns how many it removed. Files it
// cannot read are left alone.
func (l *Leases) Sweep() (int, error) {
	entries, err := os.ReadDir(l.Dir)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, nil
		}
		return 0, fmt.Errorf("sweep leases in %s: %w", l.Dir, err)
	}
	host, _ := os.Hostname()
	now := l.now()
	removed := 0
	for _, e := range entries {
		name := e.Name()
		spare := strings.HasPrefix(name, spareMark)
		if e.IsDir() || !strings.HasSuffix(name, ".lease") && !spare {
			continue
		}
		p := filepath.Join(l.Dir, name)
		fi, err := e.Info()
		if err != nil {
			continue
		}
		old := now.Sub(fi.ModTime()) > sweepAfter*l.TTL
		if !old && (spare || !deadLocalOwner(p, host)) {
			continue
		}
		if err := os.Remove(p); err == nil {
			removed++
		}
	}
	return removed, nil
}

// deadLocalOwner reports whether the lease file at p names an owner
// "host/pid" on this host whose process is gone. Any doubt (unreadable
// file, another host, a pid that exists, even reused) says no.
func deadLocalOwner(p, host string) bool {
	data, err := os.ReadFile(p)
	if err != nil || host == "" {
		return false
	}
	owner, _, _ := strings.Cut(strings.TrimSpace(string(data)), " ")
	h, pidText, ok := strings.Cut(owner, "/")
	if !ok || h != host {
		return false
	}
	pid, err := strconv.Atoi(pidText)
	if err != nil || pid <= 0 || pid == os.Getpid() {
		return false
	}
	// Signal 0 checks existence: ESRCH means no such process.
	return errors.Is(syscall.Kill(pid, 0), syscall.ESRCH)
}
