package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/testenv"
)

// engineBCounting stands in for method B's program and appends the number
// of rows it was given to rows.log beside itself: the test reads how many
// rows reached the program on each call. MS_PER_ROW (default 0) makes it
// take that long per row, like a model.
const engineBCounting = `import json, os, sys, time
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
rows, preds, reasons = job["rows"], [], {}
time.sleep(len(rows) * float(os.environ.get("MS_PER_ROW", "0")) / 1000)
with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "rows.log"), "a") as f:
    f.write("%d\n" % len(rows))
for i, row in enumerate(rows):
    preds.append(len(row["sequence"]) * 3 + len(row["substrates"]))
    if row["substrates"] == "O":
        reasons[str(i)] = "water is not a substrate"
json.dump({"predictions": preds, "invalid_indices": [], "invalid_reasons": reasons}, open(out, "w"))
`

// cacheRows is a kcat input of len(seqs) × len(subs) rows: every
// (sequence, substrate) pair, one prediction unit each.
func cacheRows(seqs, subs []string) string {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate\n")
	for _, q := range seqs {
		for _, s := range subs {
			fmt.Fprintf(&b, "%s,%s\n", q, s)
		}
	}
	return b.String()
}

// chainSubstrates are n distinct small valid SMILES (C…COC…C) from start.
func chainSubstrates(start, n int) []string {
	out := make([]string, 0, n)
	for i := start; len(out) < n; i++ {
		out = append(out, strings.Repeat("C", 1+i%40)+"O"+strings.Repeat("C", 1+i/40))
	}
	return out
}

// cacheStatus is the part of the status payload about the cache.
type cacheStatus struct {
	Status    string `json:"status"`
	Error     string `json:"error"`
	Synthetic bool   `json:"synthetic"`
	Progress  struct {
		PredictionsMade   int `json:"predictionsMade"`
		PredictionsCached int `json:"predictionsCached"`
	} `json:"progress"`
	Provenance []struct {
		PredictionsCached int `json:"predictionsCached"`
		CachedRows        []struct {
			Row             int    `json:"row"`
			FirstComputedAt string `json:"firstComputedAt"`
		} `json:"cachedRows"`
	} `json:"provenance"`
}

func (s *stack) runCached(t *testing.T, csv string) (string, cacheStatus) {
	t.Helper()
	id := s.submit(csv, []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(id, 120*time.Second); st.Status != "Completed" {
		t.Fatalf("job %s: %s %s", id, st.Status, st.Error)
	}
	var cs cacheStatus
	s.do("GET", "/api/v1/status/"+id+"/", nil, "", &cs)
	return id, cs
}

// TestPredictionCacheEndToEnd runs the prediction cache on real processes
// with the command engine and a stand-in program for B: a second run of the
// same job sends 0 rows to the program and reports every unit cached (the
// status's predictionsCached, the provenance's cached rows, the same result);
// a job with half its rows new sends exactly those; a new model_version in
// the methods file (worker restarted) and a changed program both miss.
func TestPredictionCacheEndToEnd(t *testing.T) {
	py := input.DefaultPython
	if err := exec.Command(py, "-c", "import json").Run(); err != nil {
		testenv.Unavailable(t, "the engine program needs %s", py)
	}
	dir := t.TempDir()
	bScript := filepath.Join(dir, "b.py")
	if err := os.WriteFile(bScript, []byte(engineBCounting), 0o644); err != nil {
		t.Fatal(err)
	}
	methodsFile := filepath.Join(dir, "methods.yaml")
	writeMethods := func(version string) {
		yaml := fmt.Sprintf("methods:\n  - key: B\n    model_version: %q\n    command: {python: %s, script: %s}\n", version, py, bScript)
		if err := os.WriteFile(methodsFile, []byte(yaml), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	writeMethods("1")
	calls := func() []string {
		b, _ := os.ReadFile(filepath.Join(dir, "rows.log"))
		return strings.Fields(string(b))
	}
	s := newStack(t, map[string]string{"KINFLOW_PREDICTION_ENGINE": "command", "KINFLOW_METHODS_FILE": methodsFile}, nil)
	seqs := []string{"MKTAYIAKQRQISFVKSHFSRQ", "MSKGEELFTGVVPILVELDGDV", "MAHHHHHHVDDDDKMLEQ", "MTEYKLVVVGAGGVGKSALT"}
	subs := append(chainSubstrates(0, 9), "O")
	csv := cacheRows(seqs, subs)

	id1, st1 := s.runCached(t, csv)
	if c := calls(); len(c) != 1 || c[0] != "40" || st1.Progress.PredictionsCached != 0 {
		t.Fatalf("first run: program calls %v, cached %d", c, st1.Progress.PredictionsCached)
	}
	id2, st2 := s.runCached(t, csv)
	if c := calls(); len(c) != 1 {
		t.Fatalf("second run called the program: %v", c)
	}
	if st2.Progress.PredictionsCached != 40 || st2.Progress.PredictionsMade != 36 || len(st2.Provenance) != 1 ||
		st2.Provenance[0].PredictionsCached != 40 || len(st2.Provenance[0].CachedRows) != 40 || st2.Provenance[0].CachedRows[0].FirstComputedAt == "" {
		t.Fatalf("second run status %+v", st2)
	}
	r1, r2 := s.resultCSV(id1), s.resultCSV(id2)
	if r1 != r2 || !strings.Contains(r2, "water is not a substrate") {
		t.Fatalf("results differ:\n%s\n---\n%s", r1, r2)
	}
	var res struct {
		Provenance []struct {
			CachedRows []struct {
				Row int `json:"row"`
			} `json:"cachedRows"`
		} `json:"provenance"`
	}
	s.do("GET", "/api/v1/result/"+id2+"/?format=json", nil, "", &res)
	if len(res.Provenance) != 1 || len(res.Provenance[0].CachedRows) != 40 {
		t.Fatalf("JSON result provenance %+v", res.Provenance)
	}

	// Half the rows new: exactly those reach the program.
	half := cacheRows(seqs[:2], subs) + cacheRows([]string{"MKVLAAGIVGLLLAAGCSS", "MGSSHHHHHHSSGLVPRGSH"}, subs)
	if _, st := s.runCached(t, half); st.Progress.PredictionsCached != 20 {
		t.Fatalf("half-new: cached %d", st.Progress.PredictionsCached)
	}
	if c := calls(); len(c) != 2 || c[1] != "20" {
		t.Fatalf("half-new run: program calls %v, want a second call of 20 rows", c)
	}

	// A new model_version misses (the worker reads the methods file at start).
	writeMethods("2")
	s.stopRole("worker")
	s.start("worker")
	if _, st := s.runCached(t, csv); st.Progress.PredictionsCached != 0 {
		t.Fatalf("new model_version: cached %d", st.Progress.PredictionsCached)
	}
	if c := calls(); len(c) != 3 || c[2] != "40" {
		t.Fatalf("new model_version: program calls %v", c)
	}
	// A changed program (the engine's fingerprint) misses.
	if err := os.WriteFile(bScript, []byte(engineBCounting+"\n# retrained\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, st := s.runCached(t, csv); st.Progress.PredictionsCached != 0 {
		t.Fatalf("changed program: cached %d", st.Progress.PredictionsCached)
	}
	if c := calls(); len(c) != 4 || c[3] != "40" {
		t.Fatalf("changed program: program calls %v", c)
	}
}

// TestPredictionCacheSyntheticEndToEnd: the synthetic engine caches too;
// the second run reports every unit cached and stays flagged synthetic.
func TestPredictionCacheSyntheticEndToEnd(t *testing.T) {
	s := newStack(t, nil, nil)
	csv := cacheRows([]string{"MKTAYIAKQRQISFVKSHFSRQ", "MSKGEELFTGVVPILVELDGDV"}, chainSubstrates(0, 5))
	id1, st1 := s.runCached(t, csv)
	id2, st2 := s.runCached(t, csv)
	if st1.Progress.PredictionsCached != 0 || st2.Progress.PredictionsCached != 10 || !st2.Synthetic {
		t.Fatalf("cached %d then %d, synthetic %v", st1.Progress.PredictionsCached, st2.Progress.PredictionsCached, st2.Synthetic)
	}
	if r1, r2 := s.resultCSV(id1), s.resultCSV(id2); r1 != r2 || !strings.Contains(r2, "Synthetic placeholder") {
		t.Fatalf("results differ or not flagged:\n%s\n---\n%s", r1, r2)
	}
}
