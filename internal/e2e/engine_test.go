package e2e

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/testenv"
)

// engineB stands in for method B's program (the generic JSON contract). It
// records what it was given next to itself, so the test can see the
// operator's paths and the rows that reached it.
const engineB = `import json, os, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
seen = {"model_root": os.environ.get("METHODB_MODEL_ROOT"), "media": os.environ.get("METHODB_MEDIA_PATH"), "job": job}
json.dump(seen, open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "b-seen.json"), "w"))
mult = {"KCAT": 3, "KM": 2}[job["params"]["kinetics_type"]]
rows, preds, reasons = job["rows"], [], {}
for i, row in enumerate(rows):
    preds.append(len(row["sequence"]) * mult)
    if row["substrates"] == "O":
        reasons[str(i)] = "water is not a substrate"
    print("Progress: %d/%d" % (i + 1, len(rows)), flush=True)
json.dump({"predictions": preds, "invalid_indices": [], "invalid_reasons": reasons}, open(out, "w"))
`

// engineC stands in for method C's program (the substrate_csv contract).
const engineC = `import csv, sys
inp, out, kt = sys.argv[1], sys.argv[2], sys.argv[3]
offset = {"KCAT": 0.5, "KM": 0.25}[kt]
r = csv.reader(open(inp, newline=""))
header = next(r)
assert header == ["Substrate SMILES", "Protein Sequence"], header
rows = list(r)
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["Protein Sequence", "Predicted Value"])
    for i, (smiles, seq) in enumerate(rows):
        assert smiles, "empty substrate"
        w.writerow([seq, len(seq) + offset])
        print("Progress: %d/%d" % (i + 1, len(rows)), flush=True)
`

// builtOnSynthetic is the Source cell of a command engine's value computed
// from synthetic embeddings; syntheticExtra its Extra Info cell.
func builtOnSynthetic(display string) string {
	return "Synthetic placeholder from Method " + display + " (built on synthetic embeddings, not a prediction)"
}

const syntheticExtra = "synthetic backend: stand-in number, not a prediction"

// TestCommandEngineEndToEnd runs a job on the command engine: the worker
// reads the operator's methods file, runs C's and B's own programs with
// their file contracts and the configured paths, and their numbers come
// back in the result. The step executor is the synthetic one, so the
// embeddings the programs were given are synthetic: the numbers are
// flagged synthetic, never presented as predictions (README.md, "Where a
// number came from").
func TestCommandEngineEndToEnd(t *testing.T) {
	py := input.DefaultPython
	if err := exec.Command(py, "-c", "import csv, json").Run(); err != nil {
		testenv.Unavailable(t, "the engine programs need %s", py)
	}
	dir := t.TempDir()
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	bScript, cScript := write("b.py", engineB), write("c.py", engineC)
	modelDir := filepath.Join(dir, "models", "b")
	methodsFile := write("methods.yaml", fmt.Sprintf(`methods:
  - key: B
    command:
      python: %s
      script: %s
      paths: {model_dir: %s}
  - key: C
    command: {python: %s, script: %s}
`, py, bScript, modelDir, py, cScript))

	s := newStack(t, map[string]string{
		"KINFLOW_PREDICTION_ENGINE": "command",
		"KINFLOW_METHODS_FILE":      methodsFile,
	}, nil)
	const rows = `Protein Sequence,Substrate
MKTAYIAK,CCO
MKTAY,O
MKT1AYIAK,CCO
MKTAYIAKQRQ,C1=CC=CC=C1
`
	id := s.submit(rows, []string{"kcat", "Km"}, map[string]string{"kcat": "C", "Km": "B"})
	st := s.waitDone(id, 90*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("job: %s %s", st.Status, st.Error)
	}
	body := s.resultCSV(id)
	recs, err := csv.NewReader(strings.NewReader(body)).ReadAll()
	if err != nil {
		t.Fatalf("result CSV: %v\n%s", err, body)
	}
	if len(recs) != 5 {
		t.Fatalf("result has %d data rows, want 4:\n%s", len(recs)-1, body)
	}
	col := func(name string) int {
		t.Helper()
		i := slices.Index(recs[0], name)
		if i < 0 {
			t.Fatalf("result has no %q column: %q", name, recs[0])
		}
		return i
	}
	type cells struct{ value, source, extra int }
	kcat := cells{col("kcat (1/s)"), col("Source kcat"), col("Extra Info kcat")}
	km := cells{col("KM (mM)"), col("Source Km"), col("Extra Info Km")}

	// C gives len(seq)+0.5 for KCAT, B gives 2*len(seq) for KM. Row 2's
	// Km is blanked by B's own reason, its kcat kept (one target's failure
	// blanks only its own target); row 3 is blanked in both
	// targets by the sequence check before any program runs.
	const water, badSeq = "water is not a substrate", input.ReasonInvalidProtein
	want := []struct {
		kcat, km             string // the values of a predicted row
		kcatReason, kmReason string // the Source cell of a blank cell
	}{
		{kcat: "8.5", km: "16"},
		{kcat: "5.5", kmReason: water},
		{kcatReason: badSeq, kmReason: badSeq},
		{kcat: "11.5", km: "22"},
	}
	for i, w := range want {
		r := recs[i+1]
		for _, c := range []struct {
			name, want, from, reason string
			cells
		}{{"kcat", w.kcat, builtOnSynthetic("C"), w.kcatReason, kcat}, {"Km", w.km, builtOnSynthetic("B"), w.kmReason, km}} {
			got, src, extra := r[c.value], r[c.source], r[c.extra]
			if c.reason != "" {
				if got != "" || src != c.reason {
					t.Errorf("row %d %s: value %q source %q, want blank with %q", i, c.name, got, src, c.reason)
				}
				continue
			}
			wantV, _ := strconv.ParseFloat(c.want, 64)
			if v, err := strconv.ParseFloat(got, 64); err != nil || v != wantV {
				t.Errorf("row %d %s: value %q, want %s", i, c.name, got, c.want)
			}
			if src != c.from || extra != syntheticExtra {
				t.Errorf("row %d %s: source %q extra info %q, want %q and %q", i, c.name, src, extra, c.from, syntheticExtra)
			}
		}
	}

	var raw map[string]any
	if code := s.do("GET", "/api/v1/status/"+id+"/", nil, "", &raw); code != 200 {
		t.Fatalf("status: %d", code)
	}
	if v := raw["synthetic"]; v != true {
		t.Errorf("status of a job built on synthetic embeddings: synthetic=%v", v)
	}
	var res map[string]any
	if code := s.do("GET", "/api/v1/result/"+id+"/?format=json", nil, "", &res); code != 200 {
		t.Fatalf("JSON result: %d %v", code, res)
	}
	if v := res["synthetic"]; v != true {
		t.Errorf("JSON result of a job built on synthetic embeddings: synthetic=%v", v)
	}
	if p, _ := res["provenance"].([]any); len(p) != 2 {
		t.Errorf("JSON result provenance: %v", res["provenance"])
	}

	// B saw the operator's model_dir and only the rows that passed
	// validation.
	var seen struct {
		ModelRoot *string `json:"model_root"`
		Media     string  `json:"media"`
		Job       struct {
			Target string              `json:"target"`
			Rows   []map[string]string `json:"rows"`
		} `json:"job"`
	}
	raw2, err := os.ReadFile(filepath.Join(dir, "b-seen.json"))
	if err != nil {
		t.Fatalf("method B's program never ran: %v", err)
	}
	if err := json.Unmarshal(raw2, &seen); err != nil {
		t.Fatal(err)
	}
	if seen.ModelRoot == nil || *seen.ModelRoot != modelDir {
		t.Errorf("METHODB_MODEL_ROOT = %v, want %s", seen.ModelRoot, modelDir)
	}
	// The program's media path is its stage's private view of the media
	// root, gone once the stage is done.
	view := filepath.Join(s.media, "jobs", id, "view", "stage-1")
	if seen.Media != view {
		t.Errorf("METHODB_MEDIA_PATH = %q, want the stage's view %s", seen.Media, view)
	}
	if _, err := os.Stat(view); !os.IsNotExist(err) {
		t.Errorf("the stage's view is left after the job: %v", err)
	}
	var seqs []string
	for _, r := range seen.Job.Rows {
		seqs = append(seqs, r["sequence"])
	}
	if seen.Job.Target != "Km" || strings.Join(seqs, " ") != "MKTAYIAK MKTAY MKTAYIAKQRQ" {
		t.Errorf("method B got target %q rows %q", seen.Job.Target, seqs)
	}

	// Each stage's engine log holds its program's command line and output,
	// and the engine files are gone.
	for i, w := range []struct{ script, line string }{
		{cScript + " ", "[stdout] Progress: 3/3"},
		{bScript + " --input ", "[stdout] Progress: 3/3"},
	} {
		stage := filepath.Join(s.media, "jobs", id, "work", "stage-"+strconv.Itoa(i))
		log, err := os.ReadFile(filepath.Join(stage, "engine.log"))
		if err != nil {
			t.Errorf("stage %d: %v", i, err)
			continue
		}
		if !strings.Contains(string(log), "$ "+py+" "+w.script) || !strings.Contains(string(log), w.line) {
			t.Errorf("stage %d engine.log lacks %q or %q:\n%s", i, w.script, w.line, log)
		}
		for _, pat := range []string{"*_input_*", "*_output_*", "input_*", "output_*"} {
			if left, _ := filepath.Glob(filepath.Join(stage, pat)); len(left) != 0 {
				t.Errorf("stage %d: engine files left behind: %v", i, left)
			}
		}
	}
}
