package store_test

import (
	"context"
	"errors"
	"reflect"
	"strings"
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

// TestUnfinishedWorkByKeyAndWeights: unfinished jobs summed by key, status
// and class, largest first, finished jobs left out; a key's weight is nil
// until set (a NULL column, read without error) and nil again when reset.
func TestUnfinishedWorkByKeyAndWeights(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		now := time.Now().UTC()
		for i, j := range []store.Job{
			{ID: "a1", KeyID: 1, Status: store.JobPending, Priority: "normal", RequestedRows: 150},
			{ID: "a2", KeyID: 1, Status: store.JobPending, Priority: "normal", RequestedRows: 150},
			{ID: "a3", KeyID: 1, Status: store.JobProcessing, Priority: "normal", RequestedRows: 150},
			{ID: "b1", KeyID: 2, Status: store.JobProcessing, Priority: "bulk", RequestedRows: 9000},
			{ID: "b2", KeyID: 2, Status: store.JobCompleted, Priority: "bulk", RequestedRows: 9000},
			{ID: "c1", KeyID: 3, Status: store.JobFailed, Priority: "interactive", RequestedRows: 3},
		} {
			j.SubmittedAt = now.Add(time.Duration(i) * time.Millisecond)
			if err := s.DB.Create(&j).Error; err != nil {
				t.Fatal(err)
			}
		}
		got, err := s.UnfinishedWorkByKey(ctx)
		if err != nil {
			t.Fatal(err)
		}
		want := []store.KeyWork{
			{KeyID: 2, Status: store.JobProcessing, Priority: "bulk", Jobs: 1, Rows: 9000},
			{KeyID: 1, Status: store.JobPending, Priority: "normal", Jobs: 2, Rows: 300},
			{KeyID: 1, Status: store.JobProcessing, Priority: "normal", Jobs: 1, Rows: 150},
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("got %+v\nwant %+v", got, want)
		}
		k := store.APIKey{IPAddress: "10.0.0.9", KeyHash: "hw", KeySuffix: "wwwwww", IsActive: true, CreatedAt: now}
		if err := s.DB.Create(&k).Error; err != nil {
			t.Fatal(err)
		}
		if w, err := s.KeyWeight(ctx, k.ID); err != nil || w != nil {
			t.Fatalf("unset weight: %v %v", w, err)
		}
		two := 2.0
		if err := s.SetKeyWeight(ctx, k.ID, &two); err != nil {
			t.Fatal(err)
		}
		if w, err := s.KeyWeight(ctx, k.ID); err != nil || w == nil || *w != 2 {
			t.Fatalf("weight: %v %v", w, err)
		}
		if ws, err := s.KeyWeights(ctx, []int64{k.ID, 999999}); err != nil || len(ws) != 1 || ws[k.ID] != 2 {
			t.Fatalf("weights: %v %v", ws, err)
		}
		if err := s.SetKeyWeight(ctx, k.ID, nil); err != nil {
			t.Fatal(err)
		}
		if w, err := s.KeyWeight(ctx, k.ID); err != nil || w != nil {
			t.Fatalf("reset weight: %v %v", w, err)
		}
		if w, err := s.KeyWeight(ctx, 999999); err != nil || w != nil {
			t.Fatalf("no such key: %v %v", w, err)
		}
	})
}

// TestWorkflowLevelRefusesOlderWorkers: a worker's level is recorded; a
// lower one is refused with one sentence naming both levels; the level is
// lowered again only with no job unfinished.
func TestWorkflowLevelRefusesOlderWorkers(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if err := s.ClaimWorkflowLevel(ctx, 13); err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimWorkflowLevel(ctx, 14); err != nil {
			t.Fatal(err)
		}
		err := s.ClaimWorkflowLevel(ctx, 13)
		var tooNew *store.WorkflowTooNewError
		if !errors.As(err, &tooNew) || tooNew.Recorded != 14 || tooNew.Mine != 13 || strings.Contains(err.Error(), "\n") {
			t.Fatalf("older worker: %v", err)
		}
		if err := s.ClaimWorkflowLevel(ctx, 14); err != nil {
			t.Fatalf("same level: %v", err)
		}
		job := &store.Job{ID: "running", Status: store.JobProcessing, SubmittedAt: time.Now().UTC()}
		if err := s.DB.Create(job).Error; err != nil {
			t.Fatal(err)
		}
		if _, err := s.AcceptOlderWorkflows(ctx, 13); !errors.Is(err, store.ErrJobsUnfinished) {
			t.Fatalf("accept with a job running: %v", err)
		}
		s.DB.Model(job).Update("status", store.JobCompleted)
		if was, err := s.AcceptOlderWorkflows(ctx, 13); err != nil || was != 14 {
			t.Fatalf("accept: %d %v", was, err)
		}
		if err := s.ClaimWorkflowLevel(ctx, 13); err != nil {
			t.Fatalf("after accepting: %v", err)
		}
	})
}
