package activities

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// countingUncertaintyEngine gives, like uncertaintyEngine, a value and an
// uncertainty per row, the uncertainty by the sequence's length (all three
// numbers, none, the total only, an invalid one), and appends the number
// of rows it was given to the file named by its first format verb.
const countingUncertaintyEngine = `import json, sys
args = sys.argv[1:]
inp, out = args[args.index("--input") + 1], args[args.index("--output") + 1]
job = json.load(open(inp))
with open(%q, "a") as f:
    f.write("%%d\n" %% len(job["rows"]))
uncs = [{"sd_total": 0.5, "sd_aleatoric": 0.4, "sd_epistemic": 0.3}, None, {"sd_total": 0.1234567890123}, {"sd_total": -1}]
json.dump({"predictions": [len(r["sequence"]) / 3 for r in job["rows"]],
           "uncertainties": [uncs[len(r["sequence"]) %% 4] for r in job["rows"]]}, open(out, "w"))
`

// TestUncertaintyIsCachedAndRefunded: a method that gives uncertainty (E)
// uses the prediction cache like any other, on both databases. An entry
// stored before the cache kept uncertainties (E without its flag) is a
// miss, not a value with blank uncertainty columns; the job that computes
// it again is charged. An identical resubmit then calls the program for no
// row, writes the very output.csv of the first computation (uncertainty
// columns included; the JSON result is read from it) and is refunded in
// full on the key's quota; so is one on a worker with no memory tier (the
// entries read from the database). The synthetic engine's flagged stand-in
// is cached and refunded likewise.
func TestUncertaintyIsCachedAndRefunded(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		dir := t.TempDir()
		calls := filepath.Join(dir, "calls.txt")
		script := filepath.Join(dir, "e.py")
		if err := os.WriteFile(script, []byte(fmt.Sprintf(countingUncertaintyEngine, calls)), 0o644); err != nil {
			t.Fatal(err)
		}
		h := newPredictHarness(t, s, nil, fmt.Sprintf("  - key: E\n    command: {python: %s, script: %s}\n", python(t), script))
		h.a.PredCache = predcache.New(s).WithMemory(0)
		sent := func() string {
			t.Helper()
			b, err := os.ReadFile(calls)
			if err != nil && !os.IsNotExist(err) {
				t.Fatal(err)
			}
			_ = os.Remove(calls)
			return strings.TrimSpace(string(b))
		}
		used := func() int64 { return quotaUsedToday(t, s) }
		e, _ := h.a.Catalogue.Get("E")
		km := map[string]string{"Km": "E"}
		in := rowsCSV("MKTAYIAK", "MKTAYIAKQ", "MKTAYIAKQR", "MKTAYIAKQRQ")

		// Older entries: stored while the cache kept no uncertainty.
		e.Uncertainty = false
		h.finishCachedJobWith("old", km, in, 4)
		if got := sent(); got != "4" {
			t.Fatalf("older job sent %q rows", got)
		}
		e.Uncertainty = true
		first := h.finishCachedJobWith("first", km, in, 4)
		if got := sent(); got != "4" {
			t.Fatalf("entries without uncertainty were served: the program was given %q rows, want 4", got)
		}
		if first.RefundedRows != 0 || first.PredictionsCached != 0 || used() != 8 {
			t.Fatalf("first: refunded %d, cached %d, quota used %d; want 0, 0, 8", first.RefundedRows, first.PredictionsCached, used())
		}
		header, rows := h.outputCSV("first")
		n := len(header)
		want := [][3]string{{"0.5", "0.4", "0.3"}, {"", "", ""}, {"0.1234567890123", "", ""}, {"", "", ""}}
		if !slices.Equal(header[n-3:], UncertaintyColumns("Km")) {
			t.Fatalf("header %q", header)
		}
		for r, w := range want {
			if got := [3]string(rows[r][n-3:]); got != w {
				t.Fatalf("first: row %d uncertainty %q, want %q", r, got, w)
			}
		}

		// Identical resubmits: from the memory tier, then from the database.
		for _, tc := range []struct {
			id    string
			cache *predcache.Cache
		}{{"again", h.a.PredCache}, {"restarted", predcache.New(s)}} {
			h.a.PredCache = tc.cache
			before := used()
			job := h.finishCachedJobWith(tc.id, km, in, 4)
			if got := sent(); got != "" {
				t.Fatalf("%s: the program was given %q rows, want none", tc.id, got)
			}
			if job.PredictionsCached != 4 || job.RefundedRows != 4 || job.RefundedCachedRows != 4 || used() != before {
				t.Fatalf("%s: cached %d, refunded %d (cached rows %d), quota used %d (before %d); want 4, 4, 4 and no change",
					tc.id, job.PredictionsCached, job.RefundedRows, job.RefundedCachedRows, used(), before)
			}
			h2, r2 := h.outputCSV(tc.id)
			if !slices.Equal(h2, header) || !slices.EqualFunc(r2, rows, slices.Equal) {
				t.Fatalf("%s: output differs from the first computation:\n%q\n%q", tc.id, r2, rows)
			}
		}

		// The synthetic engine's stand-in.
		h.a.Config.PredictionEngine = "synthetic"
		h.finishCachedJobWith("syn1", km, in, 4)
		synHeader, synRows := h.outputCSV("syn1")
		before := used()
		again := h.finishCachedJobWith("syn2", km, in, 4)
		if again.RefundedRows != 4 || again.RefundedCachedRows != 4 || used() != before {
			t.Fatalf("synthetic resubmit: refunded %d (cached rows %d), quota used %d (before %d)", again.RefundedRows, again.RefundedCachedRows, used(), before)
		}
		p, _ := h.predict("syn2", 0)
		for i, r := range p.Results {
			if r.Cached == nil || r.Uncertainty == nil || !r.Uncertainty.Synthetic {
				t.Fatalf("synthetic unit %d: cached %v, uncertainty %+v", i, r.Cached, r.Uncertainty)
			}
		}
		h2, r2 := h.outputCSV("syn2")
		if !slices.Equal(h2, synHeader) || !slices.EqualFunc(r2, synRows, slices.Equal) || synRows[0][len(synHeader)-3] == "" {
			t.Fatalf("synthetic output differs from the first computation:\n%q\n%q", r2, synRows)
		}
	})
}
