// Package rideout holds a worker's activities while the media root is
// unavailable (mediaroot: renamed away, a lost mount, another root at its
// path), so that running jobs wait for it instead of failing.
//
// One worker interceptor does it for every activity of a worker process
// (the CPU worker's, the GPU host's, local activities included): an
// activity that starts while the root is away waits for it; one that fails
// while the root is away (its writes refused, its files not found) waits
// for it and runs again. It waits at most the outage ride-out
// (KINFLOW_OUTAGE_RIDE_OUT_SECONDS), and never past its attempt's deadline;
// then it fails with a retryable error of type ErrType whose message names
// no path, and the activity's retry policy decides. A job that still fails
// gets that message, which Finalize turns into one sentence.
package rideout

import (
	"context"
	"log/slog"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// ErrType is the application error type of an activity given up on for
// an unavailable media root. It is retryable.
const ErrType = "MediaRootUnavailable"

// margin is what an attempt keeps of its deadline after a wait, to fail
// with ErrType rather than time out.
const margin = 2 * time.Second

// poll is how often a waiting activity looks at the root again.
const poll = 500 * time.Millisecond

// Interceptor holds the activities of a worker while root is unavailable,
// for up to rideOut each. Activities named in skip (those that never touch
// the media root: notices, health probes) run as they are.
func Interceptor(root *mediaroot.Root, rideOut time.Duration, log *slog.Logger, skip ...string) interceptor.WorkerInterceptor {
	if log == nil {
		log = slog.Default()
	}
	s := map[string]bool{}
	for _, n := range skip {
		s[n] = true
	}
	return &workerInterceptor{root: root, rideOut: rideOut, log: log, skip: s}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	root    *mediaroot.Root
	rideOut time.Duration
	log     *slog.Logger
	skip    map[string]bool
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &activityInterceptor{w: w}
	i.Next = next
	return i
}

type activityInterceptor struct {
	interceptor.ActivityInboundInterceptorBase
	w *workerInterceptor
}

func (a *activityInterceptor) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	w := a.w
	if w.root == nil || !activity.IsActivity(ctx) {
		return a.Next.ExecuteActivity(ctx, in)
	}
	info := activity.GetInfo(ctx)
	if w.skip[info.ActivityType.Name] {
		return a.Next.ExecuteActivity(ctx, in)
	}
	// Each wait is bounded by the ride-out from its own start and by the
	// attempt's deadline.
	until := func() time.Time {
		u := time.Now().Add(w.rideOut)
		if !info.Deadline.IsZero() && info.Deadline.Add(-margin).Before(u) {
			u = info.Deadline.Add(-margin)
		}
		return u
	}
	log := w.log.With("activity", info.ActivityType.Name, "workflow_id", info.WorkflowExecution.ID, "attempt", info.Attempt, "media_root", w.root.Path())
	for {
		if err := w.root.Check(); err != nil {
			log.Warn("media root unavailable; the activity waits for it", "error", err, "kind", mediaroot.Kind(err))
			if err := w.wait(ctx, info.IsLocalActivity, until()); err != nil {
				return nil, err
			}
			log.Info("media root back; the activity runs")
		}
		res, err := a.Next.ExecuteActivity(ctx, in)
		if err == nil || ctx.Err() != nil {
			return res, err
		}
		cerr := w.root.CheckNow()
		if cerr == nil {
			return res, err
		}
		// The activity failed while the root was away: that is why,
		// whatever its error says (a file not found, a non-retryable
		// input error for an input it could not read).
		log.Warn("activity failed while the media root was unavailable; it runs again when the root is back", "error", err, "kind", mediaroot.Kind(cerr))
		if err := w.wait(ctx, info.IsLocalActivity, until()); err != nil {
			return nil, err
		}
		log.Info("media root back; the activity runs again")
	}
}

// wait waits until the root checks ok (nil), ctx ends (its error) or until
// passes (a retryable ErrType error), heartbeating a regular activity.
func (w *workerInterceptor) wait(ctx context.Context, local bool, until time.Time) error {
	t := time.NewTicker(poll)
	defer t.Stop()
	for {
		err := w.root.CheckNow()
		if err == nil {
			return nil
		}
		if !time.Now().Before(until) {
			return temporal.NewApplicationError(err.Error()+"; the step is retried while its retry policy allows", ErrType)
		}
		if !local {
			activity.RecordHeartbeat(ctx)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
}
