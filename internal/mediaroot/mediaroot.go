// Package mediaroot gives the media root (KINFLOW_MEDIA_ROOT: sequence_info/,
// jobs/, gpu_jobs/, …) an identity and keeps every kinflow process from
// writing into a folder that is not it.
//
// The identity is a small marker file at the top of the root,
// MarkerName, holding a random id and the time it was made. A process
// opens the root at start (Open) and remembers the id it finds; before it
// writes into the root it checks that the marker is still there and holds
// the same id (Root.Check: a read of a small file, cached for CheckEvery).
// A root renamed away, unmounted or replaced by another (as a lost network
// mount is) fails the check, and so the writes fail instead of filling a
// new, empty tree at the old path that the real root later hides.
//
// The marker is created only
//
//   - by the first process that finds the root present and holding no
//     kinflow data yet (none of jobs/, sequence_info/, gpu_jobs/): a fresh
//     root, such as a new volume or an empty folder an operator made;
//   - by `kinflow dev` at its start, whatever the root holds; it also
//     creates a missing root (its default ./media is made on a fresh
//     clone);
//   - by `kinflow media init`, for a root that holds data from a version
//     without markers.
//
// No process creates a missing root otherwise, and none creates a folder
// under the root unless the root is there and identified (MkdirAll).
package mediaroot

import (
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// MarkerName is the identity marker's file name at the top of the root.
// Hidden, so the planners, trackers and cache tools that list the root
// skip it.
const MarkerName = ".kinflow-media-root"

// CheckEvery is how long a check's outcome is reused: one marker read a
// second per process at most, however many files it writes.
const CheckEvery = time.Second

// dataDirs are the folders whose presence says a root holds kinflow data:
// a root with one of them and no marker is not a fresh one.
var dataDirs = []string{"jobs", "sequence_info", "gpu_jobs"}

// Marker is the identity file's content.
type Marker struct {
	// ID is random, made once per root.
	ID string `json:"id"`
	// Created is when the marker was written (UTC).
	Created time.Time `json:"created"`
}

// ErrUnavailable is what every error of an unavailable root matches with
// errors.Is.
var ErrUnavailable = errors.New("media root unavailable")

// unavailableText is ErrUnavailable's text, how UnavailableText finds it in
// a failure that kept only its message (a Temporal failure).
const unavailableText = "media root unavailable"

// The kinds of unavailable root, as /health/ names them.
const (
	// KindMissing: the root, or its marker, is not there (renamed away,
	// unmounted, not yet created).
	KindMissing = "missing"
	// KindForeign: the marker holds another id than the one this process
	// started with: another root is at the path.
	KindForeign = "foreign"
	// KindUnmarked: the root holds kinflow data but no marker (a root of a
	// version without markers, or a copy made without it): `kinflow media
	// init` marks it.
	KindUnmarked = "unmarked"
	// KindUnreadable: the marker cannot be read or parsed.
	KindUnreadable = "unreadable"
)

// Error is an unavailable root. Its text names no path (it may reach a
// user through a job's message); the process logs the root's path.
type Error struct {
	// Kind is one of the Kind constants.
	Kind string
	// Detail says what was found, without a path.
	Detail string
	// Err is the underlying error, if any (its text may hold a path).
	Err error
}

func (e *Error) Error() string { return unavailableText + ": " + e.Detail }

// Is makes errors.Is(err, ErrUnavailable) true.
func (e *Error) Is(target error) bool { return target == ErrUnavailable }

// Unwrap gives the underlying error.
func (e *Error) Unwrap() error { return e.Err }

// Unavailable reports whether err says the media root was unavailable: by
// its type, or by its text where only that survived.
func Unavailable(err error) bool {
	if err == nil {
		return false
	}
	return errors.Is(err, ErrUnavailable) || UnavailableText(err.Error())
}

// UnavailableText is Unavailable for a message alone.
func UnavailableText(msg string) bool {
	return strings.Contains(strings.ToLower(msg), unavailableText)
}

// Kind is the kind of an unavailable root's error ("" for nil or another
// error).
func Kind(err error) string {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return ""
}

// Options are how a process opens its root.
type Options struct {
	// CreateRoot lets Open create a missing root, and mark one that has
	// none whatever it holds: `kinflow dev` only, whose default ./media
	// does not exist on a fresh clone (and holds an older version's data
	// on an old one). Only Open does; a root that goes away later is
	// never recreated.
	CreateRoot bool
	// ExpectID is the identity to hold the root to from the start, instead
	// of adopting (or writing) the marker found: a step server the GPU
	// host started passes the host's.
	ExpectID string
}

// Root is the media root as one process sees it: its path and the
// identity it adopted.
type Root struct {
	path string
	// every is how long a check is reused (CheckEvery; tests change it).
	every time.Duration

	mu sync.Mutex
	// id is the adopted identity; "" until a marker was found or made.
	id string
	// checked is when err was found; err is the last check's outcome.
	checked time.Time
	err     error
}

// registry holds the open roots, so that MkdirAll, called by code that
// knows only a path, finds the root a path is under.
var registry struct {
	mu    sync.RWMutex
	roots []*Root
	n     atomic.Int32
}

// Open opens the media root at path for this process: it adopts the id of
// the root's marker, creating the marker when the root is fresh (see the
// package comment), and registers the root for MkdirAll. A root that is
// missing or unidentified is not an error here: the process starts,
// Check reports the root unavailable, and the root is adopted as soon as
// it is there and marked. Opening a path already open returns the same
// Root.
func Open(path string, o Options) (*Root, error) {
	if path == "" {
		return nil, errors.New("media root: empty path")
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("media root %q: %w", path, err)
	}
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for _, r := range registry.roots {
		if r.path == abs {
			return r, nil
		}
	}
	if o.CreateRoot {
		if _, err := os.Stat(abs); errors.Is(err, fs.ErrNotExist) {
			if err := os.MkdirAll(abs, 0o755); err != nil {
				return nil, fmt.Errorf("create media root: %w", err)
			}
		}
		if _, err := readMarker(abs); errors.Is(err, fs.ErrNotExist) {
			if _, err := create(abs); err != nil {
				return nil, fmt.Errorf("mark media root: %w", err)
			}
		}
	}
	r := &Root{path: abs, every: CheckEvery, id: o.ExpectID}
	r.mu.Lock()
	r.refresh()
	r.mu.Unlock()
	registry.roots = append(registry.roots, r)
	registry.n.Store(int32(len(registry.roots)))
	return r, nil
}

// Close unregisters r: MkdirAll no longer checks paths under it.
func (r *Root) Close() {
	registry.mu.Lock()
	defer registry.mu.Unlock()
	for i, x := range registry.roots {
		if x == r {
			registry.roots = append(registry.roots[:i], registry.roots[i+1:]...)
			break
		}
	}
	registry.n.Store(int32(len(registry.roots)))
}

// Lookup is the open root at path exactly, or nil.
func Lookup(path string) *Root {
	if registry.n.Load() == 0 || path == "" {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	for _, r := range registry.roots {
		if r.path == abs {
			return r
		}
	}
	return nil
}

// containing is the open root that path is in (or is), the deepest one
// when roots nest; nil when none.
func containing(path string) *Root {
	if registry.n.Load() == 0 {
		return nil
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil
	}
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	var best *Root
	for _, r := range registry.roots {
		if within(r.path, abs) && (best == nil || len(r.path) > len(best.path)) {
			best = r
		}
	}
	return best
}

// within reports whether path is root or below it (both clean, absolute).
func within(root, path string) bool {
	if path == root {
		return true
	}
	if root == string(filepath.Separator) {
		return true
	}
	return strings.HasPrefix(path, root+string(filepath.Separator))
}

// Path is the root's absolute path.
func (r *Root) Path() string { return r.path }

// ID is the adopted identity ("" while none).
func (r *Root) ID() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.id
}

// Check reports whether the root is there with the identity this process
// adopted: nil, or an *Error (ErrUnavailable). The outcome is reused for
// CheckEvery.
func (r *Root) Check() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.checked) < r.every {
		return r.err
	}
	return r.refresh()
}

// CheckNow is Check without the reuse: after a write failed, to tell
// whether the root is what failed.
func (r *Root) CheckNow() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.refresh()
}

// refresh checks the root anew; r.mu is held.
func (r *Root) refresh() error {
	r.err = r.look()
	r.checked = time.Now()
	return r.err
}

// look reads the marker and compares it with the adopted id, adopting (and
// on a fresh root creating) one while there is none.
func (r *Root) look() error {
	m, err := readMarker(r.path)
	switch {
	case err == nil && r.id == "":
		r.id = m.ID
		return nil
	case err == nil && m.ID == r.id:
		return nil
	case err == nil:
		return &Error{Kind: KindForeign, Detail: "the folder at the media root's path is another media root (its identity marker differs from the one found at start)"}
	case !errors.Is(err, fs.ErrNotExist):
		return &Error{Kind: KindUnreadable, Detail: "its identity marker cannot be read", Err: err}
	}
	// No marker.
	fi, serr := os.Stat(r.path)
	switch {
	case errors.Is(serr, fs.ErrNotExist):
		return &Error{Kind: KindMissing, Detail: "the media root is not there (moved, unmounted or not created)", Err: serr}
	case serr != nil:
		return &Error{Kind: KindUnreadable, Detail: "the media root cannot be read", Err: serr}
	case !fi.IsDir():
		return &Error{Kind: KindUnreadable, Detail: "the media root is not a folder"}
	case r.id != "":
		return &Error{Kind: KindMissing, Detail: "its identity marker is gone (the folder at its path is not the media root this process started with)"}
	}
	if HoldsData(r.path) {
		return &Error{Kind: KindUnmarked, Detail: "it holds kinflow data but no identity marker (run `kinflow media init` once, on the right folder)"}
	}
	m, err = create(r.path)
	if err != nil {
		return &Error{Kind: KindUnreadable, Detail: "its identity marker could not be written", Err: err}
	}
	r.id = m.ID
	return nil
}

// HoldsData reports whether root has one of the folders kinflow writes
// (jobs/, sequence_info/, gpu_jobs/): such a root without a marker is not
// marked by a process, only by Init.
func HoldsData(root string) bool {
	for _, d := range dataDirs {
		if _, err := os.Lstat(filepath.Join(root, d)); err == nil {
			return true
		}
	}
	return false
}

// ReadMarker reads the marker of the root at path.
func ReadMarker(path string) (Marker, error) { return readMarker(path) }

func readMarker(root string) (Marker, error) {
	var m Marker
	b, err := os.ReadFile(filepath.Join(root, MarkerName))
	if err != nil {
		return m, err
	}
	if err := json.Unmarshal(b, &m); err != nil || m.ID == "" {
		return m, fmt.Errorf("identity marker: not a marker: %q", truncate(string(b), 80))
	}
	return m, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// Init writes the marker of an existing root that has none, whatever it
// holds: `kinflow media init`, for a root written by a version without
// markers. It refuses a missing root and one already marked.
func Init(path string) (Marker, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return Marker{}, fmt.Errorf("media root %s: %w", path, err)
	}
	if !fi.IsDir() {
		return Marker{}, fmt.Errorf("media root %s is not a folder", path)
	}
	if m, err := readMarker(path); err == nil {
		return m, fmt.Errorf("media root %s is already marked (id %s, created %s)", path, m.ID, m.Created.Format(time.RFC3339))
	}
	m, err := create(path)
	if err != nil {
		return Marker{}, fmt.Errorf("media root %s: %w", path, err)
	}
	return m, nil
}

// create writes a new marker into root unless one appears meanwhile, and
// returns the marker the root has then (ours, or another process's that
// won the race). The marker is written whole under a hidden temp name and
// linked into place, so a reader never sees a partial one and two
// processes never both win.
func create(root string) (Marker, error) {
	var raw [16]byte
	if _, err := rand.Read(raw[:]); err != nil {
		return Marker{}, err
	}
	m := Marker{ID: hex.EncodeToString(raw[:]), Created: time.Now().UTC().Truncate(time.Second)}
	data, err := json.Marshal(m)
	if err != nil {
		return Marker{}, err
	}
	data = append(data, '\n')
	final := filepath.Join(root, MarkerName)
	f, err := os.CreateTemp(root, MarkerName+".*")
	if err != nil {
		return Marker{}, err
	}
	tmp := f.Name()
	defer os.Remove(tmp)
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return Marker{}, err
	}
	if err := f.Chmod(0o444); err != nil {
		_ = f.Close()
		return Marker{}, err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return Marker{}, err
	}
	if err := f.Close(); err != nil {
		return Marker{}, err
	}
	err = os.Link(tmp, final)
	if err != nil && !errors.Is(err, fs.ErrExist) {
		// A file system without hard links: an exclusive create.
		err = createExclusive(final, data)
	}
	if err != nil && !errors.Is(err, fs.ErrExist) {
		return Marker{}, err
	}
	syncDir(root)
	// Ours, or the one a process that got there first wrote.
	for i := 0; ; i++ {
		got, rerr := readMarker(root)
		if rerr == nil || i == 20 {
			return got, rerr
		}
		// An exclusive create being written: read again shortly.
		time.Sleep(10 * time.Millisecond)
	}
}

func createExclusive(path string, data []byte) error {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o444)
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		_ = f.Close()
		return err
	}
	if err := f.Sync(); err != nil {
		_ = f.Close()
		return err
	}
	return f.Close()
}

// syncDir makes a new entry of dir durable; failures are ignored (the
// marker is rewritten on a fresh root if lost in a crash).
func syncDir(dir string) {
	if d, err := os.Open(dir); err == nil {
		_ = d.Sync()
		_ = d.Close()
	}
}

// MkdirAll is os.MkdirAll for every writer: for a path under an open root
// it checks the root first (Check) and creates only the folders below the
// root, one at a time, never the root itself, so that a root that went
// away is not recreated, nor its jobs/, sequence_info/ or a family folder.
// Paths under no open root get os.MkdirAll.
func MkdirAll(dir string, perm os.FileMode) error {
	r := containing(dir)
	if r == nil {
		return os.MkdirAll(dir, perm)
	}
	return r.MkdirAll(dir, perm)
}

// MkdirAll creates dir, a folder at or under r, after checking r.
func (r *Root) MkdirAll(dir string, perm os.FileMode) error {
	if err := r.Check(); err != nil {
		return err
	}
	if fi, err := os.Stat(dir); err == nil && fi.IsDir() {
		return nil
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	if !within(r.path, abs) {
		return fmt.Errorf("%s is not under the media root", dir)
	}
	rel, err := filepath.Rel(r.path, abs)
	if err != nil || rel == "." {
		return err
	}
	p := r.path
	for _, part := range strings.Split(rel, string(filepath.Separator)) {
		p = filepath.Join(p, part)
		err := os.Mkdir(p, perm)
		if err == nil || errors.Is(err, fs.ErrExist) {
			continue
		}
		if errors.Is(err, syscall.ENOENT) {
			// The folder above went away after the check: the root, most
			// likely. Tell it apart from another failure.
			if cerr := r.CheckNow(); cerr != nil {
				return cerr
			}
		}
		return err
	}
	if fi, err := os.Stat(abs); err != nil || !fi.IsDir() {
		if err == nil {
			err = &fs.PathError{Op: "mkdir", Path: abs, Err: syscall.ENOTDIR}
		}
		return err
	}
	return nil
}
