package api

import (
	"context"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestQueueBoardPastItsCap: with more Pending jobs than the shared list
// holds, a job behind its last entry is counted alone, and every position
// equals the database's count; a list younger than its age bound answers
// after a change, an older one is read again.
func TestQueueBoardPastItsCap(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		ctx := context.Background()
		var at []time.Time
		for i := range 6 {
			at = append(at, t0.Add(time.Duration(i)*time.Second))
			if err := st.DB.Create(&store.Job{ID: "queued" + string(rune('a'+i)), Status: store.JobPending, SubmittedAt: at[i]}).Error; err != nil {
				t.Fatal(err)
			}
		}
		reads, counts := 0, 0
		q := newQueueBoard(func(ctx context.Context, limit int) ([]time.Time, bool, error) {
			reads++
			return st.PendingSubmitTimes(ctx, limit)
		}, func(ctx context.Context, t time.Time) (int, error) {
			counts++
			return st.QueuePosition(ctx, t)
		})
		q.limit = 3
		old := time.Now().Add(-time.Second) // the last change, well before
		for i, a := range at {
			pos, err := q.position(ctx, a, 1, old)
			if err != nil || pos != i+1 {
				t.Fatalf("job %d: position %d %v", i, pos, err)
			}
		}
		if reads != 1 || counts != 3 {
			t.Fatalf("%d list reads and %d counts for 6 jobs, 3 of them behind the list", reads, counts)
		}
		// The first job starts: a change (generation 2). The list, younger
		// than its bound, still answers; once older, it is read again.
		if err := st.UpdateJob(ctx, "queueda", map[string]any{"status": store.JobProcessing}); err != nil {
			t.Fatal(err)
		}
		if pos, _ := q.position(ctx, at[1], 2, time.Now()); pos != 2 || reads != 1 {
			t.Fatalf("within the bound: position %d after %d reads", pos, reads)
		}
		time.Sleep(q.maxAge)
		if pos, _ := q.position(ctx, at[1], 2, time.Now().Add(-q.maxAge)); pos != 1 || reads != 2 {
			t.Fatalf("past the bound: position %d after %d reads", pos, reads)
		}
		// Read more than statusRecheckDelay after the last change, the list
		// answers that generation for good.
		time.Sleep(q.maxAge)
		if pos, _ := q.position(ctx, at[2], 2, time.Now().Add(-time.Minute)); pos != 2 || reads != 2 {
			t.Fatalf("same generation: position %d after %d reads", pos, reads)
		}
	})
}
