package activities

import (
	"context"
	"log/slog"
	"sync"

	"go.temporal.io/sdk/activity"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/experimental"
	"github.com/kinflow/kinflow/internal/gpuhealth"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/progress"
	"github.com/kinflow/kinflow/internal/similarity"
	"github.com/kinflow/kinflow/internal/store"
)

// Activities holds the dependencies of every CPU activity; the workflows
// refer to its methods as values, so a renamed activity is a compile error.
type Activities struct {
	Config    *config.Config
	Store     *store.Store
	Catalogue *methods.Catalogue
	Layout    *embedding.Layout
	// Chem validates substrates at run time (Go checks, RDKit when present).
	Chem *input.Chemistry
	Log  *slog.Logger
	// Health reads the GPU service's health through its TTL cache.
	Health *gpuhealth.Checker
	// Trackers are this worker's running progress trackers, one per job
	// stage (reused by a retried TrackProgress); nil: one is made on first use.
	Trackers *progress.Registry
	// Metrics records cache hits and misses and gpuPrecompute events; nil
	// records nothing.
	Metrics *metrics.Metrics
	// Similarity computes the similarity columns (similarity.go); nil: every
	// method counts as having no dataset.
	Similarity *similarity.Service
	// Experimental holds the measured-value tables; nil: made on first use
	// under MEDIA/experimental.
	Experimental *experimental.Tables
	// PredCache is the prediction cache (internal/predcache); nil: every
	// unit is predicted.
	PredCache *predcache.Cache

	trackersOnce     sync.Once
	experimentalOnce sync.Once
	heavyOnce        sync.Once
	heavy            chan struct{}
	progressOnce     sync.Once
	progressB        *progressBatch
	// noticesOf counts the notices in flight per API key (KINFLOW_NOTICE_PER_KEY).
	noticeMu  sync.Mutex
	noticesOf map[int64]int
}

// turn waits for a place among the CPU-bound steps that run as local
// activities (a small job's Predict and annotations), at most
// KINFLOW_CPU_ACTIVITY_SLOTS at once, first come first served, and returns
// the function that gives it back. A regular activity needs no turn: its
// slot is its place. A step waiting here waits only for steps that are
// running and need nothing it holds, so the wait always ends
// (docs/workflows.md, "Waits").
func (a *Activities) turn(ctx context.Context) (func(), error) {
	if !activity.IsActivity(ctx) || !activity.GetInfo(ctx).IsLocalActivity {
		return func() {}, nil
	}
	a.heavyOnce.Do(func() {
		n := 4
		if a.Config != nil && a.Config.CPUActivitySlots > 0 {
			n = a.Config.CPUActivitySlots
		}
		a.heavy = make(chan struct{}, n)
	})
	select {
	case a.heavy <- struct{}{}:
		return func() { <-a.heavy }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// trackers returns the tracker registry, made on first use when unset.
func (a *Activities) trackers() *progress.Registry {
	a.trackersOnce.Do(func() {
		if a.Trackers == nil {
			a.Trackers = progress.NewRegistry()
		}
	})
	return a.Trackers
}

// New builds the activities from their dependencies.
func New(cfg *config.Config, st *store.Store, cat *methods.Catalogue, layout *embedding.Layout, log *slog.Logger) *Activities {
	return &Activities{Config: cfg, Store: st, Catalogue: cat, Layout: layout, Chem: input.NewChemistry(nil, log), Log: log, Health: gpuhealth.New(cfg), Trackers: progress.NewRegistry(), PredCache: predcache.New(st).WithMemory(0)}
}

// GPUHealth is the workflow's reading of the GPU service's health.
func (a *Activities) GPUHealth(ctx context.Context) (Health, error) {
	return a.Health.Check(ctx), nil
}
