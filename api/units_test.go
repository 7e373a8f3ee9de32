package api

import (
	"fmt"
	"strings"
	"testing"
	"time"

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

// One row may not buy unbounded work, though quota counts rows: a row over
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

// nativeRow is a one-row input whose row carries cands candidate sequences,
// subs substrates and, when prods > 0, a Products cell of prods tokens.
func nativeRow(cands, subs, prods int) string {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrates")
	if prods > 0 {
		b.WriteString(",Products")
	}
	b.WriteString("\n")
	list := func(n int, stem string) string {
		toks := make([]string, n)
		for i := range toks {
			toks[i] = stem + strings.Repeat("C", i%4)
		}
		return strings.Join(toks, ";")
	}
	c := make([]string, cands)
	for i := range c {
		c[i] = seqA
	}
	b.WriteString(strings.Join(c, ";") + "," + list(subs, "CO"))
	if prods > 0 {
		b.WriteString("," + list(prods, "OC"))
	}
	b.WriteString("\n")
	return b.String()
}

// withSubstrateColumn adds a `Substrate` column (CCO on every row) after
// the first column of csv.
func withSubstrateColumn(csv string) string {
	lines := strings.Split(strings.TrimSuffix(csv, "\n"), "\n")
	for i, l := range lines {
		first, rest, _ := strings.Cut(l, ",")
		add := "CCO"
		if i == 0 {
			add = "Substrate"
		}
		lines[i] = first + "," + add + "," + rest
	}
	return strings.Join(lines, "\n") + "\n"
}

// TestPredictionUnitsCountWhatRuns: methods whose program takes a row's whole
// substrate list (method E's kcat) or its whole reaction (method D) count
// every token the program receives per candidate, since counting one unit per
// candidate let a single row run a stack out of memory. A method E row of
// 1,000 candidates × 20,000 substrates and a method D row (100 candidates ×
// 10,000 substrates + 10,000 products) are refused with a 400 naming the
// units and the cap, charge nothing and start nothing; /validate/ with the
// same choice reports the same count; /methods/ says how native methods
// count.
func TestPredictionUnitsCountWhatRuns(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.33"
		key := h.newKey(ip)
		for _, tc := range []struct {
			name, csv, method, want string
			units                   float64
		}{
			{"E", nativeRow(1000, 20000, 0), "E", "Row 1 asks for 20000000 predictions (20000 substrate(s) × 1000 candidate sequence(s) × 1 target(s)); this server predicts at most 1000 per row", 20000000},
			{"D", nativeRow(100, 10000, 10000), "D", "Row 1 asks for 2000000 predictions ((10000 substrate(s) + 10000 product(s)) × 100 candidate sequence(s) × 1 target(s)); this server predicts at most 1000 per row", 2000000},
			// An extra `Substrate` column changes nothing for D: its
			// program reads `Substrates` and `Products` all the same.
			{"D with a Substrate column", withSubstrateColumn(nativeRow(100, 10000, 10000)), "D", "Row 1 asks for 2000000 predictions ((10000 substrate(s) + 10000 product(s)) × 100 candidate sequence(s) × 1 target(s))", 2000000},
		} {
			fields := []string{"targets", `["kcat"]`, "methods", `{"kcat":"` + tc.method + `"}`}
			start := time.Now()
			r := h.submitCSV(ip, key, tc.csv, fields...)
			t.Logf("method %s row (%d bytes): %d in %v (shared machine)", tc.name, len(tc.csv), r.Code, time.Since(start).Round(time.Millisecond))
			wantStatus(t, r, 400)
			if msg, _ := r.json(t)["error"].(string); !strings.Contains(msg, tc.want) {
				t.Fatalf("%s: error %q", tc.name, msg)
			}
			q := h.do("GET", "/api/v1/quota/", ip, key, nil)
			if used := q.json(t)["used"]; used != 0.0 {
				t.Fatalf("%s: a refused submit charged %v rows", tc.name, used)
			}
			if got := h.starter.started(); len(got) != 0 {
				t.Fatalf("%s: a refused submit started %v", tc.name, got)
			}
			body, ct := multipartBody(t, "input.csv", tc.csv, fields...)
			start = time.Now()
			v := h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
			t.Logf("method %s row: /validate/ in %v", tc.name, time.Since(start).Round(time.Millisecond))
			wantStatus(t, v, 200)
			pu, _ := v.json(t)["predictionUnits"].(map[string]any)
			if pu == nil || pu["total"] != tc.units || len(pu["overRow"].([]any)) != 1 {
				t.Fatalf("%s: /validate/ predictionUnits %v", tc.name, pu)
			}
		}
		// A row at the cap of each native method is accepted: 10 × 100
		// substrates for E; 5 × (100 + 100) for D.
		wantStatus(t, h.submitCSV(ip, key, nativeRow(10, 100, 0), "targets", `["kcat"]`, "methods", `{"kcat":"E"}`), 201)
		wantStatus(t, h.submitCSV(ip, key, nativeRow(5, 100, 100), "targets", `["kcat"]`, "methods", `{"kcat":"D"}`), 201)

		m := h.do("GET", "/api/v1/methods/", ip, "", nil)
		if note, _ := m.json(t)["notes"].(map[string]any)["predictionUnits"].(string); !strings.Contains(note, "whole list") {
			t.Fatalf("methods note %q", note)
		}
	})
}

// TestCellByteCaps: a cell over KINFLOW_MAX_CELL_BYTES, or a row whose list
// cells are over KINFLOW_MAX_ROW_LIST_BYTES together, is refused with a 400
// naming the row, the column and the cap, charging nothing; /validate/
// reports it on the cell.
func TestCellByteCaps(t *testing.T) {
	h := newHarness(t, testenv.OpenStore(t, store.SQLite), func(c *config.Config, _ *Deps) { c.MaxCellBytes, c.MaxRowListBytes = 4096, 6144 })
	const ip = "198.51.100.34"
	key := h.newKey(ip)
	long := strings.Repeat("CO;", 2000) // 6,000 bytes
	r := h.submitCSV(ip, key, "Protein Sequence,Substrates\n"+seqA+",CCO\n"+seqA+","+long+"\n", kcatB...)
	wantStatus(t, r, 400)
	if msg, _ := r.json(t)["error"].(string); !strings.Contains(msg, "Row 2: The Substrates cell holds 6000 bytes; this server takes at most 4096 bytes per cell.") {
		t.Fatalf("error %q", msg)
	}
	mid := strings.Repeat("CO;", 1300) // 3,900 bytes each, 7,800 together
	r = h.submitCSV(ip, key, "Protein Sequence,Substrates,Products\n"+seqA+","+mid+","+mid+"\n", "targets", `["kcat"]`, "methods", `{"kcat":"D"}`)
	wantStatus(t, r, 400)
	if msg, _ := r.json(t)["error"].(string); !strings.Contains(msg, "at most 6144 per row") {
		t.Fatalf("error %q", msg)
	}
	if used := h.do("GET", "/api/v1/quota/", ip, key, nil).json(t)["used"]; used != 0.0 {
		t.Fatalf("charged %v", used)
	}
	body, ct := multipartBody(t, "input.csv", "Protein Sequence,Substrates\n"+seqA+","+long+"\n")
	v := h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
	wantStatus(t, v, 200)
	if !strings.Contains(v.Body.String(), `"row":1,"column":"Substrates","level":"error","text":"The Substrates cell holds 6000 bytes`) {
		t.Fatalf("validate: %s", v.Body)
	}
}
