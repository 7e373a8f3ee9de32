package loadgen

import (
	"os"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/client"
)

// TestWaitsOfRecordedSmallJob: a recorded small job's history (rev 1, its
// GPU step inline) splits into its two workflow tasks' queue and run
// times and its one activity's, as the event times give them.
func TestWaitsOfRecordedSmallJob(t *testing.T) {
	f, err := os.Open("../../workflows/testdata/prediction_small_job_rev1.json")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	h, err := client.HistoryFromJSON(f, client.HistoryJSONOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w := WaitsOf(h.GetEvents())
	// Events 2→3 and 17→18 (queued), 3→4 and 18→19 (running), 14→15 and
	// 15→16 (the activity), 1→30 (the whole run).
	want := Waits{
		FirstTask:     6844 * time.Microsecond,
		WorkflowQueue: 6844*time.Microsecond + 6898*time.Microsecond,
		WorkflowRun:   332041*time.Microsecond + 35010*time.Microsecond,
		ActivityQueue: 3976 * time.Microsecond,
		ActivityRun:   410213 * time.Microsecond,
		Total:         798099 * time.Microsecond,
	}
	near := func(name string, got, want time.Duration) {
		if d := got - want; d < -5*time.Microsecond || d > 5*time.Microsecond {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	near("FirstTask", w.FirstTask, want.FirstTask)
	near("WorkflowQueue", w.WorkflowQueue, want.WorkflowQueue)
	near("WorkflowRun", w.WorkflowRun, want.WorkflowRun)
	near("ActivityQueue", w.ActivityQueue, want.ActivityQueue)
	near("ActivityRun", w.ActivityRun, want.ActivityRun)
	near("Total", w.Total, want.Total)
}

// TestSummarizeWaits: each part's median and largest over the jobs, in
// milliseconds below a second and seconds above.
func TestSummarizeWaits(t *testing.T) {
	all := []Waits{
		{FirstTask: 10 * time.Millisecond, ActivityQueue: 100 * time.Millisecond, Total: time.Second},
		{FirstTask: 20 * time.Millisecond, ActivityQueue: 4800 * time.Millisecond, Total: 6 * time.Second},
		{FirstTask: 30 * time.Millisecond, ActivityQueue: 200 * time.Millisecond, Total: 2 * time.Second},
	}
	got := SummarizeWaits(all)
	for _, want := range []string{"burst's 3:", "first workflow task queued 20 ms / 30 ms", "activities queued 200 ms / 4.80 s", "workflow open 2.00 s / 6.00 s"} {
		if !strings.Contains(got, want) {
			t.Errorf("summary %q lacks %q", got, want)
		}
	}
	if SummarizeWaits(nil) != "no histories" {
		t.Error("no jobs: want \"no histories\"")
	}
}
