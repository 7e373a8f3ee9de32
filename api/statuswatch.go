package api

import (
	"context"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// This file keeps jobs' statuses in memory so that reading one costs no
// database round trip when nothing changed, and lets requests wait for a
// change: one watcher per watched job re-reads it when a change is announced
// (store.OnJobChange: this process's writes, and on Postgres every process's)
// or its time-to-live passes (writes of another process), and wakes every
// request waiting on that job. A waiting request reads nothing itself.
//
// While the store hears of every write (store.SeesAllWrites: Postgres with
// its listener connected, SQLite with no other process on the file, as in
// `kinflow dev` alone), a snapshot stays good until a change names its job,
// up to statusCompleteFeedTTL; a Pending job's queue position, which moves
// with other jobs, is then read again alone after any change, from one list
// of the Pending jobs shared by every waiting job (queuepos.go).
// In a burst of 200 jobs the watchers' once-a-second re-read of four tables
// per waiting job was a quarter of kinflow's CPU (docs/BENCHMARKS.md).

// statusRecheckDelay is when a job is read again after a change notice: a
// write inside a transaction is announced before its commit, so the read at
// once may still see the old row; 50 ms is well past the commit of the
// store's short transactions.
const statusRecheckDelay = 50 * time.Millisecond

// statusWatchMinTick is the slowest a watcher re-reads its job with a zero
// cache time-to-live (KINFLOW_STATUS_CACHE_MS=0), so that it still notices a
// change written by another process.
const statusWatchMinTick = time.Second

// statusCompleteFeedTTL is the longest a snapshot is served while the store
// hears of every write: a bound on what a notice the feed cannot carry would
// leave stale (a Postgres listener whose connection died silently, a row
// deleted by another process).
const statusCompleteFeedTTL = 30 * time.Second

// statusHub is the status cache and the per-job watchers of one Server.
type statusHub struct {
	load func(ctx context.Context, id string) (*statusSnap, error)
	// queue answers a Pending job's queue position when only that can have
	// moved (nil: load the job again).
	queue *queueBoard
	// complete reports whether the store hears of every write now (nil:
	// never).
	complete func() bool
	ttl      time.Duration

	mu sync.Mutex
	// all is bumped by a change that names no job (every entry is stale),
	// any by every change (a Pending job's queue position depends on other
	// jobs).
	all, any uint64
	// allAt is when the last change that names no job was announced,
	// anyAt when the last change was.
	allAt, anyAt time.Time
	entries      map[string]*statusEntry
	// sweepAt is the entry count above which stale entries are dropped.
	sweepAt int
}

// statusEntry is one job's cached snapshot and its waiters.
type statusEntry struct {
	gen uint64 // bumped by each change of this job
	// changedAt is when the last change of this job was announced.
	changedAt               time.Time
	snap                    *statusSnap
	snapGen, snapAll, snapA uint64
	// loadedFrom is when the snapshot's read began.
	loadedFrom time.Time
	// loading is non-nil while one goroutine reads the job; others wait
	// for it instead of reading too.
	loading chan struct{}
	// wake is closed (and replaced) when the watcher publishes a snapshot
	// with a new ETag.
	wake      chan struct{}
	published string
	waiters   int
	watching  bool
	poke      chan struct{}
}

func newStatusHub(ttl time.Duration, load func(context.Context, string) (*statusSnap, error)) *statusHub {
	return &statusHub{load: load, ttl: ttl, entries: map[string]*statusEntry{}, sweepAt: 1024}
}

// staleness says what a cached snapshot needs before it may be served.
type staleness int

const (
	snapFresh    staleness = iota // served as it is
	snapQueuePos                  // its queue position read again
	snapStale                     // read again whole
)

// entryLocked returns id's entry, creating it.
func (h *statusHub) entryLocked(id string) *statusEntry {
	e := h.entries[id]
	if e == nil {
		if len(h.entries) >= h.sweepAt {
			h.sweepLocked()
		}
		e = &statusEntry{wake: make(chan struct{}), poke: make(chan struct{}, 1)}
		h.entries[id] = e
	}
	return e
}

// sweepLocked drops the entries nobody waits on whose snapshot is stale.
func (h *statusHub) sweepLocked() {
	for id, e := range h.entries {
		if e.waiters == 0 && e.loading == nil && !h.freshLocked(e) {
			delete(h.entries, id)
		}
	}
	h.sweepAt = max(1024, 2*len(h.entries))
}

// freshLocked reports whether e's snapshot may be served without a read.
func (h *statusHub) freshLocked(e *statusEntry) bool {
	return h.stalenessLocked(e) == snapFresh
}

// stalenessLocked says whether e's snapshot may be served, needs its queue
// position read again, or needs a whole read.
func (h *statusHub) stalenessLocked(e *statusEntry) staleness {
	if e.snap == nil || e.snapGen != e.gen || e.snapAll != h.all || h.ttl <= 0 {
		return snapStale
	}
	// A read that began within statusRecheckDelay of a change notice may
	// have missed the write's commit: it is not served again.
	if !e.loadedFrom.After(e.changedAt.Add(statusRecheckDelay)) || !e.loadedFrom.After(h.allAt.Add(statusRecheckDelay)) {
		return snapStale
	}
	pending := e.snap.job.Status == store.JobPending || e.snap.job.Status == store.JobSubmitting
	age := time.Since(e.loadedFrom)
	if h.complete != nil && h.complete() && age < statusCompleteFeedTTL {
		// Every write is announced: a Pending job's queue position, which
		// moves with other jobs' writes, is all that can have changed
		// without its own; it is read again alone.
		if pending && e.snapA != h.any {
			return snapQueuePos
		}
		return snapFresh
	}
	if age >= h.ttl {
		return snapStale
	}
	if e.snapA == h.any || !pending {
		return snapFresh
	}
	return snapStale
}

// changed is the store's change notice for job id ("" for any job).
func (h *statusHub) changed(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.any++
	h.anyAt = time.Now()
	if id == "" {
		h.all++
		h.allAt = h.anyAt
		for _, e := range h.entries {
			h.pokeLocked(e)
		}
		return
	}
	if e := h.entries[id]; e != nil {
		e.gen++
		e.changedAt = time.Now()
		h.pokeLocked(e)
	}
}

// pokeLocked asks e's watcher, if any, to read the job again.
func (h *statusHub) pokeLocked(e *statusEntry) {
	select {
	case e.poke <- struct{}{}:
	default:
	}
}

// get returns job id's snapshot: from memory while fresh, else read once
// for every concurrent caller.
func (h *statusHub) get(ctx context.Context, id string) (*statusSnap, error) {
	h.mu.Lock()
	e := h.entryLocked(id)
	var need staleness
	for {
		if need = h.stalenessLocked(e); need == snapFresh {
			sn := e.snap
			h.mu.Unlock()
			return sn, nil
		}
		if e.loading == nil {
			break
		}
		ch := e.loading
		h.mu.Unlock()
		select {
		case <-ch:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		h.mu.Lock()
	}
	ch := make(chan struct{})
	e.loading = ch
	g, all, any, anyAt, from, old := e.gen, h.all, h.any, h.anyAt, time.Now(), e.snap
	h.mu.Unlock()

	var (
		sn  *statusSnap
		err error
	)
	if need == snapQueuePos && h.queue != nil {
		var pos int
		if pos, err = h.queue.position(ctx, old.job.SubmittedAt, any, anyAt); err == nil {
			sn = old.withQueuePos(pos)
		}
	} else {
		need = snapStale
		sn, err = h.load(ctx, id)
	}

	h.mu.Lock()
	defer h.mu.Unlock()
	e.loading = nil
	close(ch)
	if err != nil {
		return nil, err
	}
	if need == snapQueuePos {
		// The rest of the snapshot is as good as it was: its job's
		// generation and read time stay.
		e.snap, e.snapA = sn, any
		return sn, nil
	}
	e.snap, e.snapGen, e.snapAll, e.snapA, e.loadedFrom = sn, g, all, any, from
	return sn, nil
}

// wait holds until job id's ETag differs from etag, ctx ends or deadline
// passes; it returns the newest snapshot and whether it differs.
func (h *statusHub) wait(ctx context.Context, id, etag string, deadline time.Time) (*statusSnap, bool, error) {
	h.mu.Lock()
	e := h.entryLocked(id)
	e.waiters++
	if !e.watching {
		e.watching = true
		go h.watch(id, e)
	}
	defer func() {
		h.mu.Lock()
		e.waiters--
		h.mu.Unlock()
	}()
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		sn := e.snap
		if sn != nil && sn.etag != etag {
			h.mu.Unlock()
			return sn, true, nil
		}
		wake := e.wake
		h.mu.Unlock()
		select {
		case <-wake:
		case <-ctx.Done():
			return sn, false, ctx.Err()
		case <-timer.C:
			return sn, false, nil
		}
		h.mu.Lock()
	}
}

// watch is job id's watcher: while anyone waits on it, it re-reads the job
// when poked or when its snapshot's time-to-live passes, and wakes the
// waiters when the ETag changed.
//
// A poke is answered statusRecheckDelay after the newest change notice, not
// at once: a write inside a transaction is announced before its commit, so
// a read at once could miss it, and the notices a job's step writes come
// together (a job's ~15 writes came in bursts a few milliseconds apart), so
// one read answers all of them. Reading at once and again after the delay,
// as before, cost two reads or more per notice: in a burst of 200 small
// jobs, 12 % of kinflow's CPU went to these reads (docs/BENCHMARKS.md).
func (h *statusHub) watch(id string, e *statusEntry) {
	tick := h.ttl
	if tick <= 0 {
		tick = statusWatchMinTick
	}
	t := time.NewTicker(tick)
	defer t.Stop()
	settle := time.NewTimer(0)
	<-settle.C
	defer settle.Stop()
	for {
		h.mu.Lock()
		if e.waiters == 0 {
			e.watching = false
			h.mu.Unlock()
			return
		}
		h.mu.Unlock()
		select {
		case <-e.poke:
			// Wait until the newest notice is statusRecheckDelay old;
			// notices that come meanwhile move the wait on.
			for {
				h.mu.Lock()
				wait := time.Until(later(e.changedAt, h.allAt).Add(statusRecheckDelay + time.Millisecond))
				h.mu.Unlock()
				if wait <= 0 {
					break
				}
				settle.Reset(wait)
				<-settle.C
			}
		case <-t.C:
		}
		// A read bounded like a request's: a stuck database must not hold
		// the watcher for ever.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		sn, err := h.get(ctx, id)
		cancel()
		if err != nil {
			continue
		}
		h.mu.Lock()
		if sn.etag != e.published {
			e.published = sn.etag
			close(e.wake)
			e.wake = make(chan struct{})
		}
		h.mu.Unlock()
	}
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
