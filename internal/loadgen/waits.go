package loadgen

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/sdk/client"
)

// History is workflow workflowID's whole history (its latest run).
func History(ctx context.Context, c client.Client, workflowID string) ([]*historypb.HistoryEvent, error) {
	var evs []*historypb.HistoryEvent
	it := c.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	for it.HasNext() {
		ev, err := it.Next()
		if err != nil {
			return nil, fmt.Errorf("history of %s: %w", workflowID, err)
		}
		evs = append(evs, ev)
	}
	return evs, nil
}

// Where a burst's jobs spent their time, from their workflow histories:
// how long their tasks waited in Temporal's queues and how long they ran
// (tools/loadbench prints it for each burst, the topology load test for
// each api's half). CPU per job says what a job costs; this says what it
// waited for. A burst limited by a queue shows it here first: this is how
// the GPU small lane's steps were found waiting up to 5 s on free slots
// (two pollers for a queue of four partitions; docs/BENCHMARKS.md, "The GPU
// small lane's pollers").

// Waits is one job's time by part.
type Waits struct {
	// Submit: the submit request, from its start to its answer (the
	// client's figure; the workflow starts within it).
	Submit time.Duration
	// WorkflowQueue: workflow tasks from scheduled to started; the first
	// task's wait is also FirstTask.
	WorkflowQueue, FirstTask time.Duration
	// WorkflowRun: workflow tasks from started to completed (local
	// activities run inside them).
	WorkflowRun time.Duration
	// ActivityQueue and ActivityRun: activities (a small job's embedding
	// steps) from scheduled to started, and from started to closed.
	ActivityQueue, ActivityRun time.Duration
	// Total: from the workflow's start to its close.
	Total time.Duration
}

// WaitsOf sums a history's waits. Events whose counterpart is missing (a
// run still open, an activity never started) add nothing.
func WaitsOf(events []*historypb.HistoryEvent) Waits {
	var w Waits
	at := map[int64]time.Time{}
	var start, wftScheduled, wftStarted time.Time
	firstSeen := false
	for _, e := range events {
		t := e.GetEventTime().AsTime()
		at[e.GetEventId()] = t
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED:
			start = t
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED:
			wftScheduled = t
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			wftStarted = t
			if !wftScheduled.IsZero() {
				d := t.Sub(wftScheduled)
				w.WorkflowQueue += d
				if !firstSeen {
					w.FirstTask, firstSeen = d, true
				}
			}
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_TASK_FAILED, enumspb.EVENT_TYPE_WORKFLOW_TASK_TIMED_OUT:
			if !wftStarted.IsZero() {
				w.WorkflowRun += t.Sub(wftStarted)
			}
			wftScheduled, wftStarted = time.Time{}, time.Time{}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			if s, ok := at[e.GetActivityTaskStartedEventAttributes().GetScheduledEventId()]; ok {
				w.ActivityQueue += t.Sub(s)
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED, enumspb.EVENT_TYPE_ACTIVITY_TASK_FAILED, enumspb.EVENT_TYPE_ACTIVITY_TASK_TIMED_OUT:
			// One of the three is set; the others' getters give 0.
			started := e.GetActivityTaskCompletedEventAttributes().GetStartedEventId() +
				e.GetActivityTaskFailedEventAttributes().GetStartedEventId() +
				e.GetActivityTaskTimedOutEventAttributes().GetStartedEventId()
			if s, ok := at[started]; ok {
				w.ActivityRun += t.Sub(s)
			}
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_FAILED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TERMINATED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_TIMED_OUT,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CANCELED, enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_CONTINUED_AS_NEW:
			if !start.IsZero() {
				w.Total = t.Sub(start)
			}
		}
	}
	return w
}

// SummarizeWaits is one line for a burst: each part's median and largest
// over its jobs.
func SummarizeWaits(all []Waits) string {
	if len(all) == 0 {
		return "no histories"
	}
	parts := []struct {
		name string
		of   func(Waits) time.Duration
	}{
		{"submit answered", func(w Waits) time.Duration { return w.Submit }},
		{"first workflow task queued", func(w Waits) time.Duration { return w.FirstTask }},
		{"workflow tasks queued", func(w Waits) time.Duration { return w.WorkflowQueue }},
		{"workflow tasks running", func(w Waits) time.Duration { return w.WorkflowRun }},
		{"activities queued", func(w Waits) time.Duration { return w.ActivityQueue }},
		{"activities running", func(w Waits) time.Duration { return w.ActivityRun }},
		{"workflow open", func(w Waits) time.Duration { return w.Total }},
	}
	var b strings.Builder
	b.WriteString("waits per job, median / largest of the burst's " + fmt.Sprint(len(all)) + ": ")
	ds := make([]time.Duration, len(all))
	for i, p := range parts {
		for k, w := range all {
			ds[k] = p.of(w)
		}
		slices.Sort(ds)
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s %s / %s", p.name, durationText(Percentile(ds, 50)), durationText(ds[len(ds)-1]))
	}
	return b.String()
}

// durationText is d in milliseconds below a second, in seconds above.
func durationText(d time.Duration) string {
	if d >= time.Second {
		return fmt.Sprintf("%.2f s", d.Seconds())
	}
	return fmt.Sprintf("%.0f ms", float64(d.Microseconds())/1000)
}
