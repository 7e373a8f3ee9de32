package store_test

import (
	"context"
	"io"
	"log/slog"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// changeLog collects the job ids a store announces.
type changeLog struct {
	mu  sync.Mutex
	ids []string
}

func (l *changeLog) add(id string) { l.mu.Lock(); l.ids = append(l.ids, id); l.mu.Unlock() }

func (l *changeLog) take() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := l.ids
	l.ids = nil
	return out
}

func TestOnJobChangeNamesTheJob(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		var got changeLog
		s.OnJobChange(got.add)
		job := &store.Job{ID: "jobchange1", Status: store.JobPending, SubmittedAt: time.Now().UTC()}
		if err := s.CreateJob(ctx, job, []store.JobStage{{JobID: job.ID, Index: 0, Target: "kcat", MethodKey: "B", Status: "pending"}}); err != nil {
			t.Fatal(err)
		}
		if ids := got.take(); len(ids) < 2 || slices.ContainsFunc(ids, func(id string) bool { return id != job.ID }) {
			t.Fatalf("create: %v", ids)
		}
		steps := []func() error{
			func() error { return s.UpdateJob(ctx, job.ID, map[string]any{"status": store.JobProcessing}) },
			func() error { return s.UpdateStage(ctx, job.ID, 0, map[string]any{"status": "running"}) },
			func() error { return s.SetEmbeddingComputed(ctx, job.ID, 0, 3, time.Now()) },
			func() error {
				_, err := s.AddEvent(ctx, &store.JobEvent{JobID: job.ID, Kind: "x", CreatedAt: time.Now()}, 20)
				return err
			},
			func() error { return s.StartJob(ctx, job.ID, time.Now()) },
		}
		for i, step := range steps {
			if err := step(); err != nil {
				t.Fatal(err)
			}
			if ids := got.take(); len(ids) == 0 || slices.ContainsFunc(ids, func(id string) bool { return id != job.ID }) {
				t.Fatalf("step %d: %v", i, ids)
			}
		}
		// Writes to other tables announce nothing.
		if _, _, err := s.ReserveQuota(ctx, 1, "2026-01-01", 1, 10); err != nil {
			t.Fatal(err)
		}
		if ids := got.take(); len(ids) != 0 {
			t.Fatalf("quota write: %v", ids)
		}
	})
}

// TestListenJobChanges: on Postgres, a write this process's callbacks do not
// see (another process's, here raw SQL) reaches the listeners through the
// triggers' notices.
func TestListenJobChanges(t *testing.T) {
	s := testenv.OpenStore(t, store.Postgres)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var got changeLog
	s.OnJobChange(got.add)
	job := &store.Job{ID: "jobnotice1", Status: store.JobPending, SubmittedAt: time.Now().UTC()}
	if err := s.CreateJob(ctx, job, nil); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() { s.ListenJobChanges(ctx, slog.New(slog.NewTextHandler(io.Discard, nil))); close(done) }()
	waitFor := func(want string) {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if slices.Contains(got.take(), want) {
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no notice %q", want)
	}
	waitFor("") // connected: every job may have changed
	if err := s.DB.Exec("UPDATE job_stages SET status = 'x' WHERE job_id = ?", job.ID).Error; err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec("UPDATE jobs SET status = ? WHERE id = ?", store.JobProcessing, job.ID).Error; err != nil {
		t.Fatal(err)
	}
	waitFor(job.ID)
	cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("the listener did not stop with its context")
	}
}
