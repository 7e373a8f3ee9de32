package e2e

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestTopologyREADMEFirstJob runs the README's first job, command for
// command, against the first api of the production topology, and checks
// that its workflow is on the Postgres-backed server, found by the JobId
// search attribute through SQL visibility.
func TestTopologyREADMEFirstJob(t *testing.T) {
	tp := startTopology(t, TopologyOptions{NoKey: true})
	testenv.RunFirstJob(t, tp.APIURLs[0])
	st, err := store.Open(t.Context(), tp.env["KINFLOW_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var ids []string
	st.DB.Raw("SELECT id FROM jobs").Scan(&ids)
	// RunFirstJob pastes the block twice, as a user may: two jobs.
	if len(ids) != 2 {
		t.Fatalf("%d jobs, want 2", len(ids))
	}
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	for _, id := range ids {
		resp, err := tp.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: "default", Query: "WorkflowType = 'PredictionWorkflow' AND JobId = '" + id + "' AND ExecutionStatus = 'Completed'"})
		if err != nil || resp.GetCount() != 1 {
			t.Fatalf("visibility query by JobId %s: %v, count %d", id, err, resp.GetCount())
		}
	}

	// The operator step again, on a namespace in use: nothing changes.
	ns := exec.Command(kinflowBin, "namespace")
	ns.Env = tp.environ("")
	out, err := ns.CombinedOutput()
	if err != nil || !strings.Contains(string(out), "namespace default: exists") || strings.Contains(string(out), "registered") {
		t.Fatalf("kinflow namespace, second run: %v\n%s", err, out)
	}

	// Started before the server answers (compose starts it beside a booting
	// server), it waits for it.
	tp.Server.Kill9()
	ns = exec.Command(kinflowBin, "namespace", "--wait", "120s")
	ns.Env = tp.environ("")
	var buf strings.Builder
	ns.Stdout, ns.Stderr = &buf, &buf
	if err := ns.Start(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second)
	tp.Server.Start()
	if err := ns.Wait(); err != nil || !strings.Contains(buf.String(), "ready for kinflow") {
		t.Fatalf("kinflow namespace started before the server: %v\n%s", err, buf.String())
	}
}

// TestTopologyKillEachRoleMidJob kills, in the middle of a job, one process
// of each role with SIGKILL (and the Temporal server itself), starts it again
// and checks that every job completes with all its rows, that each job ran
// as one workflow, and that the quota charged is exactly the rows submitted.
func TestTopologyKillEachRoleMidJob(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=100")
	tp := startTopology(t, TopologyOptions{
		Env:     map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "240", "KINFLOW_STEP_SHARD_SEQS": "20"},
		RoleEnv: map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow, "KINFLOW_GPU_SLOTS": "1"}},
	})
	st, keyID := tp.openStoreAndKey(t)
	const n = 60
	submitted := 0
	for _, victim := range []string{"api-1", "worker-1", "gpu-worker-1", "temporal"} {
		t.Run(victim, func(t *testing.T) {
			tp.UseAPI(0)
			job := tp.submit(csvRows(randSeed(), n, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
			submitted++
			tp.UseAPI(1) // poll through the api that stays up
			tp.waitComputed(job, 3, 120*time.Second)
			if victim == "temporal" {
				tp.Server.Kill9()
				if st := tp.status(job); st.Status == "Completed" || st.Status == "Failed" {
					t.Fatalf("job %s before the server was killed: make it slower", st.Status)
				}
				time.Sleep(2 * time.Second)
				tp.Server.Start()
			} else {
				tp.Kill9(victim)
				if st := tp.status(job); st.Status == "Completed" || st.Status == "Failed" {
					t.Fatalf("job %s before the kill of %s took effect: make it slower", st.Status, victim)
				}
				time.Sleep(time.Second)
				tp.Restart(victim)
			}
			res := tp.waitDone(job, 300*time.Second)
			if res.Status != "Completed" {
				t.Fatalf("job after the kill of %s: %s %s", victim, res.Status, res.Error)
			}
			checkSyntheticResult(t, tp.resultCSV(job), n)
		})
	}
	tp.UseAPI(0)
	tp.waitHealthy()
	var jobs []store.Job
	st.DB.Find(&jobs)
	if len(jobs) != submitted {
		t.Fatalf("%d job rows for %d submits", len(jobs), submitted)
	}
	for _, j := range jobs {
		if j.Status != "Completed" {
			t.Errorf("job %s: %s", j.ID, j.Status)
		}
	}
	if c := tp.countWorkflows("PredictionWorkflow"); c != int64(submitted) {
		t.Errorf("%d prediction workflows for %d jobs", c, submitted)
	}
	used, err := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	if used != int64(submitted*n) {
		t.Fatalf("quota used %d, want %d (%d jobs × %d rows)", used, submitted*n, submitted, n)
	}
}

// TestTopologyGPUHostJoinsMidJob starts with one GPU host, submits a job
// cut into many shards and starts a second GPU host in the middle of it:
// the newcomer takes shards from the shared queue, and the job completes on
// the GPU road.
func TestTopologyGPUHostJoinsMidJob(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=100")
	tp := startTopology(t, TopologyOptions{
		APIs: 1, GPUHosts: 1,
		Env:     map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "240", "KINFLOW_STEP_SHARD_SEQS": "10"},
		RoleEnv: map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow, "KINFLOW_GPU_SLOTS": "1"}},
	})
	const n = 120
	job := tp.submit(csvRows(randSeed(), n, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
	tp.waitComputed(job, 3, 120*time.Second)
	joined := tp.AddGPUHost()
	res := tp.waitDone(job, 300*time.Second)
	if res.Status != "Completed" {
		t.Fatalf("job: %s %s", res.Status, res.Error)
	}
	if r := res.reasons(); len(r) == 0 || r[len(r)-1] != "done" {
		t.Errorf("GPU events %v: want the GPU road to finish (done)", r)
	}
	if e := res.Stages[0].Embedding; e.Computed != n {
		t.Errorf("embedding %+v, want %d computed", e, n)
	}
	log, _ := os.ReadFile(tp.logs[joined])
	if !strings.Contains(string(log), `"shard":"`) {
		t.Errorf("the GPU host that joined (%s) ran no shard:\n%s", joined, tail(log, 3000))
	}
}

// TestTopologyProgressWithoutNotifications runs the CPU workers with
// KINFLOW_PROGRESS_NOTIFY=0, as on shared storage where the GPU host's
// files raise no inotify event on the worker's machine: progress still
// rises during the job (folder sweeps, every 3 s) and reaches every file,
// and no file was found by a notification.
func TestTopologyProgressWithoutNotifications(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=150")
	tp := startTopology(t, TopologyOptions{
		APIs: 1, Metrics: true,
		Env: map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "240"},
		RoleEnv: map[string]map[string]string{
			"worker":     {"KINFLOW_PROGRESS_NOTIFY": "0"},
			"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow},
		},
	})
	const n = 60
	job := tp.submit(csvRows(randSeed(), n, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
	var seen []int
	deadline := time.Now().Add(300 * time.Second)
	var res status
	for {
		res = tp.status(job)
		if len(res.Stages) > 0 {
			if c := res.Stages[0].Embedding.Computed; len(seen) == 0 || seen[len(seen)-1] != c {
				seen = append(seen, c)
			}
		}
		if res.Status == "Completed" || res.Status == "Failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still %s; computed %v", res.Status, seen)
		}
		time.Sleep(100 * time.Millisecond)
	}
	if res.Status != "Completed" {
		t.Fatalf("job: %s %s", res.Status, res.Error)
	}
	intermediate := 0
	for _, c := range seen {
		if c > 0 && c < n {
			intermediate++
		}
	}
	// 60 files at 150 ms each take 9 s: sweeps every 3 s see some of them.
	if intermediate < 1 {
		t.Errorf("no intermediate progress without notifications: %v", seen)
	}
	if e := res.Stages[0].Embedding; e.Computed != n || e.State != "done" {
		t.Errorf("final embedding %+v, want %d computed, done", e, n)
	}
	notify, swept := 0.0, 0.0
	for _, name := range []string{"worker-1", "worker-2"} {
		url := "http://" + tp.roles[name]["KINFLOW_METRICS_LISTEN"] + "/metrics"
		notify += metricSum(t, url, `kinflow_progress_files_found_total{source="notify"}`)
		swept += metricSum(t, url, `kinflow_progress_files_found_total{source="reconcile"}`)
	}
	// The tracker is stopped when the remote phase ends, without waiting
	// for its last sweep (docs/workflows.md): the post-check records the
	// final count (checked above); the sweeps must have found files.
	if notify != 0 || swept < 1 || swept > n {
		t.Errorf("files found: %v by notification, %v by sweeps; want 0 and 1 to %d", notify, swept, n)
	}
	t.Logf("computed values seen: %v", seen)
}
