package e2e

import (
	"encoding/csv"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/testenv"
)

// engineK stands in for method K's program (range classes, the generic
// JSON contract): it reads its paths from METHODK_*, looks for each row's
// embedding in the shared cache under the row's seq_id, and answers a class
// midpoint per row, computed as the reference's program computes them. A
// row whose substrate is CCCC gets 3.0, which is no midpoint. It records
// the rows it was given beside itself.
const engineK = `import json, math, os, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
for name in ("METHODK_REPO_ROOT", "METHODK_MODELS_DIR", "METHODK_MEDIA_DIR"):
    if not os.environ.get(name):
        sys.exit(name + " is not set")
media = os.environ["METHODK_MEDIA_DIR"]
edges = {"KCAT": (0.0, 1e-8, 1e-2, 1e-1, 1.0, 10.0, 100.0, 1000.0, 1e8),
         "KM": (1e-14, 1e-5, 1e-4, 1e-3, 1e-2, 1e-1, 1e4)}[job["params"]["kinetics_type"]]
mids = [math.sqrt(lo * hi) if lo > 0 else (lo + hi) / 2.0 for lo, hi in zip(edges, edges[1:])]
preds, reasons = [], {}
for i, row in enumerate(job["rows"]):
    sid = row.get("seq_id")
    if not sid or not os.path.exists(os.path.join(media, "sequence_info", "methodk_esmc", sid + ".npy")):
        preds.append(None)
        reasons[str(i)] = "no ESM C embedding for seq_id %r" % sid
    elif row["substrates"] == "CCCC":
        preds.append(3.0)
    else:
        preds.append(mids[len(row["sequence"]) % len(mids)])
here = os.path.dirname(os.path.abspath(__file__))
json.dump(job["rows"], open(os.path.join(here, "k-rows-" + job["params"]["kinetics_type"] + ".json"), "w"))
json.dump({"predictions": preds, "invalid_indices": [], "invalid_reasons": reasons}, open(out, "w"))
`

// rangeHeader is the result header of a job of method K on kcat and Km
// over an input of columns cols: each target's range, Source, Extra Info,
// midpoint and experimental columns, in the reference's order, then the
// input's (the similarity columns follow).
func rangeHeader(cols ...string) []string {
	return append([]string{
		"Predicted kcat range: kcat (1/s)", "Source kcat", "Extra Info kcat", "Derived kcat range midpoint (1/s)", "Experimental kcat (1/s)",
		"Predicted KM range: kM (M)", "Source Km", "Extra Info Km", "Derived KM range midpoint (M)", "Experimental KM (source units)",
	}, cols...)
}

// TestRangeClassesOnTheCommandEngine runs method K through its own
// program's contract: the rows carry `substrates` and the seq_id under
// which the GPU host wrote each sequence's embedding, the program's
// midpoints come back as range texts with the midpoint beside them, and an
// answer that is no class midpoint fails its row instead of being served;
// the prediction cache serves the same job again without the program.
func TestRangeClassesOnTheCommandEngine(t *testing.T) {
	py := input.DefaultPython
	if err := exec.Command(py, "-c", "import json, math").Run(); err != nil {
		testenv.Unavailable(t, "the engine program needs %s", py)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "k.py")
	if err := os.WriteFile(script, []byte(engineK), 0o644); err != nil {
		t.Fatal(err)
	}
	methodsFile := filepath.Join(dir, "methods.yaml")
	if err := os.WriteFile(methodsFile, []byte(fmt.Sprintf("methods:\n  - key: K\n    command: {python: %s, script: %s, paths: {model_dir: %s}}\n",
		py, script, filepath.Join(dir, "models"))), 0o644); err != nil {
		t.Fatal(err)
	}
	s := newStack(t, map[string]string{"KINFLOW_PREDICTION_ENGINE": "command", "KINFLOW_METHODS_FILE": methodsFile}, nil)
	seqs := []string{"MKTAYIAKQR", "MKTAYIAKQRQISF", "MKTAYIAKQRQISFVKS", "MKTAYIAKQRQ"}
	in := "Protein Sequence,Substrate\n" + seqs[0] + ",CCO\n" + seqs[1] + ",CCN\n" + seqs[2] + ",CCCC\n" + seqs[3] + ",CCO\n"
	id := s.submit(in, []string{"kcat", "Km"}, map[string]string{"kcat": "K", "Km": "K"})
	if st := s.waitDone(id, 2*time.Minute); st.Status != "Completed" {
		t.Fatalf("job: %s %s", st.Status, st.Error)
	}
	recs, err := csv.NewReader(strings.NewReader(s.resultCSV(id))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := rangeHeader("Protein Sequence", "Substrate"); len(recs[0]) < len(want) || !slices.Equal(recs[0][:len(want)], want) {
		t.Fatalf("header\n got %q\nwant %q", recs[0], want)
	}
	k, _ := methods.Default().Get("K")
	for ti, target := range []methods.Target{methods.Kcat, methods.Km} {
		o := k.OutputOf(target)
		base := 5 * ti
		for r, seq := range seqs {
			row := recs[r+1][base : base+5]
			if r == 2 {
				if row[0] != "" || row[3] != "" || !strings.Contains(row[1], "not a known class midpoint") {
					t.Errorf("%s row %d (a non-midpoint answer): %q", target, r, row)
				}
				continue
			}
			class := len(seq) % o.Classes()
			mid, err := strconv.ParseFloat(row[3], 64)
			if row[0] != o.Label(class) || err != nil || mid != o.Midpoint(class) || row[4] != "" {
				t.Errorf("%s row %d: %q, want class %q midpoint %v", target, r, row, o.Label(class), o.Midpoint(class))
			}
			if !strings.Contains(row[1], "synthetic embeddings") {
				t.Errorf("%s row %d: Source %q does not say the embeddings were synthetic", target, r, row[1])
			}
		}
	}

	// Every row the program saw carried its substrate under `substrates`
	// and the seq_id of its embedding file, which the GPU host wrote.
	for _, kt := range []string{"KCAT", "KM"} {
		raw, err := os.ReadFile(filepath.Join(dir, "k-rows-"+kt+".json"))
		if err != nil {
			t.Fatalf("the program never ran for %s: %v", kt, err)
		}
		var rows []map[string]string
		if err := json.Unmarshal(raw, &rows); err != nil {
			t.Fatal(err)
		}
		if len(rows) != len(seqs) {
			t.Fatalf("%s: %d rows reached the program", kt, len(rows))
		}
		for i, r := range rows {
			if r["sequence"] != seqs[i] || r["substrates"] == "" || r["seq_id"] == "" {
				t.Errorf("%s row %d: %v", kt, i, r)
			}
			if _, err := os.Stat(filepath.Join(s.media, "sequence_info", "methodk_esmc", r["seq_id"]+".npy")); err != nil {
				t.Errorf("%s row %d: no embedding under its seq_id: %v", kt, i, err)
			}
		}
		if err := os.Remove(filepath.Join(dir, "k-rows-"+kt+".json")); err != nil {
			t.Fatal(err)
		}
	}

	// The same job again: the prediction cache keeps the classes (and the
	// row that had none): the program is not run, the result is the same.
	again := s.submit(in, []string{"kcat", "Km"}, map[string]string{"kcat": "K", "Km": "K"})
	if st := s.waitDone(again, 2*time.Minute); st.Status != "Completed" {
		t.Fatalf("repeated job: %s %s", st.Status, st.Error)
	}
	var cs cacheStatus
	s.do("GET", "/api/v1/status/"+again+"/", nil, "", &cs)
	if cs.Progress.PredictionsCached != 2*len(seqs) {
		t.Errorf("repeated job: %d predictions cached, want %d", cs.Progress.PredictionsCached, 2*len(seqs))
	}
	if _, err := os.Stat(filepath.Join(dir, "k-rows-KCAT.json")); err == nil {
		t.Error("the program ran again for a job the cache holds")
	}
	if first, second := s.resultCSV(id), s.resultCSV(again); first != second {
		t.Errorf("the cached result differs:\n%s\n%s", first, second)
	}
}

// TestRangeClassesOnTheSyntheticEngine: a job of method K on the embedded
// default engine gives a class per row (its midpoint beside it, marked
// synthetic), one class per substrate of a Km list, in order; an
// experimental value replaces a prediction in its own column and leaves
// the range blank; the JSON result and /methods/ describe the classes.
func TestRangeClassesOnTheSyntheticEngine(t *testing.T) {
	s := newStack(t, nil, nil)
	measured := strings.Repeat("MKTAYIAKQRQISFVKSHFSRQLEERLGLIEVQ", 3)
	const inchi = "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"
	p := filepath.Join(s.media, "experimental", "kcat_experimental.csv")
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte("substrate_inchi,protein_sequence,protein_ID,kcat_value,kcat_SD,from_brenda,from_sabio,from_uniprot\n\""+
		inchi+"\","+measured+",P00330,42.0,1.5,1,0,0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	in := "Protein Sequence,Substrate\n" + measured + ",\"" + inchi + "\"\nMKTAYIAKQRQISFVKS,CCC\n"
	subID := s.submitExperimental(t, in)
	listID := s.submit("Protein Sequence,Substrates\nMKTAYIAKQRQISF,CCO;CCN\n", []string{"kcat", "Km"}, map[string]string{"kcat": "K", "Km": "K"})
	for _, id := range []string{subID, listID} {
		if st := s.waitDone(id, 2*time.Minute); st.Status != "Completed" {
			t.Fatalf("job: %s %s", st.Status, st.Error)
		}
	}
	recs, err := csv.NewReader(strings.NewReader(s.resultCSV(subID))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if want := rangeHeader("Protein Sequence", "Substrate"); len(recs[0]) < len(want) || !slices.Equal(recs[0][:len(want)], want) {
		t.Fatalf("header\n got %q\nwant %q", recs[0], want)
	}
	k, _ := methods.Default().Get("K")
	kcat, km := k.OutputOf(methods.Kcat), k.OutputOf(methods.Km)
	isClass := func(o methods.Output, text, mid string) bool {
		v, err := strconv.ParseFloat(mid, 64)
		i, ok := o.ClassOf(v)
		return err == nil && ok && o.Label(i) == text
	}
	// Row 0: the measured kcat is in its own column, no range, no midpoint.
	if r := recs[1]; r[0] != "" || r[3] != "" || r[4] != "42.0" || !strings.Contains(r[1], "BRENDA") {
		t.Errorf("experimental row: %q", r[:5])
	}
	if r := recs[2]; !isClass(kcat, r[0], r[3]) || !isClass(km, r[5], r[8]) || !strings.Contains(r[1], "Synthetic") {
		t.Errorf("predicted row: %q", r)
	}

	// A Km list: one class per substrate, in order; kcat keeps one class.
	list, err := csv.NewReader(strings.NewReader(s.resultCSV(listID))).ReadAll()
	if err != nil {
		t.Fatal(err)
	}
	if r := list[1]; !isClass(kcat, r[0], r[3]) {
		t.Errorf("kcat of a two-substrate row: %q", r[:5])
	}
	var texts []*string
	var mids []*float64
	if err := json.Unmarshal([]byte(list[1][5]), &texts); err != nil || len(texts) != 2 {
		t.Fatalf("Km range cell of a two-substrate row %q: %v", list[1][5], err)
	}
	if err := json.Unmarshal([]byte(list[1][8]), &mids); err != nil || len(mids) != 2 {
		t.Fatalf("Km midpoint cell of a two-substrate row %q: %v", list[1][8], err)
	}
	for i := range texts {
		if texts[i] == nil || mids[i] == nil || !isClass(km, *texts[i], strconv.FormatFloat(*mids[i], 'g', -1, 64)) {
			t.Errorf("Km substrate %d: %v %v", i, texts[i], mids[i])
		}
	}

	var res struct {
		Columns      []string                   `json:"columns"`
		Data         []map[string]any           `json:"data"`
		ColumnNotes  map[string]string          `json:"columnNotes"`
		RangeClasses map[string]json.RawMessage `json:"rangeClasses"`
		Synthetic    bool                       `json:"synthetic"`
	}
	if code := s.do("GET", "/api/v1/result/"+subID+"/?format=json", nil, "", &res); code != 200 {
		t.Fatalf("JSON result: %d", code)
	}
	var rc struct {
		Classes        []string  `json:"classes"`
		Midpoints      []float64 `json:"midpoints"`
		MidpointColumn string    `json:"midpointColumn"`
	}
	if err := json.Unmarshal(res.RangeClasses["Predicted kcat range: kcat (1/s)"], &rc); err != nil ||
		!slices.Equal(rc.Classes, kcat.Labels()) || !slices.Equal(rc.Midpoints, kcat.Midpoints()) || rc.MidpointColumn != "Derived kcat range midpoint (1/s)" {
		t.Errorf("rangeClasses %s", res.RangeClasses)
	}
	if _, ok := res.RangeClasses["Predicted KM range: kM (M)"]; !ok || len(res.RangeClasses) != 2 {
		t.Errorf("rangeClasses keys %v", res.RangeClasses)
	}
	if !strings.Contains(res.ColumnNotes["Predicted kcat range: kcat (1/s)"], "not a confidence interval") {
		t.Errorf("column notes %v", res.ColumnNotes)
	}
	if v, ok := res.Data[1]["Predicted kcat range: kcat (1/s)"].(string); !ok || !slices.Contains(kcat.Labels(), v) {
		t.Errorf("JSON range cell %v", res.Data[1])
	}
	if v, ok := res.Data[1]["Derived kcat range midpoint (1/s)"].(float64); !ok || math.IsNaN(v) {
		t.Errorf("JSON midpoint cell %v", res.Data[1])
	}
	if res.Data[0]["Predicted kcat range: kcat (1/s)"] != nil || !res.Synthetic {
		t.Errorf("JSON experimental row %v (synthetic %v)", res.Data[0], res.Synthetic)
	}

	// The CLI says which targets hold range classes, and lists the classes.
	s.cli(map[string]string{"KINFLOW_API_KEY": s.key}, "result", listID).want(t, "result of a range job", 0,
		"out:Predicted kcat range: kcat (1/s)", `err:note: kcat is given as a range class (e.g. "1 to 10 s^-1"), not a value`,
		`err:note: KM is given as a range class`)
	s.cli(nil, "methods").want(t, "methods", 0, "out:answers a range class, not a value (8 classes: 0 to 1e-08 s^-1 | 1e-08 to 0.01 s^-1 |",
		"out:(6 classes: 1e-14 to 1e-05 M |")

	var body struct {
		Methods map[string][]map[string]any `json:"methods"`
	}
	if code := s.do("GET", "/api/v1/methods/", nil, "", &body); code != 200 {
		t.Fatalf("methods: %d", code)
	}
	i := slices.IndexFunc(body.Methods["kcat"], func(m map[string]any) bool { return m["id"] == "K" })
	if i < 0 {
		t.Fatal("/methods/ lists no K for kcat")
	}
	m := body.Methods["kcat"][i]
	if rcs, _ := m["rangeClasses"].(map[string]any); rcs["kcat"] == nil || rcs["Km"] == nil || !strings.Contains(m["moreInfo"].(string), "not a confidence") {
		t.Errorf("/methods/ K: %v", m)
	}
}
