package e2e

import (
	"context"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/loadgen"
)

// fairEnv is the shape where one key's backlog used to hold every other
// key's job: one GPU slot, the synthetic GPU host at 20 ms a sequence, and
// steps too large for the GPU's small lane, so every job's embeddings wait
// their turn for the one slot.
var fairEnv = map[string]string{
	"KINFLOW_GPU_SLOTS":            "1",
	"GPU_EMBED_SYNTHETIC_DELAY_MS": "20",
	"KINFLOW_GPU_SMALL_STEP_SEQS":  "0",
}

const (
	fairBacklog = 6
	fairRows    = 150
)

// checkFair runs the two-key scenario and requires B's job to overtake at
// least half of A's backlog. First come, first served, B's job ends with
// A's last (it overtakes none); sharing the one GPU slot by key, B's job
// waits for about one of A's. The figure (B's time behind the backlog ÷
// alone) is `make bench-load`'s.
func checkFair(t *testing.T, base string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	a, err := loadgen.NewTenant(ctx, base, "A", "127.0.0.2")
	if err != nil {
		t.Fatal(err)
	}
	b, err := loadgen.NewTenant(ctx, base, "B", "127.0.0.3")
	if err != nil {
		t.Fatal(err)
	}
	r, err := loadgen.RunFairness(ctx, a, b, fairBacklog, fairRows, time.Second, 250*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.Summary())
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	// B's status said whose work it shared the queues with.
	if r.WithBacklog.SharedWith != 1 {
		t.Fatalf("B's job's status named %d other keys sharing the queues, want 1 (A)", r.WithBacklog.SharedWith)
	}
	if n := r.Overtook(); n < fairBacklog/2 {
		t.Fatalf("B's job overtook %d of A's %d queued jobs, want at least %d: one key's backlog held another key's job (%s)",
			n, fairBacklog, fairBacklog/2, r.Summary())
	}
}

// TestFairShareOnEmbeddedDefault: on `kinflow dev`, key A queues six
// 150-row jobs, then key B one: B's job is served beside A's backlog, not
// behind it.
func TestFairShareOnEmbeddedDefault(t *testing.T) {
	var env []string
	for k, v := range fairEnv {
		env = append(env, k+"="+v)
	}
	d, _ := startDev(t, env...)
	checkFair(t, d.BaseURL)
	// The operator sees both keys' work while it ran, and none after.
	out, err := d.Run(context.Background(), "key", "usage")
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "no unfinished jobs") {
		t.Fatalf("key usage after every job ended:\n%s", out)
	}
}

// TestFairShareOnProductionTopology: the same on the Temporal server on
// Postgres with the images' dynamic configuration, one api, worker and GPU
// host.
func TestFairShareOnProductionTopology(t *testing.T) {
	tp := startTopology(t, TopologyOptions{APIs: 1, Workers: 1, GPUHosts: 1, Env: fairEnv})
	checkFair(t, tp.APIURLs[0])
}

// BenchmarkFairShareOnProductionTopology is the two-key scenario on the
// production topology (Temporal server on Postgres with the images'
// dynamic configuration; one api, worker and GPU host), first come first
// served (KINFLOW_FAIRNESS=false) and fair by key: B's time behind A's
// backlog ÷ its time alone, and how many of A's jobs it overtook. `make
// bench-load` runs it after the embedded default's (tools/loadbench -fair).
// Run: go test ./internal/e2e -run '^$' -bench FairShareOnProductionTopology -benchtime 1x -timeout 30m
func BenchmarkFairShareOnProductionTopology(b *testing.B) {
	for i := 0; i < b.N; i++ {
		for _, on := range []string{"false", "true"} {
			env := map[string]string{"KINFLOW_FAIRNESS": on}
			for k, v := range fairEnv {
				env[k] = v
			}
			tp := startTopology(b, TopologyOptions{APIs: 1, Workers: 1, GPUHosts: 1, Env: env})
			ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
			a, err := loadgen.NewTenant(ctx, tp.APIURLs[0], "A", "127.0.0.2")
			if err != nil {
				b.Fatal(err)
			}
			bt, err := loadgen.NewTenant(ctx, tp.APIURLs[0], "B", "127.0.0.3")
			if err != nil {
				b.Fatal(err)
			}
			r, err := loadgen.RunFairness(ctx, a, bt, fairBacklog, fairRows, time.Second, 250*time.Millisecond)
			cancel()
			if err == nil {
				err = r.Check()
			}
			if err != nil {
				b.Fatal(err)
			}
			name := map[string]string{"false": "fcfs", "true": "fair"}[on]
			b.Logf("%s: %s", name, r.Summary())
			b.ReportMetric(r.Factor(), name+"-factor")
			b.ReportMetric(float64(r.Overtook()), name+"-overtook")
			tp.Server.Stop()
			tp.stop()
		}
	}
}

// TestDevRestartsItsTemporalServer: `kinflow dev` brings its Temporal dev
// server back when it dies (killed -9 here), and the service goes on: a job
// submitted after the kill completes.
func TestDevRestartsItsTemporalServer(t *testing.T) {
	d, key := startDev(t)
	out, err := exec.Command("pgrep", "-f", "start-dev.*"+filepath.Join(d.Dir, "temporal")).Output()
	pids := strings.Fields(string(out))
	if err != nil || len(pids) != 1 {
		t.Fatalf("the dev server's process: %q %v", out, err)
	}
	if err := exec.Command("kill", "-9", pids[0]).Run(); err != nil {
		t.Fatal(err)
	}
	r := burst(t, d.BaseURL, key, loadgen.Options{Jobs: 3, Rows: 3, Timeout: 3 * time.Minute})
	if r.Completed != 3 {
		t.Fatalf("%d of 3 jobs completed after the dev server's restart", r.Completed)
	}
	if !strings.Contains(d.Log("dev", 100000), "Temporal dev server restarted after it exited") {
		t.Fatalf("no restart in the log:\n%s", d.Log("dev", 4000))
	}
}
