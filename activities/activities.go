package activities

import (
	"context"
	"log/slog"
	"sync"

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
	return &Activities{Config: cfg, Store: st, Catalogue: cat, Layout: layout, Chem: input.NewChemistry(nil, log), Log: log, Health: gpuhealth.New(cfg), Trackers: progress.NewRegistry(), PredCache: predcache.New(st)}
}

// GPUHealth is the workflow's reading of the GPU service's health.
func (a *Activities) GPUHealth(ctx context.Context) (Health, error) {
	return a.Health.Check(ctx), nil
}
