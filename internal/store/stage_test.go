package store_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestStage(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		job := &store.Job{ID: "jobstage1", Status: store.JobPending, SubmittedAt: time.Now().UTC()}
		stages := []store.JobStage{
			{JobID: job.ID, Index: 0, Target: "kcat", MethodKey: "B", Status: "pending"},
			{JobID: job.ID, Index: 1, Target: "Km", MethodKey: "C", Status: "running"},
		}
		if err := s.CreateJob(ctx, job, stages); err != nil {
			t.Fatal(err)
		}
		st, err := s.Stage(ctx, job.ID, 1)
		if err != nil {
			t.Fatal(err)
		}
		if st.MethodKey != "C" || st.Target != "Km" || st.Status != "running" {
			t.Errorf("stage 1 = %+v", st)
		}
		if _, err := s.Stage(ctx, job.ID, 2); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("missing stage: %v, want ErrNotFound", err)
		}
		if _, err := s.Stage(ctx, "nojob", 0); !errors.Is(err, store.ErrNotFound) {
			t.Errorf("missing job: %v, want ErrNotFound", err)
		}
	})
}

// The trackers of one worker write their counts together; each count only
// ever raises its stage's (a late write never lowers progress).
func TestSetEmbeddingComputedMany(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		for _, id := range []string{"jobprogA", "jobprogB"} {
			job := &store.Job{ID: id, Status: store.JobPending, SubmittedAt: now}
			if err := s.CreateJob(ctx, job, []store.JobStage{{JobID: id, Index: 0, Target: "kcat", MethodKey: "B", Status: "running"}}); err != nil {
				t.Fatal(err)
			}
		}
		if err := s.SetEmbeddingComputedMany(ctx, []store.Progress{{JobID: "jobprogA", Computed: 7}, {JobID: "jobprogB", Computed: 3}}, now); err != nil {
			t.Fatal(err)
		}
		if err := s.SetEmbeddingComputedMany(ctx, []store.Progress{{JobID: "jobprogA", Computed: 5}, {JobID: "jobprogB", Computed: 9}}, now); err != nil {
			t.Fatal(err)
		}
		for id, want := range map[string]int{"jobprogA": 7, "jobprogB": 9} {
			st, err := s.Stage(ctx, id, 0)
			if err != nil || st.EmbeddingComputed != want {
				t.Fatalf("%s: computed %d, want %d (%v)", id, st.EmbeddingComputed, want, err)
			}
		}
	})
}

// A workflow task that is retried runs its local activities again: an event
// recorded again under its key is stored once; events without a key are
// stored each time, as before keys.
func TestAddEventOncePerKey(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		job := &store.Job{ID: "jobevkey", Status: store.JobPending, SubmittedAt: now}
		if err := s.CreateJob(ctx, job, []store.JobStage{{JobID: job.ID, Index: 0, Target: "kcat", MethodKey: "B", Status: "running"}}); err != nil {
			t.Fatal(err)
		}
		add := func(key, reason string) bool {
			t.Helper()
			stored, err := s.AddEvent(ctx, &store.JobEvent{JobID: job.ID, Kind: store.EventGPUPrecompute, MethodKey: "B", Target: "kcat",
				Reason: reason, CreatedAt: now, Key: key}, 20)
			if err != nil {
				t.Fatal(err)
			}
			return stored
		}
		if !add("run-1:1", "submitted") || !add("run-1:2", "done") {
			t.Fatal("first records not stored")
		}
		if add("run-1:2", "done") {
			t.Fatal("the same key stored twice")
		}
		if !add("run-2:2", "done") || !add("", "x") || !add("", "x") {
			t.Fatal("another run's key, or keyless events, not stored")
		}
		var n int64
		s.DB.Model(&store.JobEvent{}).Where("job_id = ?", job.ID).Count(&n)
		if n != 5 {
			t.Fatalf("%d events stored, want 5", n)
		}
	})
}
