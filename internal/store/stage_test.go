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
