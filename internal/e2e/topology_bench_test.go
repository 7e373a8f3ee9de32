package e2e

import (
	"os"
	"path/filepath"
	"strconv"
	"testing"
	"time"
)

// BenchmarkTopologyTwoGPUHosts runs one 2,000-sequence job
// (KINFLOW_BENCH_SEQS) on the production topology (Temporal server on
// Postgres, one api, two CPU workers) with one GPU host, then on a fresh
// topology with two, and reports both job times (submit to Completed) and
// their ratio. The GPU hosts run the synthetic executor, which spends
// GPU_EMBED_SYNTHETIC_DELAY_MS (KINFLOW_BENCH_DELAY_MS, default 20) per
// sequence as a stand-in for model time; shards of the default 500.
// Run: go test ./internal/e2e -run '^$' -bench TopologyTwoGPUHosts -benchtime 1x -timeout 30m
func BenchmarkTopologyTwoGPUHosts(b *testing.B) {
	n := benchEnvInt("KINFLOW_BENCH_SEQS", 2000)
	delay := benchEnvInt("KINFLOW_BENCH_DELAY_MS", 20)
	env := filepath.Join(b.TempDir(), "gpu.env")
	if err := os.WriteFile(env, []byte("GPU_EMBED_SYNTHETIC_DELAY_MS="+strconv.Itoa(delay)+"\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	run := func(hosts int) time.Duration {
		tp := startTopology(b, TopologyOptions{
			APIs: 1, GPUHosts: hosts,
			Env: map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "3600", "KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "60"},
			RoleEnv: map[string]map[string]string{
				"gpu-worker": {"KINFLOW_GPU_ENV_FILE": env, "KINFLOW_GPU_SLOTS": "1"},
			},
		})
		defer tp.Server.Stop()
		defer tp.stop()
		csv := csvRows(randSeed(), n, 200)
		start := time.Now()
		job := tp.submit(csv, []string{"kcat"}, map[string]string{"kcat": "B"})
		res := tp.waitDone(job, 30*time.Minute)
		d := time.Since(start)
		if res.Status != "Completed" {
			b.Fatalf("job on %d GPU host(s): %s %s", hosts, res.Status, res.Error)
		}
		if r := res.reasons(); len(r) == 0 || r[len(r)-1] != "done" {
			b.Fatalf("job on %d GPU host(s) left the GPU road: %v", hosts, r)
		}
		return d
	}
	for i := 0; i < b.N; i++ {
		one := run(1)
		two := run(2)
		b.ReportMetric(one.Seconds(), "one-host-s")
		b.ReportMetric(two.Seconds(), "two-hosts-s")
		b.ReportMetric(two.Seconds()/one.Seconds(), "two/one")
	}
}
