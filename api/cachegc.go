package api

import (
	"context"
	"time"

	"github.com/kinflow/kinflow/internal/cacheadmin"
	"github.com/kinflow/kinflow/internal/embedding"
)

// The embedding cache's budget: every cacheGCEvery the api
// process measures the cache (kinflow_embedding_cache_bytes/files) and,
// above KINFLOW_CACHE_BUDGET_GB, evicts the least recently used artefacts
// that no running job counts on (internal/cacheadmin/gc.go). Several api
// processes doing so at once is safe: each eviction is a rename, and a file
// already gone is skipped.

const (
	// cacheGCEvery is the pause between two passes: a pass walks the whole
	// cache.
	cacheGCEvery = 10 * time.Minute
	// CacheGCMinAge spares the files planned within it from automatic
	// eviction: a burst of jobs over the same sequences keeps its files.
	CacheGCMinAge = time.Hour
)

// CacheGC runs one pass with the configured budget.
func (s *Server) CacheGC(ctx context.Context, minAge time.Duration) (cacheadmin.GCResult, error) {
	cfg := s.deps.Config
	if cfg == nil || cfg.MediaRoot == "" {
		return cacheadmin.GCResult{}, nil
	}
	// A media root that is away would measure as an empty cache.
	if err := s.mediaAway(true); err != nil {
		return cacheadmin.GCResult{}, err
	}
	l, err := embedding.LayoutFromConfig(cfg)
	if err != nil {
		return cacheadmin.GCResult{}, err
	}
	res, err := cacheadmin.GC(ctx, l, cacheadmin.GCOptions{
		Budget: cfg.CacheBudgetBytes, MinAge: minAge, // file times: the real clock, not s.now
		Protected: cacheadmin.RunningJobFiles(s.deps.Store, cfg.MediaRoot),
	})
	s.deps.Metrics.Cache().Pass(res.Files, res.Bytes, res.Evicted, res.EvictedBytes)
	if res.Evicted > 0 {
		s.log.Info("cache.evicted", "files", res.Evicted, "bytes", res.EvictedBytes, "cache_bytes", res.Bytes, "budget", cfg.CacheBudgetBytes, "restored", res.Restored)
	}
	return res, err
}

// RunCacheGC runs CacheGC at once and then every cacheGCEvery until ctx
// ends (started by RunSubmitReconciler).
func (s *Server) RunCacheGC(ctx context.Context) {
	t := time.NewTicker(cacheGCEvery)
	defer t.Stop()
	for {
		if _, err := s.CacheGC(ctx, CacheGCMinAge); err != nil && ctx.Err() == nil {
			s.log.Warn("cache.gc_failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
