package workflows

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/activities"
)

// noticeRun runs PredictionWorkflow with PrepareInput answering prep (or
// prepErr) and NotifyJob failing its first fails attempts (all, with -1);
// it returns the result and how often HasNotice and NotifyJob ran.
func noticeRun(t *testing.T, prep activities.PreparedJob, prepErr error, fails int) (PredictionResult, int32, int32) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflowWithOptions(PredictionWorkflow, workflow.RegisterOptions{Name: PredictionWorkflowName})
	env.RegisterActivity(&activities.Activities{})
	env.OnActivity(a.PrepareInput, mock.Anything, mock.Anything).Return(prep, prepErr)
	env.OnActivity(a.MarkStage, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(a.BuildPlan, mock.Anything, mock.Anything).Return(activities.PlanSummary{NoPlan: true}, nil)
	env.OnActivity(a.Predict, mock.Anything, mock.Anything).Return(activities.PredictResult{Predicted: 3}, nil)
	env.OnActivity(a.Cleanup, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(a.TrainingSimilarity, mock.Anything, mock.Anything).Return(activities.AnnotationResult{}, nil)
	env.OnActivity(a.LookupExperimental, mock.Anything, mock.Anything).Return(activities.AnnotationResult{}, nil)
	env.OnActivity(a.Finalize, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		if in.Failed {
			return activities.FinalizeResult{Status: "Failed"}, nil
		}
		return activities.FinalizeResult{Status: "Completed"}, nil
	})
	var has, notified atomic.Int32
	env.OnActivity(a.HasNotice, mock.Anything, mock.Anything).Return(func(context.Context, activities.NoticeInput) (bool, error) {
		has.Add(1)
		return true, nil
	})
	env.OnActivity(a.NotifyJob, mock.Anything, mock.Anything).Return(func(context.Context, activities.NoticeInput) error {
		if n := notified.Add(1); fails < 0 || int(n) <= fails {
			return errors.New("receiver answered HTTP 503")
		}
		return nil
	})
	env.ExecuteWorkflow(PredictionWorkflowName, PredictionInput{JobID: "JobJobJobJobJobJobJob1"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res PredictionResult
	require.NoError(t, env.GetWorkflowResult(&res))
	return res, has.Load(), notified.Load()
}

func TestNoticeAfterTheJobEnds(t *testing.T) {
	prepared := activities.PreparedJob{Rows: 3, Stages: []activities.StageInfo{stageB}, Policy: activities.Policy{}}

	// Most jobs have no notify URL: no notice, no extra step.
	res, has, notified := noticeRun(t, prepared, nil, 0)
	require.Equal(t, "Completed", res.Status)
	require.Zero(t, has)
	require.Zero(t, notified)

	// With one: retried through a receiver that fails twice, delivered.
	prepared.Notify = true
	res, has, notified = noticeRun(t, prepared, nil, 2)
	require.Equal(t, "Completed", res.Status)
	require.Zero(t, has)
	require.EqualValues(t, 3, notified)

	// A dead receiver: bounded attempts, and the job's outcome unchanged.
	res, _, notified = noticeRun(t, prepared, nil, -1)
	require.Equal(t, "Completed", res.Status)
	require.EqualValues(t, noticeRetry.MaximumAttempts, notified)

	// A job that failed before PrepareInput answered asks the database.
	bad := temporal.NewNonRetryableApplicationError("The job's input file could not be read.", activities.ErrInvalidInput, nil)
	res, has, notified = noticeRun(t, activities.PreparedJob{}, bad, 0)
	require.Equal(t, "Failed", res.Status)
	require.EqualValues(t, 1, has)
	require.EqualValues(t, 1, notified)
}
