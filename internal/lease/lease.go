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
package lease

import (
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
}

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
	if err := os.MkdirAll(l.Dir, 0o755); err != nil {
		return false, err
	}
	l.maybeSweep()
	for attempt := 0; attempt < 2; attempt++ {
		f, err := os.OpenFile(p, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
		if err == nil {
			_, _ = fmt.Fprintf(f, "%s %s\n", l.Owner, l.now().UTC().Format(time.RFC3339Nano))
			if err := f.Close(); err != nil {
				return false, err
			}
			// O_EXCL creation stamps the file with the file system's clock;
			// stamp it with ours so staleness is judged on one clock.
			_ = os.Chtimes(p, l.now(), l.now())
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

// Release gives the leases on keys up.
func (l *Leases) Release(keys []string) {
	for _, k := range keys {
		if p, err := l.path(k); err == nil {
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
// GPU host writes it) is a process of this host that no longer exists. It
// returns how many it removed. Files it cannot read are left alone.
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
		if e.IsDir() || !strings.HasSuffix(name, ".lease") {
			continue
		}
		p := filepath.Join(l.Dir, name)
		fi, err := e.Info()
		if err != nil {
			continue
		}
		old := now.Sub(fi.ModTime()) > sweepAfter*l.TTL
		if !old && !deadLocalOwner(p, host) {
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
