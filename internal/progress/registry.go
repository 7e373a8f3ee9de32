package progress

import (
	"context"
	"sync"
)

// Registry holds the running trackers of one process, one per job: a second
// caller for the same job stage gets the running tracker (its counters are
// not reset, so a retried activity does not count the same files twice),
// and a tracker of a later stage of the same job replaces the earlier one,
// which stops as done.
type Registry struct {
	mu    sync.Mutex
	byJob map[string]*Tracker
}

// NewRegistry returns an empty registry.
func NewRegistry() *Registry {
	return &Registry{byJob: map[string]*Tracker{}}
}

// Acquire returns the running tracker of opts.Key, or starts one from opts.
// reused reports whether it was already running. Every Acquire must be
// paired with Release; the tracker stops when the last holder releases it or
// every expected file appeared.
func (r *Registry) Acquire(opts Options) (t *Tracker, reused bool) {
	r.mu.Lock()
	old := r.byJob[opts.Key.JobID]
	if old != nil && old.key == opts.Key {
		select {
		case <-old.done:
		default:
			old.mu.Lock()
			old.refs++
			old.mu.Unlock()
			r.mu.Unlock()
			return old, true
		}
	}
	t = newTracker(opts)
	t.registry = r
	t.refs = 1
	// A tracker runs on its own context: it outlives the caller that started
	// it while another holder still waits on it.
	var ctx context.Context
	ctx, t.cancel = context.WithCancel(context.Background())
	r.byJob[opts.Key.JobID] = t
	r.mu.Unlock()
	if old != nil && old.key != opts.Key {
		// A different stage of the same job: the earlier stage's
		// embedding phase is over.
		old.cancel()
	}
	go t.run(ctx)
	return t, false
}

// Release drops one holder of t; the last one stops it and waits for its
// final stored count.
func (t *Tracker) Release() {
	t.mu.Lock()
	t.refs--
	last := t.refs <= 0
	t.mu.Unlock()
	if last {
		t.Stop()
	}
}

// Running is the number of running trackers.
func (r *Registry) Running() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.byJob)
}

// Get returns the running tracker of key, if any.
func (r *Registry) Get(key Key) (*Tracker, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	t, ok := r.byJob[key.JobID]
	if !ok || t.key != key {
		return nil, false
	}
	return t, true
}

func (r *Registry) remove(t *Tracker) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.byJob[t.key.JobID] == t {
		delete(r.byJob, t.key.JobID)
	}
}
