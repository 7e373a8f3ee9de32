package progress

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// commit writes path as the cache writers do (fsutil): a hidden
// temp file in the same folder, renamed to the final name. No fsync: the
// tracker sees the same events without it.
func commit(t testing.TB, path string) {
	t.Helper()
	tmp, err := fsutil.WriteTemp(path, 0o644, false, func(w io.Writer) error {
		_, err := io.WriteString(w, "x")
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := tmp.Commit(); err != nil {
		t.Fatal(err)
	}
}

// expected lays out n expected files over the given family folders.
func expected(root string, n int, families ...string) []string {
	var out []string
	for i := 0; i < n; i++ {
		f := families[i%len(families)]
		out = append(out, filepath.Join(root, f, fmt.Sprintf("seq%05d.npy", i)))
	}
	return out
}

// recorder is a StoreFunc keeping every stored value.
type recorder struct {
	mu     sync.Mutex
	values []int
	times  []time.Time
}

func (r *recorder) store(_ context.Context, n int) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.values = append(r.values, n)
	r.times = append(r.times, time.Now())
	return nil
}

func (r *recorder) last() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.values) == 0 {
		return -1
	}
	return r.values[len(r.values)-1]
}

func (r *recorder) snapshot() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.values...)
}

// watching sets opts' onWatching hook and returns a wait for it: the
// tracker's watches are in place and its first sweep is done, so a file
// committed after the wait is found by a notification.
func watching(t testing.TB, opts *Options) func() {
	ch := make(chan struct{})
	var once sync.Once
	opts.onWatching = func() { once.Do(func() { close(ch) }) }
	return func() {
		t.Helper()
		select {
		case <-ch:
		case <-time.After(2 * time.Second):
			t.Fatal("the tracker did not start watching within 2s")
		}
	}
}

// waitDone waits for tr to stop.
func waitDone(t testing.TB, tr *Tracker, within time.Duration) {
	t.Helper()
	select {
	case <-tr.Done():
	case <-time.After(within):
		t.Fatalf("tracker still running after %v with %d of %d", within, tr.Computed(), tr.Need())
	}
}

func waitFor(t testing.TB, within time.Duration, what string, cond func() bool) time.Duration {
	t.Helper()
	start := time.Now()
	for !cond() {
		if time.Since(start) > within {
			t.Fatalf("%s: not within %v", what, within)
		}
		time.Sleep(2 * time.Millisecond)
	}
	return time.Since(start)
}

func TestFilesAppearingInWatchedFoldersAreCounted(t *testing.T) {
	root := t.TempDir()
	paths := expected(root, 30, "prot_t5_last/mean_vecs", "esm2_layer_26/mean_vecs")
	var rec recorder
	// Sweeps once an hour: only notifications can count these files in time.
	opts := Options{Key: Key{"job", 0}, Paths: paths, Store: rec.store, Reconcile: time.Hour, Poll: time.Hour}
	wait := watching(t, &opts)
	tr := Start(context.Background(), opts)
	defer tr.Stop()
	wait()
	// The folders did not exist: the tracker creates them to watch them.
	if _, err := os.Stat(filepath.Dir(paths[1])); err != nil {
		t.Fatalf("watch folder not created: %v", err)
	}
	// Files nobody expects, and hidden temp files, are never counted.
	commit(t, filepath.Join(root, "prot_t5_last/mean_vecs", "other.npy"))
	if err := os.WriteFile(filepath.Join(filepath.Dir(paths[0]), ".seq00000.abc.npy"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for i, p := range paths[:10] {
		commit(t, p)
		waitFor(t, time.Second, fmt.Sprintf("file %d counted", i), func() bool { return tr.Computed() == i+1 })
	}
	for _, p := range paths[10:] {
		commit(t, p)
	}
	waitDone(t, tr, 3*time.Second)
	if !tr.Complete() || tr.Computed() != 30 {
		t.Fatalf("computed %d of %d", tr.Computed(), tr.Need())
	}
	vals := rec.snapshot()
	if vals[len(vals)-1] != 30 {
		t.Fatalf("last stored %v, want 30", vals)
	}
	for i := 1; i < len(vals); i++ {
		if vals[i] <= vals[i-1] {
			t.Fatalf("stored values not increasing: %v", vals)
		}
	}
}

func TestStoresAtMostEveryStoreEveryAndOnlyOnChange(t *testing.T) {
	root := t.TempDir()
	paths := expected(root, 200, "fam")
	var rec recorder
	opts := Options{Key: Key{"job", 0}, Paths: paths, Store: rec.store, StoreEvery: 100 * time.Millisecond, Reconcile: time.Hour}
	wait := watching(t, &opts)
	tr := Start(context.Background(), opts)
	defer tr.Stop()
	wait()
	start := time.Now()
	for i, p := range paths {
		commit(t, p)
		if i%20 == 0 {
			// The workload, not a wait: files keep coming for about
			// 300 ms, so the 100 ms store spacing is exercised.
			time.Sleep(30 * time.Millisecond)
		}
	}
	waitDone(t, tr, 5*time.Second)
	elapsed := time.Since(start)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	// One write at once, then one per 100 ms gap, plus the final write.
	if max := int(elapsed/(100*time.Millisecond)) + 2; len(rec.values) > max {
		t.Fatalf("%d writes in %v, want at most %d: %v", len(rec.values), elapsed, max, rec.values)
	}
	for i := 1; i < len(rec.times); i++ {
		if gap := rec.times[i].Sub(rec.times[i-1]); gap < 95*time.Millisecond && i < len(rec.times)-1 {
			t.Fatalf("writes %d and %d only %v apart", i-1, i, gap)
		}
		if rec.values[i] == rec.values[i-1] {
			t.Fatalf("unchanged count written twice: %v", rec.values)
		}
	}
	if rec.values[len(rec.values)-1] != 200 {
		t.Fatalf("last write %v", rec.values)
	}
}

// blind is fsnotify that never delivers an event: a folder on shared storage
// written by another host, where inotify sees nothing.
type blind struct{ notifier }

func (blind) Events() <-chan fsnotify.Event { return nil }

func TestReconciliationFindsFilesNotificationsMiss(t *testing.T) {
	for _, tc := range []struct {
		name string
		opts Options
		// interval is the sweep interval the files must be found within.
		interval time.Duration
	}{
		{"notifications off", Options{NoNotify: true, Poll: 300 * time.Millisecond}, 300 * time.Millisecond},
		{"written where the watcher cannot see", Options{Reconcile: 300 * time.Millisecond, Poll: 300 * time.Millisecond,
			newNotifier: func() (notifier, error) {
				n, err := newFSNotifier()
				return blind{n}, err
			}}, 300 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			root := t.TempDir()
			paths := expected(root, 6, "a", "b")
			var rec recorder
			opts := tc.opts
			opts.Key, opts.Paths, opts.Store = Key{"job", 1}, paths, rec.store
			wait := watching(t, &opts)
			tr := Start(context.Background(), opts)
			defer tr.Stop()
			wait()
			for i, p := range paths {
				commit(t, p)
				// Found by the next sweep: within one interval, plus the
				// store and a little scheduling slack.
				took := waitFor(t, tc.interval+200*time.Millisecond, fmt.Sprintf("file %d found", i), func() bool { return rec.last() == i+1 })
				t.Logf("file %d found after %v", i, took)
			}
			waitDone(t, tr, 2*time.Second)
		})
	}
}

// overflowing drops every event it is told to and reports an overflow on
// demand, as inotify does when its queue fills up.
type overflowing struct {
	notifier
	mu   sync.Mutex
	drop bool
	// dropped counts the dropped Create events of visible names.
	dropped int
	events  chan fsnotify.Event
	errs    chan error
}

func newOverflowing() (*overflowing, error) {
	n, err := newFSNotifier()
	if err != nil {
		return nil, err
	}
	o := &overflowing{notifier: n, events: make(chan fsnotify.Event), errs: make(chan error, 1)}
	go func() {
		for ev := range n.Events() {
			o.mu.Lock()
			drop := o.drop
			if drop && ev.Has(fsnotify.Create) && !strings.HasPrefix(filepath.Base(ev.Name), ".") {
				o.dropped++
			}
			o.mu.Unlock()
			if !drop {
				o.events <- ev
			}
		}
		close(o.events)
	}()
	return o, nil
}

func (o *overflowing) Events() <-chan fsnotify.Event { return o.events }
func (o *overflowing) Errors() <-chan error          { return o.errs }

func TestOverflowTriggersFullRescan(t *testing.T) {
	root := t.TempDir()
	paths := expected(root, 40, "a", "b", "c")
	ov, err := newOverflowing()
	if err != nil {
		t.Fatal(err)
	}
	found := map[Source]int{}
	var mu sync.Mutex
	opts := Options{Key: Key{"job", 0}, Paths: paths, Reconcile: time.Hour, Poll: time.Hour,
		newNotifier: func() (notifier, error) { return ov, nil },
		OnFound: func(s Source, n int) {
			mu.Lock()
			found[s] += n
			mu.Unlock()
		}}
	wait := watching(t, &opts)
	tr := Start(context.Background(), opts)
	defer tr.Stop()
	wait()
	for _, p := range paths[:10] {
		commit(t, p)
	}
	waitFor(t, 2*time.Second, "first files by notification", func() bool { return tr.Computed() == 10 })
	ov.mu.Lock()
	ov.drop = true
	ov.mu.Unlock()
	for _, p := range paths[10:] {
		commit(t, p)
	}
	// Every event of the 30 files reached the notifier and was dropped: the
	// tracker cannot have seen them.
	waitFor(t, 2*time.Second, "30 events dropped", func() bool {
		ov.mu.Lock()
		defer ov.mu.Unlock()
		return ov.dropped == 30
	})
	if got := tr.Computed(); got != 10 {
		t.Fatalf("dropped events counted: %d", got)
	}
	ov.errs <- fsnotify.ErrEventOverflow
	waitFor(t, time.Second, "rescan after overflow", func() bool { return tr.Complete() })
	mu.Lock()
	defer mu.Unlock()
	if found[SourceNotify] != 10 || found[SourceOverflow] != 30 {
		t.Fatalf("found by source %v", found)
	}
}

func TestRegistryReusesTrackerOfSameStage(t *testing.T) {
	root := t.TempDir()
	paths := expected(root, 10, "a")
	reg := NewRegistry()
	var rec recorder
	opts := Options{Key: Key{"job", 0}, Paths: paths, Store: rec.store}
	wait := watching(t, &opts)
	t1, reused := reg.Acquire(opts)
	if reused {
		t.Fatal("first Acquire reported reuse")
	}
	wait()
	for _, p := range paths[:4] {
		commit(t, p)
	}
	waitFor(t, 2*time.Second, "four counted", func() bool { return t1.Computed() == 4 })

	// A second holder (a retried activity on the same worker) gets the
	// same tracker, counters intact, even when it passes other paths.
	t2, reused := reg.Acquire(Options{Key: Key{"job", 0}, Paths: paths[:1], Store: rec.store})
	if !reused || t2 != t1 || t2.Computed() != 4 || t2.Need() != 10 {
		t.Fatalf("second Acquire: reused=%v same=%v computed=%d need=%d", reused, t2 == t1, t2.Computed(), t2.Need())
	}
	if reg.Running() != 1 {
		t.Fatalf("%d trackers running, want 1", reg.Running())
	}
	// The first holder leaving does not stop it: it still counts a file
	// written after the release.
	t1.Release()
	commit(t, paths[4])
	waitFor(t, 2*time.Second, "fifth counted", func() bool { return t2.Computed() == 5 })
	select {
	case <-t1.Done():
		t.Fatal("tracker stopped while a holder remains")
	default:
	}

	// A later stage of the same job replaces it.
	t3, reused := reg.Acquire(Options{Key: Key{"job", 1}, Paths: expected(root, 3, "b")})
	if reused || t3 == t2 {
		t.Fatal("another stage reused the tracker")
	}
	waitDone(t, t2, 2*time.Second)
	if rec.last() != 5 {
		t.Fatalf("last stored %d, want 5", rec.last())
	}
	t2.Release()
	t3.Release()
	waitDone(t, t3, 2*time.Second)
	if reg.Running() != 0 {
		t.Fatalf("%d trackers left", reg.Running())
	}
	// Once stopped, the same stage starts afresh from the files on disk.
	t4, reused := reg.Acquire(opts)
	defer t4.Release()
	if reused {
		t.Fatal("stopped tracker reused")
	}
	waitFor(t, 2*time.Second, "resumed from disk", func() bool { return t4.Computed() == 5 })
}

func TestRestartMidStageResumesFromFiles(t *testing.T) {
	root := t.TempDir()
	paths := expected(root, 20, "a", "b")
	// One counter shared by both "processes", as the database row is; like
	// store.SetEmbeddingComputed it never goes down.
	var mu sync.Mutex
	stored := 0
	store := func(_ context.Context, n int) error {
		mu.Lock()
		defer mu.Unlock()
		if n > stored {
			stored = n
		}
		return nil
	}
	get := func() int { mu.Lock(); defer mu.Unlock(); return stored }

	first := NewRegistry()
	opts := Options{Key: Key{"job", 0}, Paths: paths, Store: store}
	wait := watching(t, &opts)
	t1, _ := first.Acquire(opts)
	wait()
	for _, p := range paths[:7] {
		commit(t, p)
	}
	waitFor(t, 2*time.Second, "seven stored", func() bool { return get() == 7 })
	t1.Release() // the worker dies
	waitDone(t, t1, 2*time.Second)
	for _, p := range paths[7:12] { // the GPU host keeps writing meanwhile
		commit(t, p)
	}
	second := NewRegistry() // a new worker process
	t2, reused := second.Acquire(Options{Key: Key{"job", 0}, Paths: paths, Store: store})
	defer t2.Release()
	if reused {
		t.Fatal("a new process reused a tracker")
	}
	waitFor(t, 2*time.Second, "twelve counted from disk", func() bool { return t2.Computed() == 12 && get() == 12 })
	for _, p := range paths[12:] {
		commit(t, p)
	}
	waitDone(t, t2, 3*time.Second)
	if get() != 20 {
		t.Fatalf("stored %d, want 20", get())
	}
}

func TestNothingExpectedIsDoneAtOnce(t *testing.T) {
	tr := Start(context.Background(), Options{Key: Key{"job", 0}})
	waitDone(t, tr, time.Second)
	if !tr.Complete() || tr.Err() != nil {
		t.Fatalf("complete=%v err=%v", tr.Complete(), tr.Err())
	}
}

func TestUncreatableWatchFolderIsAnError(t *testing.T) {
	root := t.TempDir()
	blocker := filepath.Join(root, "file")
	if err := os.WriteFile(blocker, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	tr := Start(context.Background(), Options{Key: Key{"job", 0}, Paths: []string{filepath.Join(blocker, "sub", "x.npy")}})
	waitDone(t, tr, 2*time.Second)
	if tr.Err() == nil {
		t.Fatal("no error for a folder under a file")
	}
}
