package progress

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"sort"
	"sync"
	"syscall"
	"testing"
	"time"
)

// BenchmarkRenameToStored measures, over 1,000 expected files renamed into
// place at random moments (exponential gaps, mean 5 ms), the time from a
// file's rename to the stored count first covering it: p50 and p99, with
// notifications (default intervals) and with polling only (default 3 s).
// The store is an in-memory callback; a real database write adds its own
// time (kinflow_progress_store_duration_seconds).
func BenchmarkRenameToStored(b *testing.B) {
	for _, mode := range []struct {
		name     string
		noNotify bool
	}{{"notify", false}, {"poll", true}} {
		b.Run(mode.name, func(b *testing.B) {
			var all []time.Duration
			for i := 0; i < b.N; i++ {
				all = append(all, renameToStored(b, 1000, mode.noNotify)...)
			}
			sort.Slice(all, func(i, j int) bool { return all[i] < all[j] })
			b.ReportMetric(float64(all[len(all)/2].Microseconds())/1000, "p50-ms")
			b.ReportMetric(float64(all[len(all)*99/100].Microseconds())/1000, "p99-ms")
			b.ReportMetric(float64(all[len(all)-1].Microseconds())/1000, "max-ms")
		})
	}
}

func renameToStored(b *testing.B, n int, noNotify bool) []time.Duration {
	b.Helper()
	root := b.TempDir()
	paths := expected(root, n, "prot_t5_last/mean_vecs")
	dir := filepath.Dir(paths[0])
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	// Temp files written beforehand: only the renames are timed.
	tmps := make([]string, n)
	for i, p := range paths {
		tmps[i] = filepath.Join(dir, "."+filepath.Base(p)+".tmp")
		if err := os.WriteFile(tmps[i], []byte("x"), 0o644); err != nil {
			b.Fatal(err)
		}
	}
	var mu sync.Mutex
	var storedAt []time.Time // storedAt[k-1]: when count >= k was first stored
	store := func(_ context.Context, c int) error {
		now := time.Now()
		mu.Lock()
		for len(storedAt) < c {
			storedAt = append(storedAt, now)
		}
		mu.Unlock()
		return nil
	}
	opts := Options{Key: Key{"bench", 0}, Paths: paths, Store: store, NoNotify: noNotify}
	wait := watching(b, &opts)
	tr := Start(context.Background(), opts)
	defer tr.Stop()
	wait()
	r := rand.New(rand.NewPCG(1, 2))
	renamed := make([]time.Time, n)
	for i := range paths {
		time.Sleep(time.Duration(r.ExpFloat64() * float64(5*time.Millisecond)))
		renamed[i] = time.Now()
		if err := os.Rename(tmps[i], paths[i]); err != nil {
			b.Fatal(err)
		}
	}
	select {
	case <-tr.Done():
	case <-time.After(30 * time.Second):
		b.Fatalf("only %d of %d counted", tr.Computed(), n)
	}
	tr.Stop()
	mu.Lock()
	defer mu.Unlock()
	out := make([]time.Duration, n)
	for k := range n {
		// The k-th rename is covered once the stored count reaches k+1
		// (files are counted in arrival order, or in one sweep).
		out[k] = storedAt[k].Sub(renamed[k])
	}
	return out
}

// BenchmarkTracker100k measures a tracker of 100,000 expected files in one
// cache folder: heap held by its pending set, CPU while idle (nothing
// arrives; one reconciliation sweep per default interval), and CPU while the
// files arrive (renames by this process; the writer's own CPU, measured
// without a tracker, is subtracted).
func BenchmarkTracker100k(b *testing.B) {
	const n = 100_000
	for i := 0; i < b.N; i++ {
		root := b.TempDir()
		paths := expected(root, n, "prot_t5_last/mean_vecs")
		dir := filepath.Dir(paths[0])

		runtime.GC()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		tr := newTracker(Options{Key: Key{"bench", 0}, Paths: paths})
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "pending-MiB")
		runtime.KeepAlive(tr)

		// Baseline: the writer alone.
		writeAll(b, dir, paths, "base")
		base := cpu()
		renameAll(b, dir, paths, "base")
		writerCPU := cpu() - base
		if err := os.RemoveAll(dir); err != nil {
			b.Fatal(err)
		}

		var stores int
		var mu sync.Mutex
		opts := Options{Key: Key{"bench", 1}, Paths: paths, Store: func(context.Context, int) error {
			mu.Lock()
			stores++
			mu.Unlock()
			return nil
		}}
		wait := watching(b, &opts)
		t := Start(context.Background(), opts)
		wait()
		writeAll(b, dir, paths, "run")
		idleFor := DefaultReconcile + time.Second
		c0 := cpu()
		time.Sleep(idleFor)
		idle := cpu() - c0
		b.ReportMetric(float64(idle.Microseconds())/1000/idleFor.Seconds(), "idle-cpu-ms/s")

		c1 := cpu()
		start := time.Now()
		renameAll(b, dir, paths, "run")
		select {
		case <-t.Done():
		case <-time.After(60 * time.Second):
			b.Fatalf("only %d of %d counted", t.Computed(), n)
		}
		elapsed := time.Since(start)
		arriving := cpu() - c1 - writerCPU
		b.ReportMetric(float64(arriving.Microseconds())/1000, "arrival-cpu-ms")
		b.ReportMetric(float64(arriving.Microseconds())/float64(n), "arrival-cpu-us/file")
		b.ReportMetric(elapsed.Seconds(), "arrival-s")
		mu.Lock()
		b.ReportMetric(float64(stores), "stores")
		mu.Unlock()
	}
}

// writeAll writes a hidden temp file for every path (the slow part of a
// real writer, done before the timed phase).
func writeAll(b *testing.B, dir string, paths []string, tag string) {
	b.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		b.Fatal(err)
	}
	for _, p := range paths {
		if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf(".%s.%s", filepath.Base(p), tag)), nil, 0o644); err != nil {
			b.Fatal(err)
		}
	}
}

func renameAll(b *testing.B, dir string, paths []string, tag string) {
	b.Helper()
	for _, p := range paths {
		if err := os.Rename(filepath.Join(dir, fmt.Sprintf(".%s.%s", filepath.Base(p), tag)), p); err != nil {
			b.Fatal(err)
		}
	}
}

// cpu is the process's user+system CPU time so far.
func cpu() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
