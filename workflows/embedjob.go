package workflows

import (
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/internal/gpujob"
)

// EmbedJob is one GPU embedding job: the steps of its work, in order, each an
// activity whose type is the step key, on the GPU task queue. The backend
// starts it as a child of PredictionWorkflow; the GPU service's POST
// /embed/jobs starts the very same workflow. Its status query serves GET
// /embed/jobs/{job_id}.
func EmbedJob(ctx workflow.Context, in gpujob.Input) (gpujob.Status, error) {
	st := gpujob.Status{State: "queued", Steps: map[string]int{}, StepTotals: map[string]int{}, Written: map[string]int{}}
	for _, s := range in.Steps {
		st.StepTotals[s] = in.StepCounts[s]
	}
	if err := workflow.SetQueryHandler(ctx, gpujob.StatusQuery, func() (gpujob.Status, error) { return st, nil }); err != nil {
		return st, err
	}
	started := workflow.Now(ctx)
	st.State, st.StartedAt = "running", &started

	heartbeat := time.Minute
	if in.HeartbeatSeconds > 0 {
		heartbeat = time.Duration(in.HeartbeatSeconds) * time.Second
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: in.GPUTaskQueue,
		// A step over 10,000 sequences can run for hours on one GPU; the
		// parent bounds the whole remote phase by GPU_EMBED_JOB_TIMEOUT_SECONDS.
		// Heartbeats (files done) find a dead GPU host, and the retry
		// resumes from the files already written.
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    heartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        2 * time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			MaximumAttempts:        3,
			NonRetryableErrorTypes: []string{"InvalidStepInput"},
		},
	})
	for _, step := range in.Steps {
		var res gpujob.StepResult
		err := workflow.ExecuteActivity(actx, step, gpujob.StepInput{GPUJobID: in.GPUJobID, StepKey: step, WorkFile: in.WorkFile}).Get(ctx, &res)
		if err != nil {
			finished := workflow.Now(ctx)
			st.State, st.FinishedAt, st.Error = "failed", &finished, "step "+step+": "+userMessage(err)
			return st, temporal.NewApplicationError(st.Error, "EmbedStepFailed")
		}
		// Done counts sequences, like StepTotals: those with no file missing.
		st.Steps[step] = res.Requested - seqsMissing(res.Missing)
		st.Written[step] = res.Written
	}
	finished := workflow.Now(ctx)
	st.State, st.FinishedAt = "done", &finished
	return st, nil
}

// seqsMissing counts the distinct seq ids of StepResult.Missing ("seq_id: path").
func seqsMissing(missing []string) int {
	ids := map[string]bool{}
	for _, m := range missing {
		id, _, _ := strings.Cut(m, ":")
		ids[id] = true
	}
	return len(ids)
}
