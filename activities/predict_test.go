package activities

import (
	"context"
	"encoding/csv"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	tlog "go.temporal.io/sdk/log"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// The engine programs below stand in for the methods' own scripts. Each
// copies its input file to $KEEP_DIR (the engine deletes it afterwards), so
// a test can check the exact file the contract hands over.

const jsonEngine = `import json, os, shutil, sys
args = sys.argv[1:]
inp, out = args[args.index("--input") + 1], args[args.index("--output") + 1]
shutil.copy(inp, os.path.join(os.environ["KEEP_DIR"], os.path.basename(inp)))
job = json.load(open(inp))
env = {k: os.environ.get(k) for k in ("METHODB_MEDIA_PATH", "METHODB_TOOLS_PATH", "METHODB_MODEL_ROOT", "KINFLOW_DATABASE_URL", "GPU_EMBED_SERVICE_TOKEN", "PATH")}
json.dump(env, open(os.path.join(os.environ["KEEP_DIR"], "env.json"), "w"))
mult = 2 if job["params"].get("kinetics_type") == "KM" else 1
preds, reasons = [], {}
for i, row in enumerate(job["rows"]):
    print("Progress: %d/%d" % (i + 1, len(job["rows"])), flush=True)
    preds.append(len(row["sequence"]) * mult)
    if row["substrates"] == "O":
        reasons[str(i)] = "water is not a substrate"
    if row["substrates"] == "OO":
        reasons[str(i)] = "RuntimeError: CUDA out of memory. Tried to allocate 2.00 GiB"
print("engine stderr line", file=sys.stderr)
json.dump({"predictions": preds, "invalid_indices": [], "invalid_reasons": reasons}, open(out, "w"))
`

const substrateEngine = `import csv, os, shutil, sys
inp, out, kt = sys.argv[1], sys.argv[2], sys.argv[3]
assert kt in ("KCAT", "KM"), kt
shutil.copy(inp, os.path.join(os.environ["KEEP_DIR"], os.path.basename(inp)))
rows = list(csv.DictReader(open(inp)))
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["Protein Sequence", "Predicted Value"])
    for r in rows:
        v = "nan" if r["Substrate SMILES"] == "CCN" else str(len(r["Protein Sequence"]) + (0.5 if kt == "KM" else 0))
        w.writerow([r["Protein Sequence"], v])
`

const reactionEngine = `import csv, os, shutil, sys
inp, out = sys.argv[1], sys.argv[2]
shutil.copy(inp, os.path.join(os.environ["KEEP_DIR"], os.path.basename(inp)))
rows = list(csv.DictReader(open(inp)))
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["kcat [s^(-1)]"])
    for r in rows:
        w.writerow([100 * len(r["Substrates"].split(";")) + len(r["Protein Sequence"])])
`

const methodAEngine = `import csv, json, os, shutil, sys
a = sys.argv[1:]
opt = lambda name: a[a.index(name) + 1]
assert opt("--mode") == "predict"
task, cfg, out, inp = opt("--task"), opt("--model_config"), opt("--save_results"), opt("--data_path")
shutil.copy(inp, os.path.join(os.environ["KEEP_DIR"], os.path.basename(inp)))
rows = json.load(open(inp))
with open(out, "w", newline="") as f:
    w = csv.writer(f)
    w.writerow(["smiles", "sequence", "y_pred"])
    # Reversed, and the last input row left out: rows are matched by
    # (sequence, smiles), not by position.
    for r in reversed(rows[:-1]):
        assert r["Sequence"] == r["sequence"]
        w.writerow([r["smiles"], r["sequence"], len(r["sequence"]) * (10 if task == "KM" else 1) + (0.25 if cfg == "A-H" else 0)])
`

const failingEngine = `import sys
print("CUDA out of patience", file=sys.stderr)
sys.exit(3)
`

// predictHarness is one Activities on a real store and media folder with
// the command engine and the programs above as B, C, D, F, A-H and A-L.
type predictHarness struct {
	t    *testing.T
	a    *Activities
	keep string
	env  *testsuite.TestActivityEnvironment
}

func python(t *testing.T) string {
	t.Helper()
	if err := exec.Command(input.DefaultPython, "-c", "import csv, json").Run(); err != nil {
		testenv.Unavailable(t, "the engine programs need %s", input.DefaultPython)
	}
	return input.DefaultPython
}

func newPredictHarness(t *testing.T, s *store.Store, chem *input.Chemistry, extraYAML string) *predictHarness {
	t.Helper()
	py := python(t)
	dir := t.TempDir()
	keep := filepath.Join(dir, "keep")
	if err := os.MkdirAll(keep, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(name, body string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	cmd := func(script string, paths string) string {
		return fmt.Sprintf("{python: %s, script: %s, extra_env: {KEEP_DIR: %s}%s}", py, script, keep, paths)
	}
	yaml := fmt.Sprintf(`methods:
  - key: B
    command: %s
  - key: C
    command: %s
  - key: F
    command: %s
  - key: D
    command: %s
  - key: A-H
    command: %s
  - key: A-L
    command: %s
%s`,
		cmd(write("b.py", jsonEngine), ", paths: {model_dir: /models/b}"),
		cmd(write("c.py", substrateEngine), ""), cmd(write("c.py", substrateEngine), ""),
		cmd(write("d.py", reactionEngine), ""),
		cmd(write("a.py", methodAEngine), ""), cmd(write("a.py", methodAEngine), ""),
		extraYAML)
	cat, err := methods.Parse([]byte(yaml))
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := config.Load(func(k string) (string, bool) {
		switch k {
		case "KINFLOW_MEDIA_ROOT":
			return filepath.Join(dir, "media"), true
		case "KINFLOW_PREDICTION_ENGINE":
			return "command", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	if chem == nil {
		chem = input.NewChemistry(nil, slog.New(slog.DiscardHandler))
	}
	a := &Activities{Config: cfg, Store: s, Catalogue: cat, Chem: chem, Log: slog.New(slog.DiscardHandler)}
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(tlog.NewStructuredLogger(slog.New(slog.DiscardHandler)))
	env := ts.NewTestActivityEnvironment()
	env.RegisterActivity(a)
	return &predictHarness{t: t, a: a, keep: keep, env: env}
}

// submit stores a job like the API does: the input CSV in its folder and
// the job row, then runs PrepareInput.
func (h *predictHarness) submit(id string, methodsByTarget map[string]string, canonicalize bool, csvText string) PreparedJob {
	h.t.Helper()
	ctx := context.Background()
	dir, err := h.a.jobDir(id)
	if err != nil {
		h.t.Fatal(err)
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "input.csv"), []byte(csvText), 0o644); err != nil {
		h.t.Fatal(err)
	}
	var targets []string
	for _, t := range methods.Targets() {
		if _, ok := methodsByTarget[string(t)]; ok {
			targets = append(targets, string(t))
		}
	}
	job := &store.Job{ID: id, KeyID: 1, IPAddress: "127.0.0.1", Status: store.JobPending, Targets: targets, Methods: methodsByTarget,
		HandleLongSequences: "truncate", CanonicalizeSubstrates: canonicalize, SubmittedAt: time.Now().UTC()}
	var stages []store.JobStage
	for i, t := range targets {
		stages = append(stages, store.JobStage{JobID: id, Index: i, Target: t, MethodKey: methodsByTarget[t], Status: store.JobPending})
	}
	if err := h.a.Store.CreateJob(ctx, job, stages); err != nil {
		h.t.Fatal(err)
	}
	v, err := h.env.ExecuteActivity(h.a.PrepareInput, JobRef{JobID: id})
	if err != nil {
		h.t.Fatal(err)
	}
	var pj PreparedJob
	if err := v.Get(&pj); err != nil {
		h.t.Fatal(err)
	}
	return pj
}

// predict runs Predict for one stage and returns the stored predictions.
func (h *predictHarness) predict(id string, stage int) (jobfiles.StagePredictions, error) {
	h.t.Helper()
	if _, err := h.env.ExecuteActivity(h.a.Predict, StageRef{JobID: id, StageIndex: stage}); err != nil {
		return jobfiles.StagePredictions{}, err
	}
	dir, _ := h.a.stageDir(id, stage)
	var p jobfiles.StagePredictions
	raw, err := os.ReadFile(filepath.Join(dir, "pred.json"))
	if err != nil {
		h.t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &p); err != nil {
		h.t.Fatal(err)
	}
	// The per-row view of the older tests: one unit per valid row here.
	sr, err := h.a.loadStageRows(id, stage)
	if err != nil {
		h.t.Fatal(err)
	}
	p.Values = make([]*float64, len(sr.Shapes))
	p.Reasons = make([]string, len(sr.Shapes))
	for r, sh := range sr.Shapes {
		p.Reasons[r] = sh.Skip
	}
	for i, u := range sr.Units {
		p.Values[u.Row], p.Reasons[u.Row] = p.Results[i].Value, p.Results[i].Error
	}
	return p, nil
}

// kept returns the input file the engine program copied aside.
func (h *predictHarness) kept(name string) string {
	h.t.Helper()
	b, err := os.ReadFile(filepath.Join(h.keep, name))
	if err != nil {
		h.t.Fatal(err)
	}
	return string(b)
}

func values(p jobfiles.StagePredictions) []string {
	out := make([]string, len(p.Values))
	for i, v := range p.Values {
		if v == nil {
			out[i] = "-: " + p.Reasons[i]
		} else {
			out[i] = fmt.Sprint(*v)
		}
	}
	return out
}

func wantValues(t *testing.T, got jobfiles.StagePredictions, want ...string) {
	t.Helper()
	if g := values(got); strings.Join(g, " | ") != strings.Join(want, " | ") {
		t.Errorf("predictions\n got  %q\n want %q", g, want)
	}
}

const fourRows = `Protein Sequence,Substrate
MKTAYIAK,CCO
MKTAY,O
MKTAYIAKQRQ,CCN
MKTAYI,C1=CC=CC=C1
`

func TestPredictGenericJSONContract(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		// The worker's secrets never reach a method's program.
		t.Setenv("KINFLOW_DATABASE_URL", "postgres://kinflow:secret@db/kinflow")
		t.Setenv("GPU_EMBED_SERVICE_TOKEN", "secret")
		h := newPredictHarness(t, s, nil, "")
		h.submit("jobjson01", map[string]string{"kcat": "B", "Km": "B"}, true, fourRows+"MKTAYIAK,not a smiles ((\n")
		p, err := h.predict("jobjson01", 1) // Km: kinetics_type KM doubles
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, p, "16", "-: water is not a substrate", "22", "12", "-: "+p.Reasons[4])
		if p.Reasons[4] == "" || p.Synthetic || p.Source != "Prediction from Method B" {
			t.Errorf("row 5 reason %q, synthetic %v, source %q", p.Reasons[4], p.Synthetic, p.Source)
		}
		var in methods.EngineInput
		if err := json.Unmarshal([]byte(h.kept("B_input_jobjson01.json")), &in); err != nil {
			t.Fatal(err)
		}
		if in.Method != "B" || in.Target != "Km" || in.PublicID != "jobjson01" || len(in.Rows) != 4 ||
			in.Params["kinetics_type"] != "KM" || in.Params["canonicalize_substrates"] != true || in.Rows[0]["substrates"] != "CCO" {
			t.Errorf("engine input %+v", in)
		}
		// Paths fill the env; an unconfigured path leaves its variable unset;
		// the media path is the stage's own view of the media root.
		view, _ := h.a.stageViewDir("jobjson01", 1)
		var env map[string]*string
		_ = json.Unmarshal([]byte(h.kept("env.json")), &env)
		if env["METHODB_MODEL_ROOT"] == nil || *env["METHODB_MODEL_ROOT"] != "/models/b" || env["METHODB_TOOLS_PATH"] != nil ||
			env["METHODB_MEDIA_PATH"] == nil || *env["METHODB_MEDIA_PATH"] != view ||
			env["KINFLOW_DATABASE_URL"] != nil || env["GPU_EMBED_SERVICE_TOKEN"] != nil || env["PATH"] == nil {
			t.Errorf("engine env %v", env)
		}
		dir, _ := h.a.stageDir("jobjson01", 1)
		log, _ := os.ReadFile(filepath.Join(dir, "engine.log"))
		for _, want := range []string{"METHODB_TOOLS_PATH not set: {tools}", "[stdout] Progress: 4/4", "[stderr] engine stderr line"} {
			if !strings.Contains(string(log), want) {
				t.Errorf("engine.log lacks %q:\n%s", want, log)
			}
		}
		if left, _ := filepath.Glob(filepath.Join(dir, "B_*")); len(left) != 0 {
			t.Errorf("engine files left behind: %v", left)
		}
		stages, _ := s.JobStages(context.Background(), "jobjson01")
		if stages[1].PredictionsMade != 3 {
			t.Errorf("stage predictions_made %d, want 3", stages[1].PredictionsMade)
		}
	})
}

func TestPredictSubstrateCSVContract(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		h := newPredictHarness(t, s, nil, "")
		h.submit("jobcsv01", map[string]string{"kcat": "C", "Km": "F"}, false, fourRows)
		p, err := h.predict("jobcsv01", 0)
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, p, "8", "5", "-: "+methods.ReasonNoPrediction, "6")
		want := "Substrate SMILES,Protein Sequence\nCCO,MKTAYIAK\nO,MKTAY\nCCN,MKTAYIAKQRQ\nC1=CC=CC=C1,MKTAYI\n"
		if got := h.kept("input_jobcsv01.csv"); got != want {
			t.Errorf("C input\n%s\nwant\n%s", got, want)
		}
		p, err = h.predict("jobcsv01", 1) // F, Km
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, p, "8.5", "5.5", "-: "+methods.ReasonNoPrediction, "6.5")
		dir, _ := h.a.stageDir("jobcsv01", 1)
		log, _ := os.ReadFile(filepath.Join(dir, "engine.log"))
		if !strings.Contains(string(log), "substrates passed as given") || !strings.Contains(string(log), " KM\n") {
			t.Errorf("engine.log:\n%s", log)
		}
	})
}

func TestPredictReactionCSVContract(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		h := newPredictHarness(t, s, nil, "")
		h.submit("jobrxn01", map[string]string{"kcat": "D"}, false, `Protein Sequence,Substrates,Products
MKTAYIAK,CCO; ;O,CC=O
MKTAY,CCO;O;[H+],CC=O;O
`)
		p, err := h.predict("jobrxn01", 0)
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, p, "208", "305")
		want := "Substrates,Products,Protein Sequence\nCCO;O,CC=O,MKTAYIAK\nCCO;O;[H+],CC=O;O,MKTAY\n"
		if got := h.kept("input_jobrxn01.csv"); got != want {
			t.Errorf("D input\n%s\nwant\n%s", got, want)
		}
	})
}

func TestPredictMethodAContract(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		h := newPredictHarness(t, s, nil, "")
		h.submit("jobma01", map[string]string{"kcat": "A-L", "Km": "A-H"}, false, fourRows)
		p, err := h.predict("jobma01", 0)
		if err != nil {
			t.Fatal(err)
		}
		// Matched by (sequence, smiles); the row the program left out has
		// no value.
		wantValues(t, p, "8", "5", "11", "-: "+methods.ReasonNoPrediction)
		var rows []map[string]string
		if err := json.Unmarshal([]byte(h.kept("input_jobma01.csv")), &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != 4 || rows[1]["smiles"] != "O" || rows[1]["sequence"] != "MKTAY" || rows[1]["Sequence"] != "MKTAY" {
			t.Errorf("method A input %v", rows)
		}
		p, err = h.predict("jobma01", 1)
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, p, "80.25", "50.25", "110.25", "-: "+methods.ReasonNoPrediction)
		dir, _ := h.a.stageDir("jobma01", 1)
		log, _ := os.ReadFile(filepath.Join(dir, "engine.log"))
		if !strings.Contains(string(log), "--task KM --model_config A-H --save_results") {
			t.Errorf("engine.log:\n%s", log)
		}
	})
}

func TestPredictCanonicalisesWithRDKit(t *testing.T) {
	if err := exec.Command(input.DefaultPython, "-c", "import rdkit").Run(); err != nil {
		testenv.Unavailable(t, "RDKit (Debian python3-rdkit) is not installed for %s", input.DefaultPython)
	}
	rd := input.NewRDKit(input.RDKitOptions{})
	t.Cleanup(func() { _ = rd.Close() })
	chem := input.NewChemistry(rd, nil)
	s := testenv.OpenStore(t, store.SQLite)
	h := newPredictHarness(t, s, chem, "")
	h.submit("jobcanon1", map[string]string{"kcat": "C"}, true, "Protein Sequence,Substrate\nMKTAYIAK,OCC\nMKTAY,C1=CC=CC=C1\n")
	if _, err := h.predict("jobcanon1", 0); err != nil {
		t.Fatal(err)
	}
	want := "Substrate SMILES,Protein Sequence\nCCO,MKTAYIAK\nc1ccccc1,MKTAY\n"
	if got := h.kept("input_jobcanon1.csv"); got != want {
		t.Errorf("canonical input\n%s\nwant\n%s", got, want)
	}

	// Method D: each `;` token becomes standard InChI, re-joined with `;`.
	if ch := chem.Checks(context.Background()); !ch.InChI {
		testenv.Unavailable(t, "InChI support (RDKit's own or Debian's python3-openbabel): %+v", ch)
	}
	h.submit("jobcanon2", map[string]string{"kcat": "D"}, true, "Protein Sequence,Substrates,Products\nMKTAYIAK,OCC; O,CC=O\n")
	if _, err := h.predict("jobcanon2", 0); err != nil {
		t.Fatal(err)
	}
	recs, err := csv.NewReader(strings.NewReader(h.kept("input_jobcanon2.csv"))).ReadAll()
	wantRecs := [][]string{{"Substrates", "Products", "Protein Sequence"},
		{"InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3;InChI=1S/H2O/h1H2", "InChI=1S/C2H4O/c1-2-3/h2H,1H3", "MKTAYIAK"}}
	if err != nil || !reflect.DeepEqual(recs, wantRecs) {
		t.Errorf("method D input %q (%v), want %q", recs, err, wantRecs)
	}
}

func TestPredictCommandFailures(t *testing.T) {
	dir := t.TempDir()
	failing := filepath.Join(dir, "fail.py")
	short := filepath.Join(dir, "short.py")
	_ = os.WriteFile(failing, []byte(failingEngine), 0o644)
	_ = os.WriteFile(short, []byte("import sys, json\njson.dump([1.0], open(sys.argv[sys.argv.index('--output') + 1], 'w'))\n"), 0o644)
	s := testenv.OpenStore(t, store.SQLite)
	h := newPredictHarness(t, s, nil, fmt.Sprintf(`  - key: G
    command: {python: %[1]s, script: %[2]s}
  - key: H
    command: {python: %[1]s, script: %[3]s}
`, input.DefaultPython, failing, short))
	h.submit("jobfail01", map[string]string{"kcat": "G", "Km": "H"}, true, fourRows)
	h.submit("jobfail02", map[string]string{"Km": "J"}, true, fourRows)
	for _, c := range []struct {
		id    string
		stage int
		want  string
	}{
		{"jobfail01", 0, "kcat: Method G prediction failed with an internal error (see the job's engine log)."},
		{"jobfail01", 1, "Km: Method H produced 1 prediction(s) for 4 input(s)."},
		{"jobfail02", 0, "Km: Method J has no command configured"},
	} {
		_, err := h.predict(c.id, c.stage)
		var app *temporal.ApplicationError
		if err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s stage %d: error %v, want %q", c.id, c.stage, err, c.want)
		} else if !errors.As(err, &app) || !app.NonRetryable() {
			t.Errorf("%s stage %d: %v is retryable", c.id, c.stage, err)
		}
	}
	gdir, _ := h.a.stageDir("jobfail01", 0)
	log, _ := os.ReadFile(filepath.Join(gdir, "engine.log"))
	if !strings.Contains(string(log), "[stderr] CUDA out of patience") {
		t.Errorf("engine.log lacks the program's stderr:\n%s", log)
	}
}
