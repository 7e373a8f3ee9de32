package api

import (
	"context"
	"sort"
	"sync"
	"time"
)

// queueBoard answers Pending jobs' queue positions from one shared read of
// every Pending job's submit time, instead of one count per job: in a burst
// of 200 small jobs on the production topology, each waiting job's watcher
// counted the queue once a second (13 counts per job, docs/BENCHMARKS.md),
// while one list of the Pending jobs' submit times answers them all.
//
// The list is read again when a job changed since it was read (the status
// hub's change generation), but at most once per queuePosMaxAge: a position
// it answers is at most that old. A list read within statusRecheckDelay of a
// change notice is not trusted as exact, as the status cache's snapshots are
// not (the write may have been announced before its commit). Past
// queueListCap Pending jobs the list stops there, and a job behind its last
// entry is counted alone.
type queueBoard struct {
	// read returns the submit times of the first limit Pending jobs,
	// oldest first, and whether they are all of them.
	read func(ctx context.Context, limit int) ([]time.Time, bool, error)
	// count is 1 + the number of Pending jobs submitted before t.
	count  func(ctx context.Context, t time.Time) (int, error)
	maxAge time.Duration
	limit  int

	mu    sync.Mutex
	times []time.Time
	full  bool
	have  bool
	// gen is the hub's change generation, and from when the read began.
	gen  uint64
	from time.Time
	// loading is non-nil while one goroutine reads the list.
	loading chan struct{}
}

// queuePosMaxAge bounds how old a queue position may be when jobs move
// (one list read per interval for every waiting job of the process).
const queuePosMaxAge = 250 * time.Millisecond

// queueListCap is the most Pending jobs' submit times the shared list
// holds; a job behind them has its position counted alone.
const queueListCap = 10000

func newQueueBoard(read func(context.Context, int) ([]time.Time, bool, error), count func(context.Context, time.Time) (int, error)) *queueBoard {
	return &queueBoard{read: read, count: count, maxAge: queuePosMaxAge, limit: queueListCap}
}

// position is the queue position of a Pending job submitted at
// submittedAt: 1 + the Pending jobs submitted before it. gen and changedAt
// are the hub's change generation and the time of its last change notice.
func (q *queueBoard) position(ctx context.Context, submittedAt time.Time, gen uint64, changedAt time.Time) (int, error) {
	q.mu.Lock()
	for !q.usableLocked(gen, changedAt) {
		if q.loading != nil {
			ch := q.loading
			q.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				return 0, ctx.Err()
			}
			q.mu.Lock()
			continue
		}
		ch := make(chan struct{})
		q.loading = ch
		from := time.Now()
		q.mu.Unlock()
		times, full, err := q.read(ctx, q.limit)
		q.mu.Lock()
		q.loading = nil
		close(ch)
		if err != nil {
			q.mu.Unlock()
			return 0, err
		}
		q.times, q.full, q.have, q.gen, q.from = times, full, true, gen, from
		// What was just read answers this caller whatever came meanwhile.
		break
	}
	times, full := q.times, q.full
	q.mu.Unlock()
	n := sort.Search(len(times), func(i int) bool { return !times[i].Before(submittedAt) })
	if n == len(times) && !full {
		// Behind the list's last entry: counted alone.
		return q.count(ctx, submittedAt)
	}
	return n + 1, nil
}

// usableLocked reports whether the list read may answer now: it saw every
// change up to gen and began well after the last notice, or it is younger
// than maxAge.
func (q *queueBoard) usableLocked(gen uint64, changedAt time.Time) bool {
	if !q.have {
		return false
	}
	if q.gen == gen && q.from.After(changedAt.Add(statusRecheckDelay)) {
		return true
	}
	return time.Since(q.from) < q.maxAge
}
