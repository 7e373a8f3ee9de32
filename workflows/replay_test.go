package workflows

import (
	"path/filepath"
	"testing"

	"go.temporal.io/sdk/worker"

	"github.com/kinflow/kinflow/internal/embedjob"
)

// TestReplayRecordedHistories replays every history in testdata/ (recorded
// from real runs on a dev server by the e2e tests with
// KINFLOW_RECORD_HISTORIES=1) against the current workflow code. A change
// that makes a workflow non-deterministic for running jobs fails here.
func TestReplayRecordedHistories(t *testing.T) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.json"))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]bool{"prediction_gpu_postcheck_fallback.json": false, "embedjob_missing_outputs.json": false,
		// The annotation step (GetVersion "annotate-results"): TestJobSimilarityAndExperimental.
		"prediction_similarity_experimental.json": false,
		// The post-check at the remote deadline (GetVersion
		// "poll-timeout-post-check"): TestGPUWorkerKilledMidStepFailsOpen.
		"prediction_poll_timeout_incomplete.json": false,
		// The job notice (GetVersion "i35-notify-job"), delivered at the
		// third attempt: TestWaitingOnChangeAgainstStack.
		"prediction_webhook_retried.json": false,
		// A stage's second embedding phase and Predict after cached files
		// changed while the method read them (GetVersion
		// "i34-recheck-after-read"): TestFileChangedBetweenCheckAndReadIsRecomputed.
		"prediction_recheck_after_read.json": false,
		// A small job before and after its Stage went quiet (GetVersion
		// "i35-quiet-stages"): TestReplayManyUsersShapes.
		"prediction_small_job_local.json": false, "prediction_small_job_quiet_stages.json": false,
		"prediction_small_job_inline_gpu.json": false,
		// The same small job, a larger one and its EmbedJob started at
		// revision 1 (no version markers): TestReplayManyUsersShapes.
		"prediction_small_job_rev1.json": false, "prediction_large_job_rev1.json": false, "embedjob_rev1.json": false,
		// A revision-1 run that a worker from before revisions ran (it
		// ignores the input's rev and asks GetVersion: markers in the
		// history that the current code does not ask for): the recorded
		// prediction_small_job_inline_gpu with "rev":1 in its input, which
		// is all that such a worker's history differs by.
		"prediction_small_job_rev1_older_worker.json": false}
	for _, f := range files {
		want[filepath.Base(f)] = true
		t.Run(filepath.Base(f), func(t *testing.T) {
			r := worker.NewWorkflowReplayer()
			RegisterCPU(r)
			embedjob.RegisterWorkflows(r)
			if err := r.ReplayWorkflowHistoryFromJSONFile(nil, f); err != nil {
				t.Fatalf("replay: %v", err)
			}
		})
	}
	for name, found := range want {
		if !found {
			t.Errorf("testdata/%s is missing: record it with KINFLOW_RECORD_HISTORIES=1 go test ./internal/e2e -run 'TestRemoteDone|TestJobSimilarity|TestGPUWorkerKilledMidStep|TestWaitingOnChangeAgainstStack|TestReplayManyUsersShapes'", name)
		}
	}
}
