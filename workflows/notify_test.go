package workflows

import (
	"context"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/activities"
)

// noticeRun runs PredictionWorkflow with PrepareInput answering prep (or
// prepErr) and NotifyJob answering notify(its n-th call, from 1); it
// returns the result, how often HasNotice and NotifyJob ran, and the task
// queue NotifyJob ran on.
func noticeRun(t *testing.T, prep activities.PreparedJob, prepErr error, notify func(n int32) error) (PredictionResult, int32, int32, string) {
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
	var queue atomic.Value
	env.OnActivity(a.HasNotice, mock.Anything, mock.Anything).Return(func(context.Context, activities.NoticeInput) (bool, error) {
		has.Add(1)
		return true, nil
	})
	env.OnActivity(a.NotifyJob, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.NoticeInput) error {
		queue.Store(activity.GetInfo(ctx).TaskQueue)
		return notify(notified.Add(1))
	})
	env.ExecuteWorkflow(PredictionWorkflowName, PredictionInput{JobID: "JobJobJobJobJobJobJob1"})
	require.True(t, env.IsWorkflowCompleted())
	require.NoError(t, env.GetWorkflowError())
	var res PredictionResult
	require.NoError(t, env.GetWorkflowResult(&res))
	q, _ := queue.Load().(string)
	return res, has.Load(), notified.Load(), q
}

// failing answers as NotifyJob does to a receiver that fails its first
// fails attempts (all, with -1): the backoff, then, at the last attempt,
// the notice given up.
func failing(fails int) func(int32) error {
	return func(n int32) error {
		if fails >= 0 && int(n) > fails {
			return nil
		}
		if n >= activities.NoticeAttempts {
			return temporal.NewNonRetryableApplicationError("notice not delivered in 8 attempts", activities.ErrNoticeGaveUp, nil)
		}
		return temporal.NewApplicationErrorWithOptions("receiver answered HTTP 503", activities.ErrNoticeFailed,
			temporal.ApplicationErrorOptions{NextRetryDelay: 2 * time.Second << (n - 1)})
	}
}

func TestNoticeAfterTheJobEnds(t *testing.T) {
	prepared := activities.PreparedJob{Rows: 3, Stages: []activities.StageInfo{stageB},
		Policy: activities.Policy{CPUTaskQueue: "kinflow-cpu", NoticeTaskQueue: "kinflow-cpu-notice"}}

	// Most jobs have no notify URL: no notice, no extra step.
	res, has, notified, _ := noticeRun(t, prepared, nil, failing(0))
	require.Equal(t, "Completed", res.Status)
	require.Zero(t, has)
	require.Zero(t, notified)

	// With one: retried through a receiver that fails twice, delivered,
	// on the notices' own queue.
	prepared.Notify = true
	res, has, notified, queue := noticeRun(t, prepared, nil, failing(2))
	require.Equal(t, "Completed", res.Status)
	require.Zero(t, has)
	require.EqualValues(t, 3, notified)
	require.Equal(t, "kinflow-cpu-notice", queue)

	// A dead receiver: the activity gives up at its last attempt, and the
	// job's outcome is unchanged.
	res, _, notified, _ = noticeRun(t, prepared, nil, failing(-1))
	require.Equal(t, "Completed", res.Status)
	require.EqualValues(t, activities.NoticeAttempts, notified)

	// A key whose notices stay busy: put off again and again, bounded by
	// the notice's window (schedule-to-close), never by a count of real
	// attempts it never made; the outcome is unchanged.
	busy := func(int32) error {
		return temporal.NewApplicationErrorWithOptions("busy", activities.ErrNoticeKeyBusy,
			temporal.ApplicationErrorOptions{NextRetryDelay: activities.NoticeBusyDelay})
	}
	res, _, notified, _ = noticeRun(t, prepared, nil, busy)
	require.Equal(t, "Completed", res.Status)
	require.Greater(t, notified, int32(activities.NoticeAttempts))
	require.LessOrEqual(t, notified, noticeRetry.MaximumAttempts)

	// A policy from before the notices' queue: derived from the CPU queue.
	prepared.Policy.NoticeTaskQueue = ""
	_, _, _, queue = noticeRun(t, prepared, nil, failing(0))
	require.Equal(t, activities.NoticeTaskQueue("kinflow-cpu"), queue)

	// A job that failed before PrepareInput answered asks the database,
	// and derives the queue from the workflow's own.
	bad := temporal.NewNonRetryableApplicationError("The job's input file could not be read.", activities.ErrInvalidInput, nil)
	res, has, notified, queue = noticeRun(t, activities.PreparedJob{}, bad, failing(0))
	require.Equal(t, "Failed", res.Status)
	require.EqualValues(t, 1, has)
	require.EqualValues(t, 1, notified)
	require.True(t, strings.HasSuffix(queue, "-notice"), queue)
}
