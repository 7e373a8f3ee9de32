package workflows

import (
	"time"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/activities"
)

// notifyVersion adds the job notice (webhook) after the job's end;
// histories recorded before it replay without.
const notifyVersion = "i35-notify-job"

// noticeWindow bounds a notice from its first attempt to its last: long
// enough to ride out a receiver's restart, short enough that a dead
// receiver does not keep workflows open for hours.
const noticeWindow = 15 * time.Minute

// noticeRetry lets NotifyJob own its schedule: it sets NextRetryDelay on
// each retryable error (the backoff of 2 s doubling to 2 min after a failed
// delivery, a few seconds after an attempt put off for its key's cap),
// counts its real attempts and gives up after activities.NoticeAttempts of
// them. So the policy allows as many attempts as fit in noticeWindow, and
// that window is the bound; its own backoff applies only to errors without
// a delay (a database read that failed). A refused address, or a notice
// given up, is not retried.
var noticeRetry = &temporal.RetryPolicy{
	InitialInterval:        2 * time.Second,
	BackoffCoefficient:     2,
	MaximumInterval:        2 * time.Minute,
	MaximumAttempts:        int32(noticeWindow/activities.NoticeBusyDelay) + activities.NoticeAttempts,
	NonRetryableErrorTypes: []string{activities.ErrNoticeRefused, activities.ErrNoticeGaveUp, activities.ErrJobNotFound},
}

// notify announces the job's end to its notify URL, if it has one. It runs
// after Finalize: the job is already Completed or Failed for every reader,
// and a notice that cannot be delivered shows in the job's events and the
// Temporal UI, never in the job's outcome.
//
// NotifyJob runs on the notices' own task queue (activities.NoticeTaskQueue)
// with its own slots: an attempt waits up to 10 s for its receiver, and on
// the CPU queue receivers that never answer filled the few slots that
// other jobs' Predict needs. An activity's task queue is an option that
// replay does not compare, so histories that scheduled it on the CPU queue
// replay unchanged (no version).
func (w *prediction) notify(ctx workflow.Context) {
	// A prepared job says whether it has a notify URL: one without (most
	// jobs) costs nothing here, not even a version marker in its history.
	prepared := len(w.prep.Stages) > 0
	if prepared && !w.prep.Notify {
		return
	}
	if w.version(ctx, notifyVersion) < 1 {
		return
	}
	// Sent even when the workflow was cancelled after Finalize.
	nctx, _ := workflow.NewDisconnectedContext(ctx)
	in := activities.NoticeInput{JobID: w.in.JobID}
	if !prepared {
		// The job failed before PrepareInput answered: ask the database.
		var has bool
		if err := workflow.ExecuteLocalActivity(w.localOptions(nctx), a.HasNotice, in).Get(nctx, &has); err != nil || !has {
			return
		}
	}
	ao := workflow.ActivityOptions{
		TaskQueue: w.noticeQueue(ctx),
		// One attempt is two small reads, a POST with a 10 s timeout and
		// a small write.
		StartToCloseTimeout:    30 * time.Second,
		ScheduleToCloseTimeout: noticeWindow,
		RetryPolicy:            noticeRetry,
	}
	if err := workflow.ExecuteActivity(workflow.WithActivityOptions(nctx, ao), a.NotifyJob, in).Get(nctx, nil); err != nil {
		workflow.GetLogger(ctx).Warn("job notice not delivered", "job_id", w.in.JobID, "error", err)
	}
}

// noticeQueue is the notices' task queue: the policy's, or derived from the
// CPU task queue where the policy has none (a PrepareInput from before the
// notices' queue, or a job that failed before PrepareInput answered, whose
// CPU queue is the workflow's own).
func (w *prediction) noticeQueue(ctx workflow.Context) string {
	pol := w.prep.Policy
	if pol.NoticeTaskQueue != "" {
		return pol.NoticeTaskQueue
	}
	cpu := pol.CPUTaskQueue
	if cpu == "" {
		cpu = workflow.GetInfo(ctx).TaskQueueName
	}
	return activities.NoticeTaskQueue(cpu)
}
