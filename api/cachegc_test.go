package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestCacheGCPassExportsCacheSize: a pass of the api process's
// cache GC measures the embedding cache into /metrics
// (kinflow_embedding_cache_bytes, _files) and, over the budget, evicts
// and counts the evictions.
func TestCacheGCPassExportsCacheSize(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		m := metrics.New()
		h := newHarness(t, st, func(_ *config.Config, d *Deps) { d.Metrics = m })
		f, _ := embedding.FamilyByName(embedding.FamilyESM2LayerLastMean)
		l, err := embedding.LayoutFromConfig(h.cfg)
		if err != nil {
			t.Fatal(err)
		}
		dir := l.FamilyDir(f)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		for _, sid := range []string{"s1", "s2", "s3"} {
			if err := os.WriteFile(filepath.Join(dir, sid+f.Suffix()), make([]byte, 1000), 0o644); err != nil {
				t.Fatal(err)
			}
		}
		res, err := h.srv.CacheGC(t.Context(), 0)
		if err != nil || res.Files != 3 || res.Bytes != 3000 || res.Evicted != 0 {
			t.Fatalf("no budget: %+v %v", res, err)
		}
		h.cfg.CacheBudgetBytes = 1500
		if res, err = h.srv.CacheGC(t.Context(), 0); err != nil || res.Evicted != 2 {
			t.Fatalf("budget 1500: %+v %v", res, err)
		}
		body := h.do("GET", "/metrics", "198.51.100.136", "", nil).Body.String()
		for _, want := range []string{"kinflow_embedding_cache_bytes 3000", "kinflow_embedding_cache_files 3", `kinflow_embedding_cache_evicted_total{unit="files"} 2`} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %q", want)
			}
		}
	})
}
