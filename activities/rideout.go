package activities

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"

	"github.com/kinflow/kinflow/internal/store"
)

// storeRetry runs fn, a database step of a long activity (Predict), again
// while it fails because the database is unreachable (store.Unavailable),
// for up to KINFLOW_OUTAGE_RIDE_OUT_SECONDS, heartbeating every second so
// the activity is not taken for dead. The short bookkeeping
// steps ride an outage out by their retry policy (workflows); a long
// activity's policy gives few attempts, since each one may redo hours of
// work, so it waits for the database here instead.
func (a *Activities) storeRetry(ctx context.Context, fn func() error) error {
	ride := a.Config.OutageRideOut
	if ride <= 0 {
		ride = 10 * time.Minute
	}
	deadline := time.Now().Add(ride)
	wait := time.Second
	for {
		err := fn()
		if err == nil || !store.Unavailable(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		a.Log.Warn("database unavailable; waiting", "error", err, "retry_in", wait)
		until := time.Now().Add(wait)
		for time.Now().Before(until) {
			if activity.IsActivity(ctx) {
				activity.RecordHeartbeat(ctx)
			}
			select {
			case <-ctx.Done():
				return err
			case <-time.After(time.Second):
			}
		}
		wait = min(2*wait, 15*time.Second)
	}
}
