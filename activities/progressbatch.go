package activities

import (
	"context"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// progressFlushEvery is how often the worker writes its trackers' counts:
// the trackers' own pace (internal/progress stores at most every 200 ms).
const progressFlushEvery = 200 * time.Millisecond

// progressBatch collects the counts of every tracker of this worker and
// writes them in one transaction per progressFlushEvery. One write per
// tracker and interval made 100 concurrent jobs 500 write transactions a
// second, which starved a single-writer database (SQLite's busy handler
// polls) until submits timed out.
type progressBatch struct {
	a       *Activities
	mu      sync.Mutex
	pending map[progressKey]int
	wake    chan struct{}
}

type progressKey struct {
	job   string
	stage int
}

// progress returns the worker's batch, started on first use; it runs for
// the life of the process.
func (a *Activities) progress() *progressBatch {
	a.progressOnce.Do(func() {
		a.progressB = &progressBatch{a: a, pending: map[progressKey]int{}, wake: make(chan struct{}, 1)}
		go a.progressB.run()
	})
	return a.progressB
}

// set records a stage's latest count; it is written within
// progressFlushEvery.
func (b *progressBatch) set(jobID string, stage, computed int) {
	b.mu.Lock()
	k := progressKey{jobID, stage}
	if computed > b.pending[k] {
		b.pending[k] = computed
	}
	b.mu.Unlock()
	select {
	case b.wake <- struct{}{}:
	default:
	}
}

func (b *progressBatch) run() {
	for range b.wake {
		b.flush()
		// Counts that arrive meanwhile wait for the next round.
		time.Sleep(progressFlushEvery)
	}
}

func (b *progressBatch) flush() {
	b.mu.Lock()
	if len(b.pending) == 0 {
		b.mu.Unlock()
		return
	}
	ps := make([]store.Progress, 0, len(b.pending))
	for k, c := range b.pending {
		ps = append(ps, store.Progress{JobID: k.job, Stage: k.stage, Computed: c})
	}
	b.pending = map[progressKey]int{}
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	err := b.a.Store.SetEmbeddingComputedMany(ctx, ps, start.UTC())
	b.a.Metrics.ProgressStored(time.Since(start))
	if err != nil {
		b.a.Log.Warn("store embedding progress", "stages", len(ps), "error", err)
		// Keep the counts for the next round, unless newer ones came.
		b.mu.Lock()
		for _, p := range ps {
			k := progressKey{p.JobID, p.Stage}
			if p.Computed > b.pending[k] {
				b.pending[k] = p.Computed
			}
		}
		b.mu.Unlock()
		select {
		case b.wake <- struct{}{}:
		default:
		}
	}
}
