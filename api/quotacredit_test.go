package api

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// distinctCSV is n rows of distinct sequences.
func distinctCSV(n, from int) string {
	const aa = "ACDEFGHIKLMNPQRSTVY"
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate\n")
	for i := from; i < from+n; i++ {
		seq := []byte(seqA[:20])
		for v := i; ; v /= 19 {
			seq = append(seq, aa[v%19])
			if v < 19 {
				break
			}
		}
		fmt.Fprintf(&b, "%s,CC(=O)O\n", seq)
	}
	return b.String()
}

// finishAsCached ends job id as the worker's Finalize ends a job whose
// every row was predicted: its rows recorded in the cached-rows ledger
// (activities' TestQuotaCreditForCachedRows runs the real Finalize), the
// job Completed with the refund of its rows served from the cache.
func finishAsCached(t *testing.T, st *store.Store, id, csv string, cachedRefund int) {
	t.Helper()
	ctx := context.Background()
	j, err := st.Job(ctx, id)
	if err != nil {
		t.Fatal(err)
	}
	targets, meths := j.Targets, j.Methods
	tbl, err := input.ParseCSV(strings.NewReader(csv), 0)
	if err != nil {
		t.Fatal(err)
	}
	rows := make([][]string, len(tbl.Rows))
	for i, r := range tbl.Rows {
		rows[i] = r.Cells
	}
	specs := predcache.RowSpecs(targets, meths, func(string) string { return "1" }, j.CanonicalizeSubstrates, j.HandleLongSequences)
	if err := predcache.RecordJobRows(ctx, st, specs, tbl.Columns, rows, time.Now()); err != nil {
		t.Fatal(err)
	}
	if _, err := st.FinishJob(ctx, id, store.JobCompleted, "", store.Refund{Rows: cachedRefund, Cached: cachedRefund}, true, "", time.Now()); err != nil {
		t.Fatal(err)
	}
}

// TestSubmitQuotaCountsCachedRows, on both databases: with
// fewer than 10,000 rows of quota left, an identical resubmit of a
// completed 10,000-row job is admitted (every row is in the prediction
// cache), takes nothing from the quota and charges nothing at its end; a
// job with more new rows than the quota left gets its 429, in rows.
func TestSubmitQuotaCountsCachedRows(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		const rows, limit = 10000, 12000
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.DefaultDailyQuota = limit })
		const ip = "198.51.100.36"
		key := h.newKey(ip)
		csv := distinctCSV(rows, 0)
		start := time.Now()
		r := h.submitCSV(ip, key, csv, kcatB...)
		t.Logf("first submit of %d rows (no check needed): %v", rows, time.Since(start))
		wantStatus(t, r, 201)
		first := r.json(t)["jobId"].(string)
		finishAsCached(t, st, first, csv, 0)
		remaining := func(r resp) string { return r.Header().Get("X-RateLimit-Remaining") }
		if got := remaining(h.do("GET", "/api/v1/quota/", ip, key, nil)); got != "2000" {
			t.Fatalf("after the first job %s rows remain, want 2000", got)
		}

		start = time.Now()
		r = h.submitCSV(ip, key, csv, kcatB...)
		// Reported, not asserted: the whole submit with the ledger probe.
		t.Logf("resubmit of %d rows with the cached-rows check: %v", rows, time.Since(start))
		wantStatus(t, r, 201)
		if got := remaining(r); got != "2000" {
			t.Errorf("identical resubmit took quota: %s rows remain, want 2000", got)
		}
		again := r.json(t)["jobId"].(string)
		j, err := st.Job(context.Background(), again)
		if err != nil || j.QuotaCreditRows != rows || j.Charge() != 0 {
			t.Fatalf("resubmit credit %d, charge %d (%v)", j.QuotaCreditRows, j.Charge(), err)
		}
		// Its end (every row from the cache) charges nothing either.
		finishAsCached(t, st, again, csv, rows)
		if got := remaining(h.do("GET", "/api/v1/quota/", ip, key, nil)); got != "2000" {
			t.Errorf("after the resubmit ended %s rows remain, want 2000", got)
		}
		st2 := h.do("GET", "/api/v1/status/"+again+"/", ip, key, nil).json(t)
		if ch, _ := st2["charge"].(map[string]any); ch == nil || ch["rowsCharged"] != float64(rows) || ch["rowsRefunded"] != float64(rows) {
			t.Errorf("resubmit's charge %v", st2["charge"])
		}

		// 5,000 rows held, 5,000 new: 5,000 needed, 2,000 left.
		half := distinctCSV(rows/2, 0) + strings.TrimPrefix(distinctCSV(rows/2, rows), "Protein Sequence,Substrate\n")
		r = h.submitCSV(ip, key, half, kcatB...)
		wantStatus(t, r, 429)
		msg := r.json(t)["error"].(string)
		if !strings.Contains(msg, "2000 rows remaining today") || !strings.Contains(msg, "requires 5000 rows") || !strings.Contains(msg, "5000 of its 10000 rows are already in the prediction cache") {
			t.Fatalf("429: %s", msg)
		}
		// Without the cache (usePredictionCache false) every row counts.
		r = h.submitCSV(ip, key, csv, append(kcatB, "usePredictionCache", "false")...)
		wantStatus(t, r, 429)
		if msg := r.json(t)["error"].(string); !strings.Contains(msg, "requires 10000 rows.") {
			t.Fatalf("429 without the cache: %s", msg)
		}
	})
}
