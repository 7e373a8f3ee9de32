package main

import (
	"strings"
	"testing"

	historypb "go.temporal.io/api/history/v1"

	"github.com/kinflow/kinflow/internal/testenv"
)

// TestScriptOfRecordedHistories: the floor's script of a recorded small
// job (GPU steps inline) has the job's workflow tasks, markers, upserts,
// timer and activity; a history with a child workflow is refused, so the
// floor never runs a shape it does not mirror.
func TestScriptOfRecordedHistories(t *testing.T) {
	load := func(name string) *historypb.History { return testenv.RecordedHistory(t, name) }
	s, err := scriptOf(load("prediction_small_job_inline_gpu").GetEvents())
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, op := range s.Ops {
		count[op]++
	}
	want := map[string]int{opVersion: 9, opLocal: 13, opUpsert: 13, opTimer: 1, opCancel: 1, opActivity: 1, opWait: 1}
	for op, n := range want {
		if count[op] != n {
			t.Errorf("%s: %d in the script, want %d (script %v)", op, count[op], n, s.Ops)
		}
	}
	if s.Events != 48 {
		t.Errorf("events %d, want 48", s.Events)
	}
	// The activity is awaited at the second workflow task, after the timer.
	joined := strings.Join(s.Ops, " ")
	if !strings.Contains(joined, opTimer+" "+opVersion+" "+opUpsert+" "+opVersion+" "+opUpsert+" "+opActivity+" "+opWait+" "+opCancel) {
		t.Errorf("script order: %s", joined)
	}
	if _, err := scriptOf(load("prediction_small_job_quiet_stages").GetEvents()); err == nil || !strings.Contains(err.Error(), "ChildWorkflow") {
		t.Errorf("a history with a child workflow: %v, want a refusal naming the event", err)
	}
}
