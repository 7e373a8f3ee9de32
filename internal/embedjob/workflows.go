package embedjob

import (
	"errors"
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// EmbedJob is one GPU embedding job: the steps of its work, in order, each an
// activity whose type is the step key, on the GPU task queue. The backend
// starts it as a child of PredictionWorkflow; the GPU service's POST
// /embed/jobs starts the very same workflow. Its status query serves GET
// /embed/jobs/{job_id}.
func EmbedJob(ctx workflow.Context, in Input) (Status, error) {
	st := Status{State: "queued", Steps: map[string]int{}, StepTotals: map[string]int{}, Written: map[string]int{}}
	for _, s := range in.Steps {
		st.StepTotals[s] = in.StepCounts[s]
	}
	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return st, nil }); err != nil {
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
			NonRetryableErrorTypes: []string{ErrTypeInvalidStepInput, ErrTypeStepConfig},
		},
	})
	for _, step := range in.Steps {
		var res StepResult
		err := workflow.ExecuteActivity(actx, step, StepInput{GPUJobID: in.GPUJobID, StepKey: step, WorkFile: in.WorkFile}).Get(ctx, &res)
		if err != nil {
			finished := workflow.Now(ctx)
			st.State, st.FinishedAt, st.Error = "failed", &finished, "step "+step+": "+ErrorText(err)
			return st, temporal.NewApplicationError(st.Error, ErrTypeEmbedStepFailed)
		}
		// Done counts sequences, like StepTotals: those with no file missing.
		st.Steps[step] = res.Requested - res.MissingSeqs
		st.Written[step] = res.Written
	}
	finished := workflow.Now(ctx)
	st.State, st.FinishedAt = "done", &finished
	return st, nil
}

// ErrorText is the readable text of an error returned to workflow code: an
// application error's own message (not the SDK's wrapping of it), a timeout
// or cancellation in words. Both workflows use it for the messages users and
// operators read.
func ErrorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var tErr *temporal.TimeoutError
	if errors.As(err, &tErr) {
		return "a step timed out (" + tErr.TimeoutType().String() + ")"
	}
	var cErr *temporal.CanceledError
	if errors.As(err, &cErr) {
		return "the job was cancelled"
	}
	return err.Error()
}
