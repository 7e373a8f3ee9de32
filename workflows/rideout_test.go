package workflows

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/kinflow/kinflow/activities"
)

var errDiskFull = errors.New("write output.csv: no space left on device")

// TestFinalizeRidesOutAFullDisk: a Finalize that fails for four minutes
// (past shortRetry's 8 attempts, about 100 s) is retried until it succeeds
// within KINFLOW_OUTAGE_RIDE_OUT_SECONDS: the job completes.
func TestFinalizeRidesOutAFullDisk(t *testing.T) {
	pol := gpuPolicy
	pol.OutageRideOutSeconds = 600
	h := newHarness(t, pol, stageB)
	h.plans(complete)
	var start time.Time
	calls := 0
	h.finalizeErr = func(in activities.FinalizeInput) error {
		calls++
		now := h.env.Now()
		if start.IsZero() {
			start = now
		}
		if now.Sub(start) < 4*time.Minute {
			return errDiskFull
		}
		return nil
	}
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.False(t, h.finalized.Failed)
	require.Greater(t, calls, 8, "more attempts than the old policy's 8")
}

// TestFinalizeThatNeverSucceedsFailsTheJob: when Finalize still fails
// after the ride-out, the workflow's own failure path records the job as
// Failed with the cause (Finalize turns "no space left on device" into the
// reason "storage full"), and the workflow completes.
func TestFinalizeThatNeverSucceedsFailsTheJob(t *testing.T) {
	pol := gpuPolicy
	pol.OutageRideOutSeconds = 60
	h := newHarness(t, pol, stageB)
	h.plans(complete)
	var start time.Time
	h.finalizeErr = func(in activities.FinalizeInput) error {
		if start.IsZero() {
			start = h.env.Now()
		}
		if !in.Failed {
			return errDiskFull
		}
		return nil
	}
	res := h.run(t)
	require.Equal(t, "Failed", res.Status)
	require.True(t, h.finalized.Failed)
	require.Contains(t, h.finalized.Message, "no space left on device")
	// The last retry is the one that still starts within the ride-out.
	require.GreaterOrEqual(t, h.env.Now().Sub(start), 30*time.Second, "the ride-out was used")
}
