package e2e

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"

	"github.com/kinflow/kinflow/internal/embedjob"
)

// envFile writes a GPU host environment file and returns its path.
func envFile(t *testing.T, lines ...string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "gpu.env")
	if err := os.WriteFile(p, []byte(strings.Join(lines, "\n")+"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

// waitComputed polls until the job's current stage has at least n computed
// files, and returns the cache as it is then.
func (s *stack) waitComputed(jobID string, n int, timeout time.Duration) {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		st := s.status(jobID)
		if st.Status == "Completed" || st.Status == "Failed" {
			s.t.Fatalf("job finished (%s) before %d files were computed: make it slower", st.Status, n)
		}
		if len(st.Stages) > 0 && st.Stages[0].Embedding.Computed >= n {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	s.t.Fatalf("job %s never reached %d computed files", jobID, n)
}

// TestWorkerKilledMidJobFinishesWithoutRecomputing kills the CPU worker with
// SIGKILL while it computes embeddings locally, starts it again, and checks
// that the job completes and that no file written before the kill was
// written again.
func TestWorkerKilledMidJobFinishesWithoutRecomputing(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=60")
	s := newStack(t, map[string]string{"GPU_EMBED_SERVICE_URL": "", "KINFLOW_GPU_ENV_FILE": slow}, nil)
	const n = 60
	job := s.submit(csvRows(randSeed(), n, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
	s.waitComputed(job, 8, 60*time.Second)
	s.kill9("worker")
	before := s.cacheFiles()
	if len(before) == 0 || len(before) >= n {
		t.Fatalf("%d files at the kill, want some but not all of %d", len(before), n)
	}
	s.start("worker")
	st := s.waitDone(job, 120*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("job after restart: %s %s", st.Status, st.Error)
	}
	after := s.cacheFiles()
	if len(after) != n {
		t.Fatalf("%d files after the job, want %d", len(after), n)
	}
	for p, stamp := range before {
		if after[p] != stamp {
			t.Errorf("%s was written again after the restart", p)
		}
	}
	if e := st.Stages[0].Embedding; e.Computed != n || e.Need != n {
		t.Errorf("embedding progress %+v, want %d of %d computed", e, n, n)
	}
	checkSyntheticResult(t, s.resultCSV(job), n)
}

// TestGPUWorkerKilledMidStepFailsOpen kills the GPU host in the middle of a
// step: the remote phase runs past GPU_EMBED_JOB_TIMEOUT_SECONDS and the CPU
// worker computes what is missing, reusing what the GPU host wrote.
func TestGPUWorkerKilledMidStepFailsOpen(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=150")
	s := newStack(t, map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "8"},
		map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow}})
	const n = 60
	job := s.submit(csvRows(randSeed(), n, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
	s.waitComputed(job, 5, 60*time.Second)
	s.kill9("gpu-worker")
	before := s.cacheFiles()
	st := s.waitDone(job, 120*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("job: %s %s", st.Status, st.Error)
	}
	r := st.reasons()
	joined := strings.Join(r, " | ")
	// At the deadline the post-check finds files missing: the reason says
	// the remote outputs are incomplete, and the worker computes them.
	if !strings.Contains(joined, "timeout_incomplete_remote_outputs:") || !strings.Contains(joined, "fallback_local") || r[len(r)-1] != "computed_locally" {
		t.Fatalf("events %v", r)
	}
	after := s.cacheFiles()
	if len(after) != n {
		t.Fatalf("%d files, want %d", len(after), n)
	}
	for p, stamp := range before {
		if after[p] != stamp {
			t.Errorf("%s, written by the GPU host, was written again", p)
		}
	}
	// The post-check at the deadline (GetVersion "poll-timeout-post-check").
	s.replay("prediction:"+job, "prediction_poll_timeout_incomplete")
}

// TestRemoteDoneWithMissingFilesIsCaughtByThePostCheck runs a GPU host whose
// step program exits 0 without writing anything, under a small job (its step
// run inside its own workflow) and a larger one (an EmbedJob child).
func TestRemoteDoneWithMissingFilesIsCaughtByThePostCheck(t *testing.T) {
	lazy := envFile(t, "GPU_EMBED_STEP_CMD_PROT_T5_MEAN=/bin/true")
	s := newStack(t, nil, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": lazy, "KINFLOW_STEP_EXECUTOR": "command"}})
	// 4 rows: a small job; 40: above KINFLOW_GPU_SMALL_STEP_SEQS (32).
	small := s.submit(csvRows(randSeed(), 4, 100), []string{"kcat"}, map[string]string{"kcat": "B"})
	larger := s.submit(csvRows(randSeed(), 40, 100), []string{"kcat"}, map[string]string{"kcat": "B"})
	for job, n := range map[string]int{small: 4, larger: 40} {
		st := s.waitDone(job, 90*time.Second)
		if st.Status != "Completed" {
			t.Fatalf("job of %d rows: %s %s", n, st.Status, st.Error)
		}
		want := []string{"submitted", fmt.Sprintf("incomplete_remote_outputs:%d", n), "fallback_local", "computed_locally"}
		if got := st.reasons(); strings.Join(got, ",") != strings.Join(want, ",") {
			t.Fatalf("job of %d rows: events %v, want %v", n, got, want)
		}
		checkSyntheticResult(t, s.resultCSV(job), n)
	}
	if got := s.childWorkflows("prediction:" + small); len(got) != 0 {
		t.Fatalf("the small job started child workflows %v; its step runs inside it", got)
	}
	if got := s.childWorkflows("prediction:" + larger); len(got) != 1 {
		t.Fatalf("the larger job started child workflows %v, want one EmbedJob", got)
	}
	// These jobs took the longest road (GPU, post-check, local fallback):
	// their histories are the ones the replay test keeps.
	s.replay("prediction:"+small, "prediction_gpu_postcheck_fallback")
	s.replayEmbedJobs("embedjob_missing_outputs")
}

// TestFailClosedFailsFastWithAReason turns the GPU host off and sets
// GPU_EMBED_FAIL_CLOSED=1: the job fails at once, saying why, and its rows
// are refunded.
func TestFailClosedFailsFastWithAReason(t *testing.T) {
	s := newStack(t, map[string]string{"GPU_EMBED_FAIL_CLOSED": "1"}, nil)
	s.kill9("gpu-worker")
	job := s.submit(csvRows(randSeed(), 5, 100), []string{"kcat"}, map[string]string{"kcat": "B"})
	st := s.waitDone(job, 60*time.Second)
	if st.Status != "Failed" || !strings.Contains(st.Error, "GPU_EMBED_FAIL_CLOSED=1") || !strings.Contains(st.Error, "unreachable") {
		t.Fatalf("job: %s %q", st.Status, st.Error)
	}
	var q struct {
		Used int `json:"used"`
	}
	s.do("GET", "/api/v1/quota/", nil, "", &q)
	if q.Used != 0 {
		t.Fatalf("quota used %d after a failed job, want the 5 rows refunded", q.Used)
	}
}

// TestConcurrentJobsComputeEachArtefactOnce submits two jobs over the same
// sequences at once to a GPU host with four slots: every artefact is written
// by exactly one of them, the other waits for its file.
func TestConcurrentJobsComputeEachArtefactOnce(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=30")
	s := newStack(t, nil, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow, "KINFLOW_GPU_SLOTS": "4"}})
	const n = 40
	input := csvRows(randSeed(), n, 200)
	sel := map[string]string{"kcat": "B"}
	jobs := []string{s.submit(input, []string{"kcat"}, sel), s.submit(input, []string{"kcat"}, sel)}
	for _, j := range jobs {
		if st := s.waitDone(j, 120*time.Second); st.Status != "Completed" {
			t.Fatalf("job %s: %s %s", j, st.Status, st.Error)
		}
	}
	if got := len(s.cacheFiles()); got != n {
		t.Fatalf("%d files, want %d", got, n)
	}
	// Sum what every EmbedJob of this stack wrote.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: "default", Query: fmt.Sprintf("WorkflowType = 'EmbedJob' AND TaskQueue = '%s'", s.gpuQ),
	})
	if err != nil {
		t.Fatal(err)
	}
	written := 0
	for _, e := range resp.Executions {
		var st embedjob.Status
		if err := s.tc.GetWorkflow(ctx, e.Execution.WorkflowId, e.Execution.RunId).Get(ctx, &st); err != nil {
			t.Fatalf("EmbedJob %s: %v", e.Execution.WorkflowId, err)
		}
		for _, w := range st.Written {
			written += w
		}
	}
	if written != n {
		t.Fatalf("the EmbedJobs wrote %d files for %d distinct artefacts (%d EmbedJobs)", written, n, len(resp.Executions))
	}
}
