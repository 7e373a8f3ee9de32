package similarity

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
)

// benchSize reads a size from the environment (to scale the benchmark
// down on a small machine), else def.
func benchSize(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// BenchmarkSearch is the search at full size: 10,000 query sequences (a third
// copies of training sequences, a third 30 %-mutated copies, a third
// unrelated; 300 residues) against a 20,000-sequence dataset, cold (build
// and search) and cached (a second search of the same queries). Sizes:
// KINFLOW_BENCH_SIM_QUERIES, KINFLOW_BENCH_SIM_TARGETS; threads:
// KINFLOW_BENCH_SIM_THREADS (default 2); KINFLOW_BENCH_SIM_INDEX=1 also
// runs createindex. Run once: `go test -run '^$' -bench Search -benchtime 1x ./internal/similarity/`.
func BenchmarkSearch(b *testing.B) {
	if _, err := exec.LookPath("mmseqs"); err != nil {
		testenv.Unavailable(b, "mmseqs2 is not installed")
	}
	nq := benchSize("KINFLOW_BENCH_SIM_QUERIES", 10000)
	nt := benchSize("KINFLOW_BENCH_SIM_TARGETS", 20000)
	threads := benchSize("KINFLOW_BENCH_SIM_THREADS", 2)
	r := rand.New(rand.NewPCG(42, 42))
	dir := b.TempDir()
	train := make([]string, nt)
	var fa strings.Builder
	for i := range train {
		train[i] = randomSeq(r, 300)
		fmt.Fprintf(&fa, ">t%d\n%s\n", i, train[i])
	}
	fasta := filepath.Join(dir, "train.fasta")
	if err := os.WriteFile(fasta, []byte(fa.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	queries := make([]string, nq)
	for i := range queries {
		switch i % 3 {
		case 0:
			queries[i] = train[r.IntN(nt)]
		case 1:
			queries[i] = mutate(r, train[r.IntN(nt)], 0.3)
		default:
			queries[i] = randomSeq(r, 300)
		}
	}
	ds := Dataset{Label: "bench", FASTA: fasta}
	ctx := context.Background()
	for i := 0; i < b.N; i++ {
		root := filepath.Join(dir, fmt.Sprintf("root%d", i))
		s := &Searcher{Root: root, Threads: threads, Index: os.Getenv("KINFLOW_BENCH_SIM_INDEX") == "1"}
		t0 := time.Now()
		if _, err := s.BuildDir(ctx, ds); err != nil {
			b.Fatal(err)
		}
		build := time.Since(t0)
		t1 := time.Now()
		res, err := s.Search(ctx, ds, queries)
		if err != nil {
			b.Fatal(err)
		}
		cold := time.Since(t1)
		t2 := time.Now()
		if _, err := s.Search(ctx, ds, queries); err != nil {
			b.Fatal(err)
		}
		warm := time.Since(t2)
		// Another process: the cache file is read from disk.
		t3 := time.Now()
		if _, err := (&Searcher{Root: root}).Search(ctx, ds, queries); err != nil {
			b.Fatal(err)
		}
		fresh := time.Since(t3)
		hits := 0
		for _, id := range res {
			if id.Hits > 0 {
				hits++
			}
		}
		b.ReportMetric(build.Seconds(), "build-s")
		b.ReportMetric(cold.Seconds(), "cold-search-s")
		b.ReportMetric(float64(warm.Microseconds())/1000, "cached-ms")
		b.ReportMetric(float64(fresh.Microseconds())/1000, "cached-new-process-ms")
		b.ReportMetric(float64(hits), "queries-with-hits")
	}
}

// BenchmarkCachedLookup measures the cached path at the same full size
// without paying for the cold search: 10,000 query sequences whose results
// are already in the build's cache file (written by the same code that a
// search uses), looked up by a searcher that has read the file before
// (same process) and by a fresh one (another process: reads the file).
func BenchmarkCachedLookup(b *testing.B) {
	if _, err := exec.LookPath("mmseqs"); err != nil {
		testenv.Unavailable(b, "mmseqs2 is not installed")
	}
	nq := benchSize("KINFLOW_BENCH_SIM_QUERIES", 10000)
	nt := benchSize("KINFLOW_BENCH_SIM_TARGETS", 20000)
	r := rand.New(rand.NewPCG(43, 43))
	dir := b.TempDir()
	var fa strings.Builder
	for i := 0; i < nt; i++ {
		fmt.Fprintf(&fa, ">t%d\n%s\n", i, randomSeq(r, 300))
	}
	ds := Dataset{Label: "bench", FASTA: filepath.Join(dir, "train.fasta")}
	if err := os.WriteFile(ds.FASTA, []byte(fa.String()), 0o644); err != nil {
		b.Fatal(err)
	}
	queries := make([]string, nq)
	seeded := map[string]Identity{}
	for i := range queries {
		queries[i] = randomSeq(r, 300)
		seeded[queries[i]] = Identity{Max: float64(i % 101), Mean: float64(i % 50), Hits: 1}
	}
	ctx := context.Background()
	root := filepath.Join(dir, "root")
	s := &Searcher{Root: root}
	bd, err := s.BuildDir(ctx, ds)
	if err != nil {
		b.Fatal(err)
	}
	if err := s.build(bd).append(seeded); err != nil {
		b.Fatal(err)
	}
	b.Run("same-process", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := s.Search(ctx, ds, queries); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("new-process", func(b *testing.B) {
		for i := 0; i < b.N; i++ {
			if _, err := (&Searcher{Root: root}).Search(ctx, ds, queries); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("summarize", func(b *testing.B) {
		res, _ := s.Search(ctx, ds, queries)
		ids := make([]Identity, len(queries))
		for i, q := range queries {
			ids[i] = res[q]
		}
		b.ResetTimer()
		for i := 0; i < b.N; i++ {
			_ = Summarize(ids)
		}
	})
}
