package activities

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// MarkStage decides in its UPDATE, from the row as it was, what it used to
// read the stage for: a second running mark keeps the first start time, and
// a completed mark turns an enabled embedding still pending or running into
// done and leaves every other state (and a disabled embedding) as it is; an
// explicit embedding state wins. On both databases.
func TestMarkStageDecidesFromTheRow(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		stages := []store.JobStage{
			{JobID: "markjob1", Index: 0, Target: "kcat", MethodKey: "B", Status: "pending", EmbeddingEnabled: true, EmbeddingState: "pending"},
			{JobID: "markjob1", Index: 1, Target: "Km", MethodKey: "B", Status: "pending", EmbeddingEnabled: true, EmbeddingState: "error"},
			{JobID: "markjob1", Index: 2, Target: "kcat", MethodKey: "J", Status: "pending", EmbeddingEnabled: false, EmbeddingState: "pending"},
			{JobID: "markjob1", Index: 3, Target: "Km", MethodKey: "B", Status: "pending", EmbeddingEnabled: true, EmbeddingState: "running"},
		}
		if err := s.CreateJob(ctx, &store.Job{ID: "markjob1", Status: store.JobProcessing, SubmittedAt: now}, stages); err != nil {
			t.Fatal(err)
		}
		a := &Activities{Store: s, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		mark := func(m StageMark) {
			t.Helper()
			m.JobID = "markjob1"
			if err := a.MarkStage(ctx, m); err != nil {
				t.Fatal(err)
			}
		}
		stage := func(i int) *store.JobStage {
			t.Helper()
			st, err := s.Stage(ctx, "markjob1", i)
			if err != nil {
				t.Fatal(err)
			}
			return st
		}

		mark(StageMark{StageIndex: 0, Status: "running"})
		first := stage(0).StartedAt
		if first == nil || stage(0).Status != "running" {
			t.Fatalf("after the first running mark: %+v", stage(0))
		}
		time.Sleep(20 * time.Millisecond)
		mark(StageMark{StageIndex: 0, Status: "running", EmbeddingState: "running"})
		if st := stage(0); st.StartedAt == nil || !st.StartedAt.Equal(*first) || st.EmbeddingState != "running" {
			t.Fatalf("a second running mark moved the start %v → %v or missed the state (%q)", first, st.StartedAt, st.EmbeddingState)
		}

		for i := range 4 {
			mark(StageMark{StageIndex: i, Status: "completed"})
		}
		for i, want := range []string{"done", "error", "pending", "done"} {
			if st := stage(i); st.EmbeddingState != want || st.Status != "completed" || st.CompletedAt == nil {
				t.Errorf("stage %d after completing: %q %q %v, want embedding %q", i, st.Status, st.EmbeddingState, st.CompletedAt, want)
			}
		}
		mark(StageMark{StageIndex: 1, Status: "completed", EmbeddingState: "not_required"})
		if st := stage(1); st.EmbeddingState != "not_required" || st.EmbeddingEnabled {
			t.Errorf("an explicit state: %q enabled %v, want not_required, disabled", st.EmbeddingState, st.EmbeddingEnabled)
		}
	})
}

// RecordEvent stores the method the workflow names without reading the
// stage, and reads it for an event from an older history that names none.
func TestRecordEventNamesTheMethod(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		if err := s.CreateJob(ctx, &store.Job{ID: "recjob1", Status: store.JobProcessing, SubmittedAt: now},
			[]store.JobStage{{JobID: "recjob1", Index: 0, Target: "Km", MethodKey: "D", Status: "running"}}); err != nil {
			t.Fatal(err)
		}
		a := &Activities{Store: s, Log: slog.New(slog.NewTextHandler(io.Discard, nil))}
		if err := a.RecordEvent(ctx, Event{JobID: "recjob1", Reason: "submitted", Key: "r:1", MethodKey: "D", Target: "Km"}); err != nil {
			t.Fatal(err)
		}
		if err := a.RecordEvent(ctx, Event{JobID: "recjob1", Reason: "done", Key: "r:2"}); err != nil {
			t.Fatal(err)
		}
		evs, err := s.GPUPrecomputeEvents(ctx, "recjob1", 20)
		if err != nil || len(evs) != 2 {
			t.Fatalf("events %v, %v", evs, err)
		}
		for _, ev := range evs {
			if ev.MethodKey != "D" || ev.Target != "Km" {
				t.Errorf("event %q names %s/%s, want D/Km", ev.Reason, ev.MethodKey, ev.Target)
			}
		}
	})
}
