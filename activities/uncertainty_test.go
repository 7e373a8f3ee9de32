package activities

import (
	"encoding/csv"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// uncertaintyEngine is a stand-in for a method that gives uncertainties
// (the JSON contract's "uncertainties", CatPred's three numbers): row 0 all
// three, row 1 none (null), row 2 the total only, row 3 an invalid entry.
const uncertaintyEngine = `import json, sys
args = sys.argv[1:]
inp, out = args[args.index("--input") + 1], args[args.index("--output") + 1]
job = json.load(open(inp))
uncs = [{"sd_total": 0.5, "sd_aleatoric": 0.4, "sd_epistemic": 0.3}, None, {"sd_total": 0.25}, {"sd_total": -1}]
json.dump({"predictions": [len(r["sequence"]) for r in job["rows"]],
           "uncertainties": [uncs[i % 4] for i in range(len(job["rows"]))]}, open(out, "w"))
`

// finishedOutput runs every stage's Predict and Finalize for job id and
// returns output.csv's header and rows.
func (h *predictHarness) finishedOutput(id string, stages int) ([]string, [][]string) {
	h.t.Helper()
	for i := 0; i < stages; i++ {
		if _, err := h.predict(id, i); err != nil {
			h.t.Fatal(err)
		}
	}
	if _, err := h.env.ExecuteActivity(h.a.Finalize, FinalizeInput{JobID: id}); err != nil {
		h.t.Fatal(err)
	}
	return h.outputCSV(id)
}

// outputCSV is the finished job's output.csv: header and rows.
func (h *predictHarness) outputCSV(id string) ([]string, [][]string) {
	h.t.Helper()
	dir, _ := h.a.jobDir(id)
	f, err := os.Open(filepath.Join(dir, "output.csv"))
	if err != nil {
		h.t.Fatal(err)
	}
	defer f.Close()
	recs, err := csv.NewReader(f).ReadAll()
	if err != nil {
		h.t.Fatal(err)
	}
	return recs[0], recs[1:]
}

// TestUncertaintyColumns: a method that gives uncertainties (E, as CatPred)
// gets its target's three uncertainty columns after every other column, on
// the command engine (the program's numbers) and on the synthetic engine (a
// flagged stand-in); a method that gives none (B) gets no such column, and
// the columns before them are those of a job without uncertainties.
func TestUncertaintyColumns(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	dir := t.TempDir()
	script := filepath.Join(dir, "e.py")
	if err := os.WriteFile(script, []byte(uncertaintyEngine), 0o644); err != nil {
		t.Fatal(err)
	}
	h := newPredictHarness(t, s, nil, fmt.Sprintf("  - key: E\n    command: {python: %s, script: %s}\n", python(t), script))
	in := rowsCSV("MKTAYIAK", "MKTAYIAKQ", "MKTAYIAKQR", "MKTAYIAKQRQ")
	kmCols := []string{"Uncertainty Km total (SD, log10)", "Uncertainty Km aleatoric (SD, log10)", "Uncertainty Km epistemic (SD, log10)"}

	// Without uncertainties: the reference's columns.
	h.submit("plain", map[string]string{"kcat": "B", "Km": "B"}, true, in)
	plainHeader, _ := h.finishedOutput("plain", 2)
	for _, c := range plainHeader {
		if strings.HasPrefix(c, "Uncertainty") {
			t.Fatalf("a method without uncertainties has column %q", c)
		}
	}

	// Command engine: B for kcat (none), E for Km (the program's numbers).
	h.submit("cmd", map[string]string{"kcat": "B", "Km": "E"}, true, in)
	header, rows := h.finishedOutput("cmd", 2)
	n := len(header)
	if !slices.Equal(header[n-3:], kmCols) || slices.ContainsFunc(header[:n-3], func(c string) bool { return strings.HasPrefix(c, "Uncertainty") }) {
		t.Fatalf("header %q", header)
	}
	// The columns before them are placed as in a job without uncertainties.
	for i, c := range plainHeader {
		if header[i] != c && !strings.HasPrefix(c, "KM") && !strings.HasPrefix(header[i], "KM") {
			t.Fatalf("column %d: %q, without uncertainties %q", i, header[i], c)
		}
	}
	want := [][3]string{{"0.5", "0.4", "0.3"}, {"", "", ""}, {"0.25", "", ""}, {"", "", ""}}
	for r, w := range want {
		if got := [3]string(rows[r][n-3:]); got != w {
			t.Fatalf("row %d: %q, want %q", r, got, w)
		}
	}

	// Synthetic engine: a stand-in, flagged in the stage's predictions, in range.
	h.a.Config.PredictionEngine = "synthetic"
	h.submit("syn", map[string]string{"Km": "E"}, true, in)
	header, rows = h.finishedOutput("syn", 1)
	n = len(header)
	if !slices.Equal(header[n-3:], kmCols) {
		t.Fatalf("synthetic header %q", header)
	}
	p, _ := h.predict("syn", 0)
	for r, row := range rows {
		total, err := strconv.ParseFloat(row[n-3], 64)
		if err != nil || total < 0.2 || total > 0.8 || row[n-2] == "" || row[n-1] == "" {
			t.Fatalf("synthetic row %d: %q", r, row[n-3:])
		}
		if u := p.Results[r].Uncertainty; u == nil || !u.Synthetic {
			t.Fatalf("synthetic unit %d: %+v", r, u)
		}
		if !strings.Contains(row[slices.Index(header, "Source Km")], "Synthetic") {
			t.Fatalf("synthetic row %d source: %q", r, row)
		}
	}
}
