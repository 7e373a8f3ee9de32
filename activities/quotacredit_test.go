package activities

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// distinctRowsCSV is n rows of distinct sequences (base-20 numerals in
// amino-acid letters behind a common head), one substrate each.
func distinctRowsCSV(n, from int) string {
	const aa = "ACDEFGHIKLMNPQRSTVY" + "W"
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate\n")
	for i := from; i < from+n; i++ {
		seq := []byte("MKTAYIAKQR")
		for v := i; ; v /= 19 {
			seq = append(seq, aa[v%19]) // no W: the stand-in engine's failure
			if v < 19 {
				break
			}
		}
		fmt.Fprintf(&b, "%s,CCO\n", seq)
	}
	return b.String()
}

// TestQuotaCreditForCachedRows, on both databases: a completed
// 10,000-row job records its rows in the cached-rows ledger; an identical
// resubmit with fewer than 10,000 rows of quota left finds every row held,
// is admitted with nothing taken from the quota, and its end charges
// nothing; a job with 5,000 new rows still needs 5,000 and is refused.
func TestQuotaCreditForCachedRows(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		h := newPredictHarness(t, s, nil, "")
		h.a.PredCache = predcache.New(s)
		const rows, limit = 10000, 12000
		csv := distinctRowsCSV(rows, 0)
		day := store.QuotaDay(time.Now())
		first := h.finishCachedJobLimit("credit1", csv, rows, limit, 0)
		if first.Status != store.JobCompleted || first.RefundedRows != 0 || quotaUsedToday(t, s) != rows {
			t.Fatalf("first run: %s, refunded %d, used %d", first.Status, first.RefundedRows, quotaUsedToday(t, s))
		}
		specs := predcache.RowSpecs([]string{"kcat"}, map[string]string{"kcat": "B"}, func(string) string { return "1" }, true, "truncate")
		held, err := predcache.RowsHeld(ctx, s, specs, []string{"Protein Sequence", "Substrate"}, cellsOf(csv))
		if err != nil || held != rows {
			t.Fatalf("ledger holds %d of %d rows (%v)", held, rows, err)
		}
		// 2,000 rows of quota left: the identical resubmit is admitted.
		again := h.finishCachedJobLimit("credit2", csv, rows, limit, held)
		if again.Status != store.JobCompleted || again.RefundedCachedRows != rows || again.RefundedRows != rows || quotaUsedToday(t, s) != rows {
			t.Fatalf("identical resubmit: %s, refunded %d (cached %d), used %d; want all refunded and %d used",
				again.Status, again.RefundedRows, again.RefundedCachedRows, quotaUsedToday(t, s), rows)
		}
		// Half new: 5,000 rows needed, 2,000 left.
		half := distinctRowsCSV(rows/2, 0) + strings.TrimPrefix(distinctRowsCSV(rows/2, rows), "Protein Sequence,Substrate\n")
		held, err = predcache.RowsHeld(ctx, s, specs, []string{"Protein Sequence", "Substrate"}, cellsOf(half))
		if err != nil || held != rows/2 {
			t.Fatalf("half new: ledger holds %d rows (%v), want %d", held, err, rows/2)
		}
		if ok, used, err := s.ReserveQuota(ctx, 1, day, int64(rows-held), limit); ok || err != nil || used != rows {
			t.Fatalf("half new: admitted %v (used %d, %v); want refused", ok, used, err)
		}
	})
}

// finishCachedJobLimit runs csv as job id (kcat by B) as a submit with
// credit rows held by the cache would charge it (rows-credit, within
// limit), then Predict and Finalize.
func (h *predictHarness) finishCachedJobLimit(id, csv string, rows int, limit int64, credit int) *store.Job {
	h.t.Helper()
	ctx := context.Background()
	h.submit(id, map[string]string{"kcat": "B"}, true, csv)
	h.a.Store.DB.Model(&store.Job{}).Where("id = ?", id).Updates(map[string]any{"requested_rows": rows, "use_prediction_cache": true, "quota_credit_rows": credit})
	job, err := h.a.Store.Job(ctx, id)
	if err != nil {
		h.t.Fatal(err)
	}
	if ok, used, err := h.a.Store.ReserveQuota(ctx, job.KeyID, store.QuotaDay(job.SubmittedAt), job.Charge(), limit); !ok || err != nil {
		h.t.Fatalf("reserve %d rows (used %d): %v %v", job.Charge(), used, ok, err)
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

func cellsOf(csv string) [][]string {
	var out [][]string
	for _, line := range strings.Split(strings.TrimSpace(csv), "\n")[1:] {
		out = append(out, strings.Split(line, ","))
	}
	return out
}
