package loadgen

import (
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/kinflow/kinflow/internal/testenv"
)

// TestWaitsOfRecordedSmallJob: a recorded small job's history (rev 1, its
// GPU step inline) splits into its two workflow tasks' queue and run
// times and its one activity's, as the event times give them.
func TestWaitsOfRecordedSmallJob(t *testing.T) {
	w := WaitsOf(testenv.RecordedHistory(t, "prediction_small_job_rev1").GetEvents())
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

// TestWaitsOfFailedAndTimedOutActivities: an activity's run ends at its
// failure or time-out as at its completion.
func TestWaitsOfFailedAndTimedOutActivities(t *testing.T) {
	t0 := time.Date(2026, 11, 29, 0, 0, 0, 0, time.UTC)
	ev := func(id int64, typ enumspb.EventType, at time.Duration) *historypb.HistoryEvent {
		return &historypb.HistoryEvent{EventId: id, EventType: typ, EventTime: timestamppb.New(t0.Add(at))}
	}
	started := func(id, sched int64, at time.Duration) *historypb.HistoryEvent {
		e := ev(id, enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED, at)
		e.Attributes = &historypb.HistoryEvent_ActivityTaskStartedEventAttributes{ActivityTaskStartedEventAttributes: &historypb.ActivityTaskStartedEventAttributes{ScheduledEventId: sched}}
		return e
	}
	failed := ev(4, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED, 300*time.Millisecond)
	failed.Attributes = &historypb.HistoryEvent_ActivityTaskFailedEventAttributes{ActivityTaskFailedEventAttributes: &historypb.ActivityTaskFailedEventAttributes{StartedEventId: 3}}
	timedOut := ev(7, enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT, 1300*time.Millisecond)
	timedOut.Attributes = &historypb.HistoryEvent_ActivityTaskTimedOutEventAttributes{ActivityTaskTimedOutEventAttributes: &historypb.ActivityTaskTimedOutEventAttributes{StartedEventId: 6}}
	w := WaitsOf([]*historypb.HistoryEvent{
		ev(1, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED, 0),
		ev(2, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 0),
		started(3, 2, 100*time.Millisecond),
		failed,
		ev(5, enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED, 300*time.Millisecond),
		started(6, 5, 300*time.Millisecond),
		timedOut,
		ev(8, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED, 1400*time.Millisecond),
	})
	if w.ActivityQueue != 100*time.Millisecond || w.ActivityRun != 1200*time.Millisecond || w.Total != 1400*time.Millisecond {
		t.Fatalf("queued %v, running %v, open %v; want 100ms, 1.2s, 1.4s", w.ActivityQueue, w.ActivityRun, w.Total)
	}
}
