package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// unitsCSV is a `Substrates` input whose second row carries subs substrates
// and cands candidate sequences.
func unitsCSV(subs, cands int) string {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrates\n")
	fmt.Fprintf(&b, "%s,CCO\n", seqA)
	var s, c []string
	for i := range subs {
		s = append(s, strings.Repeat("C", i%20+1)+"O")
	}
	for range cands {
		c = append(c, seqA)
	}
	fmt.Fprintf(&b, "%s,%s\n", strings.Join(c, ";"), strings.Join(s, ";"))
	return b.String()
}

// One row may not buy unbounded work (issue 25): a row over
// KINFLOW_MAX_UNITS_PER_ROW, or a job over _PER_JOB, is refused with a 400
// naming the row and its factors, charges nothing and starts nothing;
// /validate/ reports the count; /methods/ states the caps.
func TestPredictionUnitCaps(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.31"
		key := h.newKey(ip)
		// 40 substrates × 30 candidates × 1 target = 1,200 > 1,000.
		r := h.submitCSV(ip, key, unitsCSV(40, 30), "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
		wantStatus(t, r, 400)
		msg, _ := r.json(t)["error"].(string)
		if !strings.Contains(msg, "Row 2 asks for 1200 predictions (40 substrate(s) × 30 candidate sequence(s) × 1 target(s))") ||
			!strings.Contains(msg, "at most 1000 per row") {
			t.Fatalf("error %q", msg)
		}
		q := h.do("GET", "/api/v1/quota/", ip, key, nil)
		if used := q.json(t)["used"]; used != 0.0 {
			t.Fatalf("a refused submit charged %v rows", used)
		}
		if got := h.starter.started(); len(got) != 0 {
			t.Fatalf("a refused submit started %v", got)
		}
		// Just under the cap is accepted: 40 × 25 = 1,000.
		r = h.submitCSV(ip, key, unitsCSV(40, 25), "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
		wantStatus(t, r, 201)

		// /validate/ reports the count and the row over the cap.
		body, ct := multipartBody(t, "input.csv", unitsCSV(40, 30))
		v := h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
		wantStatus(t, v, 200)
		pu, ok := v.json(t)["predictionUnits"].(map[string]any)
		if !ok {
			t.Fatalf("no predictionUnits: %s", v.Body)
		}
		over := pu["overRow"].([]any)
		if pu["total"] != 1201.0 || len(over) != 1 || over[0].(map[string]any)["row"] != 2.0 || pu["error"] == "" {
			t.Fatalf("predictionUnits %v", pu)
		}
		if !strings.Contains(v.Body.String(), `"row":2,"column":"Substrates","level":"error","text":"1200 predictions (40 substrate(s) × 30 candidate sequence(s) × 1 target(s)); this server predicts at most 1000 per row."`) {
			t.Fatalf("messages lack the row over the cap: %s", v.Body)
		}

		// /methods/ states the caps.
		m := h.do("GET", "/api/v1/methods/", ip, "", nil)
		if note, _ := m.json(t)["notes"].(map[string]any)["predictionUnits"].(string); !strings.Contains(note, "at most 1000 per row and 100000 per job") {
			t.Fatalf("methods note %q", note)
		}
	})
}

func TestPredictionUnitCapPerJob(t *testing.T) {
	h := newHarness(t, testenv.OpenStore(t, store.SQLite), func(c *config.Config, _ *Deps) { c.MaxUnitsPerJob = 5 })
	const ip = "198.51.100.32"
	key := h.newKey(ip)
	// 3 rows × 2 targets = 6 > 5.
	r := h.submitCSV(ip, key, csvRows(3), "targets", `["kcat","Km"]`, "methods", `{"kcat":"B","Km":"C"}`)
	wantStatus(t, r, 400)
	if msg := r.json(t)["error"].(string); !strings.Contains(msg, "asks for 6 predictions") || !strings.Contains(msg, "at most 5 per job") {
		t.Fatalf("error %q", msg)
	}
	r = h.submitCSV(ip, key, csvRows(2), "targets", `["kcat","Km"]`, "methods", `{"kcat":"B","Km":"C"}`)
	wantStatus(t, r, 201)
}
