// Package heartbeat paces the heartbeats of long Temporal activities, so that
// a live activity is never taken for a dead one whatever its heartbeat
// timeout (KINFLOW_HEARTBEAT_TIMEOUT_SECONDS may be as low as 3 s).
package heartbeat

import (
	"context"
	"time"

	"go.temporal.io/sdk/activity"
)

// Every is how often a long activity heartbeats even without news: a batch
// of long sequences, an mmseqs search or a method's program can run for many
// minutes, and heartbeats are how the worker learns of a cancellation and
// the server of a dead worker.
const Every = 10 * time.Second

// Interval is Every, or a third of the activity's heartbeat timeout when
// that is shorter (at least 100 ms).
func Interval(timeout time.Duration) time.Duration {
	if timeout > 0 && timeout/3 < Every {
		return max(timeout/3, 100*time.Millisecond)
	}
	return Every
}

// Start records a heartbeat for ctx's activity every Interval of its
// heartbeat timeout until the returned stop is called; stop waits until no
// heartbeat can follow. Outside an activity it does nothing.
func Start(ctx context.Context) (stop func()) {
	if !activity.IsActivity(ctx) {
		return func() {}
	}
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		tk := time.NewTicker(Interval(activity.GetInfo(ctx).HeartbeatTimeout))
		defer tk.Stop()
		for {
			select {
			case <-quit:
				return
			case <-ctx.Done():
				return
			case <-tk.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	return func() {
		close(quit)
		<-done
	}
}
