// Package progress tracks the embedding progress of one job stage from the
// files themselves, so that writes made on another host through shared
// storage count as well as local ones: the stage's expected
// missing artefact paths are watched with fsnotify, and a periodic
// reconciliation lists their folders to find what notifications miss (files
// written by another host over shared storage, where inotify sees nothing,
// and events lost to a queue overflow). The count of files that appeared is
// handed to a store callback, so the API serves it from the database without
// asking Temporal or the GPU host.
//
// The files are the truth: a tracker started after a worker restart counts
// what is already on disk, and a Registry hands an existing tracker of the
// same job stage to a second caller instead of starting a duplicate.
package progress

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// Defaults of Options.
const (
	// DefaultReconcile is the sweep interval while notifications work (the
	// reference's 10 s): sweeps only catch what notifications missed, and a
	// sweep lists whole cache folders, which may hold millions of files.
	DefaultReconcile = 10 * time.Second
	// DefaultPoll is the sweep interval when notifications are off, failed
	// to start, or were shown blind by a sweep that found files they never
	// reported (shared storage written by another host): the reference's 3 s.
	DefaultPoll = 3 * time.Second
	// DefaultStoreEvery is the shortest gap between two stored counts. The
	// contract's record is written at most every 0.25 s; 200 ms keeps the
	// same order of database load (at most 5 writes a second per stage)
	// while a file that just missed a write is still stored within 250 ms.
	DefaultStoreEvery = 200 * time.Millisecond
	// finalStoreTimeout bounds the last write after the tracker stopped,
	// when its own context is already over.
	finalStoreTimeout = 5 * time.Second
)

// Source says how a file was found.
type Source string

// Sources of a counted file.
const (
	// SourceNotify: an fsnotify Create event (a create or a rename into
	// the folder; the cache write protocol renames complete files).
	SourceNotify Source = "notify"
	// SourceReconcile: a periodic or start-up folder listing.
	SourceReconcile Source = "reconcile"
	// SourceOverflow: the full rescan after an event-queue overflow.
	SourceOverflow Source = "overflow"
)

// Key names one job stage.
type Key struct {
	JobID string
	Stage int
}

func (k Key) String() string { return fmt.Sprintf("%s/%d", k.JobID, k.Stage) }

// StoreFunc stores the stage's count of files that appeared.
type StoreFunc func(ctx context.Context, computed int) error

// Options configure a tracker.
type Options struct {
	Key Key
	// Paths are the expected missing files (the plan's missing_paths_by_seq).
	Paths []string
	// Store receives the count, at most every StoreEvery and only when it
	// changed; a nil Store keeps the count in memory only.
	Store StoreFunc
	// NoNotify turns file-system notifications off: sweeps only.
	NoNotify bool
	// Reconcile is the sweep interval with notifications (DefaultReconcile).
	Reconcile time.Duration
	// Poll is the sweep interval without working notifications (DefaultPoll).
	Poll time.Duration
	// StoreEvery is the shortest gap between stored counts (DefaultStoreEvery).
	StoreEvery time.Duration
	// OnFound, when set, is told how many files each source found.
	OnFound func(src Source, n int)
	// Log receives warnings; nil means slog.Default().
	Log *slog.Logger

	// newNotifier replaces fsnotify in tests (overflow injection).
	newNotifier func() (notifier, error)
	// onWatching, when set, is called once the watches are in place and the
	// first sweep is done: tests wait on it instead of sleeping.
	onWatching func()
}

// notifier is the part of fsnotify.Watcher the tracker uses.
type notifier interface {
	Add(dir string) error
	Events() <-chan fsnotify.Event
	Errors() <-chan error
	Close() error
}

type fsWatcher struct{ w *fsnotify.Watcher }

func (f fsWatcher) Add(dir string) error          { return f.w.Add(dir) }
func (f fsWatcher) Events() <-chan fsnotify.Event { return f.w.Events }
func (f fsWatcher) Errors() <-chan error          { return f.w.Errors }
func (f fsWatcher) Close() error                  { return f.w.Close() }

func newFSNotifier() (notifier, error) {
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, err
	}
	return fsWatcher{w}, nil
}

// Tracker counts one job stage's expected files as they appear.
type Tracker struct {
	key  Key
	opts Options
	log  *slog.Logger

	mu sync.Mutex
	// pending holds, per folder, the base names still expected; a folder
	// is dropped when its set empties. Base names keep the memory of a
	// 100,000-file stage small.
	pending  map[string]map[string]struct{}
	need     int
	computed int
	refs     int
	err      error

	registry *Registry
	cancel   context.CancelFunc
	dirty    chan struct{}
	done     chan struct{}
}

// Start starts a tracker that runs until every expected file appeared or ctx
// ends. Most callers go through a Registry, which reuses a running tracker.
func Start(ctx context.Context, opts Options) *Tracker {
	t := newTracker(opts)
	ctx, t.cancel = context.WithCancel(ctx)
	go t.run(ctx)
	return t
}

func newTracker(opts Options) *Tracker {
	if opts.Reconcile <= 0 {
		opts.Reconcile = DefaultReconcile
	}
	if opts.Poll <= 0 {
		opts.Poll = DefaultPoll
	}
	if opts.StoreEvery <= 0 {
		opts.StoreEvery = DefaultStoreEvery
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	t := &Tracker{
		key: opts.Key, opts: opts, log: log.With("job_id", opts.Key.JobID, "stage", opts.Key.Stage, "step", "track"),
		pending: map[string]map[string]struct{}{},
		dirty:   make(chan struct{}, 1), done: make(chan struct{}),
	}
	for _, p := range opts.Paths {
		dir, name := filepath.Split(filepath.Clean(p))
		dir = filepath.Clean(dir)
		set := t.pending[dir]
		if set == nil {
			set = map[string]struct{}{}
			t.pending[dir] = set
		}
		if _, dup := set[name]; !dup {
			set[name] = struct{}{}
			t.need++
		}
	}
	return t
}

// Key is the tracked job stage.
func (t *Tracker) Key() Key { return t.key }

// Need is the number of distinct expected files.
func (t *Tracker) Need() int { return t.need }

// Computed is the number of expected files that appeared so far.
func (t *Tracker) Computed() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.computed
}

// Done is closed when the tracker stopped: every file appeared, or its
// context ended, or Stop was called.
func (t *Tracker) Done() <-chan struct{} { return t.done }

// Complete reports whether every expected file appeared.
func (t *Tracker) Complete() bool {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.computed == t.need
}

// Err is the error that stopped the tracker early (the watch folders could
// not be created or listed), or nil.
func (t *Tracker) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.err
}

// Stop stops the tracker and waits for its last stored count.
func (t *Tracker) Stop() {
	t.cancel()
	<-t.done
}

func (t *Tracker) run(ctx context.Context) {
	storerDone := make(chan struct{})
	quit := make(chan struct{})
	go t.storer(quit, storerDone)
	defer func() {
		close(quit)
		<-storerDone
		if t.registry != nil {
			t.registry.remove(t)
		}
		close(t.done)
	}()
	if err := t.watchAndTrack(ctx); err != nil {
		t.mu.Lock()
		t.err = err
		t.mu.Unlock()
		t.log.Warn("progress tracker stopped", "error", err)
	}
}

func (t *Tracker) watchAndTrack(ctx context.Context) error {
	if t.need == 0 {
		return nil
	}
	dirs := t.dirs()
	for _, d := range dirs {
		// fsnotify watches existing folders only, and is not recursive:
		// every folder an expected file lives in is created and watched.
		if err := mediaroot.MkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("create watch folder %s: %w", d, err)
		}
	}
	var n notifier
	interval := t.opts.Poll
	if !t.opts.NoNotify {
		mk := t.opts.newNotifier
		if mk == nil {
			mk = newFSNotifier
		}
		w, err := mk()
		if err != nil {
			t.log.Warn("file notifications unavailable; polling", "error", err)
		} else {
			defer w.Close()
			n = w
			interval = t.opts.Reconcile
			for _, d := range dirs {
				if err := w.Add(d); err != nil {
					// Usually the inotify watch limit: that folder is
					// covered by sweeps, at the polling interval.
					t.log.Warn("watch folder; polling it", "dir", d, "error", err)
					interval = t.opts.Poll
				}
			}
		}
	}
	// The first sweep runs after the watches are in place, so a file renamed
	// in between is seen by one or the other.
	if _, err := t.reconcile(SourceReconcile); err != nil {
		return err
	}
	if t.opts.onWatching != nil {
		t.opts.onWatching()
	}
	var events <-chan fsnotify.Event
	var errs <-chan error
	if n != nil {
		events, errs = n.Events(), n.Errors()
	}
	ticker := time.NewTicker(interval)
	defer ticker.Stop()
	for !t.Complete() {
		select {
		case <-ctx.Done():
			return nil
		case ev, ok := <-events:
			if !ok {
				events = nil
				ticker.Reset(t.opts.Poll)
				continue
			}
			if ev.Has(fsnotify.Create) {
				dir, name := filepath.Split(ev.Name)
				if t.found(filepath.Clean(dir), name) {
					t.report(SourceNotify, 1)
				}
			}
		case err, ok := <-errs:
			if !ok {
				errs = nil
				continue
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				// Events were dropped: only a full rescan knows which.
				if _, err := t.reconcile(SourceOverflow); err != nil {
					return err
				}
				continue
			}
			t.log.Warn("file notifications", "error", err)
		case <-ticker.C:
			got, err := t.reconcile(SourceReconcile)
			if err != nil {
				return err
			}
			if got > 0 && interval != t.opts.Poll && n != nil {
				// Files appeared that notifications never reported: the
				// folder is on shared storage written by another host.
				// Sweep at the polling interval from now on.
				t.log.Info("notifications missed files; polling faster", "found", got, "interval", t.opts.Poll.String())
				interval = t.opts.Poll
				ticker.Reset(interval)
			}
		}
	}
	return nil
}

// dirs lists the folders with pending files.
func (t *Tracker) dirs() []string {
	t.mu.Lock()
	defer t.mu.Unlock()
	out := make([]string, 0, len(t.pending))
	for d := range t.pending {
		out = append(out, d)
	}
	return out
}

// found marks dir/name present; it reports whether the file was expected
// and not yet counted.
func (t *Tracker) found(dir, name string) bool {
	if strings.HasPrefix(name, ".") {
		// Hidden temp names of the cache write protocol (fsutil).
		return false
	}
	t.mu.Lock()
	set := t.pending[dir]
	_, ok := set[name]
	if ok {
		delete(set, name)
		if len(set) == 0 {
			delete(t.pending, dir)
		}
		t.computed++
	}
	t.mu.Unlock()
	if ok {
		t.markDirty()
	}
	return ok
}

// reconcile lists every folder with pending files once (no per-file stat)
// and counts the expected regular files it holds.
func (t *Tracker) reconcile(src Source) (int, error) {
	got := 0
	for _, dir := range t.dirs() {
		names, err := listRegular(dir)
		if errors.Is(err, os.ErrNotExist) {
			// Removed under us (a cleanup of the whole cache folder):
			// its files will come back with the folder.
			continue
		}
		if err != nil {
			return got, err
		}
		t.mu.Lock()
		set := t.pending[dir]
		for _, name := range names {
			if _, ok := set[name]; ok {
				delete(set, name)
				got++
				t.computed++
			}
		}
		if len(set) == 0 {
			delete(t.pending, dir)
		}
		t.mu.Unlock()
	}
	if got > 0 {
		t.markDirty()
		t.report(src, got)
	}
	return got, nil
}

// listRegular returns the names of the regular files in dir, unsorted: the
// directory is read once with the entry types getdents gives (no stat per
// file where the file system reports types).
func listRegular(dir string) ([]string, error) {
	f, err := os.Open(dir)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	entries, err := f.ReadDir(-1)
	if err != nil {
		return nil, fmt.Errorf("list %s: %w", dir, err)
	}
	names := make([]string, 0, len(entries))
	for _, e := range entries {
		if e.Type().IsRegular() {
			names = append(names, e.Name())
		}
	}
	return names, nil
}

func (t *Tracker) report(src Source, n int) {
	if t.opts.OnFound != nil {
		t.opts.OnFound(src, n)
	}
}

func (t *Tracker) markDirty() {
	select {
	case t.dirty <- struct{}{}:
	default:
	}
}

// storer writes the count when it changed, at most every StoreEvery: the
// first change after a quiet spell is written at once, later ones wait for
// the gap. It writes a last time when the tracker stops.
func (t *Tracker) storer(quit <-chan struct{}, done chan<- struct{}) {
	defer close(done)
	last := -1
	store := func(ctx context.Context) {
		c := t.Computed()
		if c == last || t.opts.Store == nil {
			return
		}
		if err := t.opts.Store(ctx, c); err != nil {
			t.log.Warn("store embedding progress", "computed", c, "error", err)
			return
		}
		last = c
	}
	final := func() {
		ctx, cancel := context.WithTimeout(context.Background(), finalStoreTimeout)
		defer cancel()
		store(ctx)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		// A store in flight when the tracker stops is abandoned after
		// finalStoreTimeout; the final store writes the count again.
		<-quit
		time.AfterFunc(finalStoreTimeout, cancel)
	}()
	gap := time.NewTimer(0)
	defer gap.Stop()
	for {
		select {
		case <-t.dirty:
		case <-quit:
			final()
			return
		}
		store(ctx)
		gap.Reset(t.opts.StoreEvery)
		select {
		case <-gap.C:
		case <-quit:
			final()
			return
		}
	}
}
