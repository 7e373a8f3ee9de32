package metrics

import (
	"errors"
	"fmt"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kinflow/kinflow/internal/fsutil"
)

// RegisterMediaFree exports kinflow_media_free_bytes and
// kinflow_media_size_bytes: the free space and size of the file system
// that holds the media root, read at each scrape. A second
// registration (another server on the same registry) is a no-op.
func (m *Metrics) RegisterMediaFree(root string) error {
	if m == nil || root == "" {
		return nil
	}
	read := func(total bool) func() float64 {
		return func() float64 {
			free, size, err := fsutil.FreeBytes(root)
			if err != nil {
				return -1
			}
			if total {
				return float64(size)
			}
			return float64(free)
		}
	}
	for _, g := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "media_free_bytes",
			Help: "Free space (for unprivileged writers) of the file system holding the media root; -1 when it cannot be read."}, read(false)),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "media_size_bytes",
			Help: "Size of the file system holding the media root; -1 when it cannot be read."}, read(true)),
	} {
		if err := m.Registry.Register(g); err != nil {
			var are prometheus.AlreadyRegisteredError
			if errors.As(err, &are) {
				continue
			}
			return fmt.Errorf("register media gauges: %w", err)
		}
	}
	return nil
}

// CacheGauges are the embedding cache's size and evictions, set by each
// pass of the cache budget's GC. Its hit rate is
// kinflow_cache_files_total{result="hit"|"miss"}, counted by the plans.
type CacheGauges struct {
	files, bytes prometheus.Gauge
	evicted      *prometheus.CounterVec
}

// Cache registers (once per registry) and returns the cache gauges; nil
// Metrics gives nil, whose methods do nothing.
func (m *Metrics) Cache() *CacheGauges {
	if m == nil {
		return nil
	}
	g := &CacheGauges{
		files: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "embedding_cache_files",
			Help: "Artefact files in the embedding cache (sequence_info/) at the last cache GC pass."}),
		bytes: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: Namespace, Name: "embedding_cache_bytes",
			Help: "Bytes of the embedding cache's artefact files at the last cache GC pass (before its evictions)."}),
		evicted: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: Namespace, Name: "embedding_cache_evicted_total",
			Help: "Embedding cache evictions by the cache budget (KINFLOW_CACHE_BUDGET_GB): files and bytes."}, []string{"unit"}),
	}
	g.files = register(m.Registry, g.files).(prometheus.Gauge)
	g.bytes = register(m.Registry, g.bytes).(prometheus.Gauge)
	g.evicted = register(m.Registry, g.evicted).(*prometheus.CounterVec)
	return g
}

// register registers c, or returns the collector already registered in
// its place.
func register(r *prometheus.Registry, c prometheus.Collector) prometheus.Collector {
	if err := r.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			return are.ExistingCollector
		}
		panic(err)
	}
	return c
}

// Pass records one GC pass: the cache's size before it, what it evicted.
func (g *CacheGauges) Pass(files int, bytes int64, evicted int, evictedBytes int64) {
	if g == nil {
		return
	}
	g.files.Set(float64(files))
	g.bytes.Set(float64(bytes))
	g.evicted.WithLabelValues("files").Add(float64(evicted))
	g.evicted.WithLabelValues("bytes").Add(float64(evictedBytes))
}
