package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/activities"
)

// annotateChange is the GetVersion change id of the annotation step.
const annotateChange = "annotate-results"

// annotate runs the two result annotations after the stages: the similarity
// columns (MMseqs2) and the experimental values (docs/similarity.md). Each is
// its own activity (a local activity for a small job, prediction.heavy),
// retried and visible in the Temporal UI; a failure leaves
// its cells blank rather than failing a job whose predictions are made, as
// in the reference.
func (w *prediction) annotate(ctx workflow.Context) {
	ref := activities.JobRef{JobID: w.in.JobID}
	w.setStage(ctx, w.status.StageIndex, "similarity")
	var res activities.AnnotationResult
	sopts := workflow.ActivityOptions{
		// 10,000 new sequences against a large training set take tens of
		// minutes on a few cores; heartbeats (every 10 s while mmseqs runs)
		// find a dead worker, and a retry reuses the cached batches.
		StartToCloseTimeout: 4 * time.Hour,
		HeartbeatTimeout:    w.heartbeat(),
		RetryPolicy:         longRetry,
	}
	if err := w.heavy(ctx, sopts, a.TrainingSimilarity, ref).Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("similarity columns left blank", "job_id", w.in.JobID, "error", err)
	}
	w.setStage(ctx, w.status.StageIndex, "experimental")
	eopts := workflow.ActivityOptions{
		// Table look-ups and one RDKit conversion batch of up to 10,000
		// substrates.
		StartToCloseTimeout: 15 * time.Minute,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval: time.Second, BackoffCoefficient: 2, MaximumInterval: 30 * time.Second, MaximumAttempts: 5,
		},
	}
	if err := w.heavy(ctx, eopts, a.LookupExperimental, ref).Get(ctx, &res); err != nil {
		workflow.GetLogger(ctx).Warn("experimental values not applied", "job_id", w.in.JobID, "error", err)
	}
}
