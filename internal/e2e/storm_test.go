package e2e

import (
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/loadgen"
)

// TestLoadPollingStorm: 200 visitors each submit a 3-row job at once and
// then ask /status/ in a loop with a new connection each time, as naive
// scripts do: first every 2 s, then (a second burst on the same deployment)
// every 200 ms. Every job completes and the quota holds exactly the rows
// submitted, whatever the storm; the ratio of the two bursts' jobs/s is a
// benchmark figure (the goal: at least 0.6), logged, never asserted.
// KINFLOW_STORM_JOBS sets a smaller burst (a quick run on a busy machine).
func TestLoadPollingStorm(t *testing.T) {
	n := 200
	if v, err := strconv.Atoi(os.Getenv("KINFLOW_STORM_JOBS")); err == nil && v > 0 {
		n = v
	}
	d, key := startDev(t)
	calm := burst(t, d.BaseURL, key, loadgen.Options{Jobs: n, Rows: 3, NaivePoll: 2 * time.Second})
	if got := quotaUsed(t, d.BaseURL, key); got != 3*n {
		t.Fatalf("quota used %d after %d jobs of 3 rows, want %d", got, n, 3*n)
	}
	storm := burst(t, d.BaseURL, key, loadgen.Options{Jobs: n, Rows: 3, NaivePoll: 200 * time.Millisecond})
	if got := quotaUsed(t, d.BaseURL, key); got != 6*n {
		t.Fatalf("quota used %d after %d more jobs of 3 rows under a polling storm, want %d", got, n, 6*n)
	}
	t.Logf("polling storm: %d jobs at one read per client every 200 ms: %.1f jobs/s (%d reads refused with 429); every 2 s: %.1f jobs/s; ratio %.2f (goal ≥ 0.60)",
		n, storm.JobsPerSec, storm.StatusRefused, calm.JobsPerSec, storm.JobsPerSec/calm.JobsPerSec)
}
