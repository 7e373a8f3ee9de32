package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestJobCountsByStatus(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		got, err := s.JobCountsByStatus(ctx)
		if err != nil || len(got) != 0 {
			t.Fatalf("empty database: %v %v", got, err)
		}
		now := time.Now().UTC()
		for i, st := range []string{"Pending", "Pending", "Completed", "Failed", "Pending"} {
			job := &store.Job{ID: "job" + string(rune('a'+i)), Status: st, SubmittedAt: now}
			if err := s.DB.Create(job).Error; err != nil {
				t.Fatal(err)
			}
		}
		got, err = s.JobCountsByStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got["Pending"] != 3 || got["Completed"] != 1 || got["Failed"] != 1 || len(got) != 3 {
			t.Fatalf("counts %v", got)
		}
	})
}

// TestPendingSubmitTimesAnswerQueuePosition: the shared list of Pending
// jobs' submit times gives every job the position QueuePosition counts
// (jobs of other statuses left out, equal times not ahead), oldest first,
// and says when a limit cut it short.
func TestPendingSubmitTimesAnswerQueuePosition(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		t0 := time.Date(2026, 3, 4, 14, 30, 2, 123456000, time.UTC)
		offsets := []time.Duration{5, 1, 3, 3, 0, 2, 4}
		statuses := []string{"Pending", "Pending", "Pending", "Pending", "Processing", "Submitting", "Pending"}
		for i, off := range offsets {
			job := &store.Job{ID: "job" + string(rune('a'+i)), Status: statuses[i], SubmittedAt: t0.Add(off * time.Millisecond)}
			if err := s.DB.Create(job).Error; err != nil {
				t.Fatal(err)
			}
		}
		ts, full, err := s.PendingSubmitTimes(ctx, 100)
		if err != nil || !full || len(ts) != 5 {
			t.Fatalf("list %v full %v err %v", ts, full, err)
		}
		for i := 1; i < len(ts); i++ {
			if ts[i].Before(ts[i-1]) {
				t.Fatalf("not oldest first: %v", ts)
			}
		}
		for _, off := range offsets {
			at := t0.Add(off * time.Millisecond)
			want, err := s.QueuePosition(ctx, at)
			if err != nil {
				t.Fatal(err)
			}
			n := 0
			for _, x := range ts {
				if x.Before(at) {
					n++
				}
			}
			if n+1 != want {
				t.Fatalf("at +%v ms: the list says %d, the count %d (list %v)", int(off), n+1, want, ts)
			}
		}
		ts, full, err = s.PendingSubmitTimes(ctx, 2)
		if err != nil || full || len(ts) != 2 || !ts[0].Equal(t0.Add(time.Millisecond)) || !ts[1].Equal(t0.Add(3*time.Millisecond)) {
			t.Fatalf("limited to 2: %v full %v err %v", ts, full, err)
		}
	})
}
