package activities

import (
	"context"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// finishCachedJob runs csv as job id (kcat by B) like a submit would charge
// it: its rows reserved on the key's quota, Predict, Finalize. It returns
// the finished job.
func (h *predictHarness) finishCachedJob(id, csv string, rows int) *store.Job {
	h.t.Helper()
	return h.finishCachedJobWith(id, map[string]string{"kcat": "B"}, csv, rows)
}

// finishCachedJobWith is finishCachedJob for a one-target job by the
// method given.
func (h *predictHarness) finishCachedJobWith(id string, methodsByTarget map[string]string, csv string, rows int) *store.Job {
	h.t.Helper()
	ctx := context.Background()
	h.submit(id, methodsByTarget, true, csv)
	h.a.Store.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"requested_rows": rows, "use_prediction_cache": true})
	job, err := h.a.Store.Job(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if ok, _, err := h.a.Store.ReserveQuota(ctx, job.KeyID, store.QuotaDay(job.SubmittedAt), int64(rows), 1000); !ok || err != nil {
		h.t.Fatalf("reserve %d rows: %v %v", rows, ok, err)
	}
	if _, err := h.predict(id, 0); err != nil {
		h.t.Fatal(err)
	}
	if _, err := h.env.ExecuteActivity(h.a.Finalize, FinalizeInput{JobID: id}); err != nil {
		h.t.Fatal(err)
	}
	job, err = h.a.Store.Job(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	return job
}

// TestCachedRowsAreRefunded: a row whose every prediction came from the
// prediction cache is refunded at the end of the job, like a row without a
// prediction. An identical resubmit is refunded in full; a job with half its
// rows new pays for the new rows only; with the cache off nothing extra is
// refunded. The key's quota counter (both databases) is the proof.
func TestCachedRowsAreRefunded(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		h := newPredictHarness(t, s, nil, "")
		h.a.PredCache = predcache.New(s)
		used := func() int64 { return quotaUsedToday(t, s) }
		// Row 2 ("…W" with water) gets no prediction: refunded on every run.
		seqs := []string{"MKTAYIAK", "MKTAYIAKQ", "MKTAYW", "MKTAYI"}
		first := h.finishCachedJob("refund1", rowsCSV(seqs...), 4)
		if first.RefundedRows != 1 || first.RefundedCachedRows != 0 || used() != 3 {
			t.Fatalf("first run: refunded %d (cached %d), quota used %d; want 1, 0, 3", first.RefundedRows, first.RefundedCachedRows, used())
		}
		again := h.finishCachedJob("refund2", rowsCSV(seqs...), 4)
		if again.Status != store.JobCompleted || again.RefundedRows != 4 || again.RefundedCachedRows != 3 || used() != 3 {
			t.Fatalf("identical resubmit: %s, refunded %d (cached %d), quota used %d; want 4, 3, 3",
				again.Status, again.RefundedRows, again.RefundedCachedRows, used())
		}
		// Two rows known, two new: the two new rows are paid for.
		half := h.finishCachedJob("refund3", rowsCSV("MKTAYIAK", "MKTAYI", "MKTAYIAKQRQIS", "MKTAYIAKQRQISF"), 4)
		if half.RefundedRows != 2 || half.RefundedCachedRows != 2 || used() != 5 {
			t.Fatalf("half new: refunded %d (cached %d), quota used %d; want 2, 2, 5", half.RefundedRows, half.RefundedCachedRows, used())
		}
		// The cache off: every row goes to the engine and is paid for.
		h.submit("refund4", map[string]string{"kcat": "B"}, true, rowsCSV(seqs...))
		s.DB.Model(&store.Job{}).Where("id = ?", "refund4").Updates(map[string]any{"use_prediction_cache": false, "requested_rows": 4})
		if ok, _, err := s.ReserveQuota(ctx, 1, store.QuotaDay(time.Now()), 4, 1000); !ok || err != nil {
			t.Fatal(ok, err)
		}
		if _, err := h.predict("refund4", 0); err != nil {
			t.Fatal(err)
		}
		if _, err := h.env.ExecuteActivity(h.a.Finalize, FinalizeInput{JobID: "refund4"}); err != nil {
			t.Fatal(err)
		}
		off, _ := s.Job(ctx, "refund4")
		if off.RefundedRows != 1 || off.RefundedCachedRows != 0 || used() != 8 {
			t.Fatalf("cache off: refunded %d (cached %d), quota used %d; want 1, 0, 8", off.RefundedRows, off.RefundedCachedRows, used())
		}
		// A retried Finalize refunds nothing twice.
		if _, err := h.env.ExecuteActivity(h.a.Finalize, FinalizeInput{JobID: "refund2"}); err != nil || used() != 8 {
			t.Fatalf("retried Finalize: %v, quota used %d", err, used())
		}
	})
}

// quotaUsedToday is key 1's quota used today.
func quotaUsedToday(t *testing.T, s *store.Store) int64 {
	t.Helper()
	u, err := s.QuotaUsed(context.Background(), 1, store.QuotaDay(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	return u
}
