package e2e

import (
	"bufio"
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

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/testenv"
)

// referenceStandins are the reference methods testdata/reference/standin.py
// plays, each under its reference key.
var referenceStandins = []string{"CataPro", "UniKP", "TurNup", "EITLEM", "OmniESI", "OmniESI-O2DENet", "RealKcat", "IECata", "MMISA-KM", "DLKcat", "CatRange"}

// standinRun is one line of the stand-in's log.
type standinRun struct {
	Method  string         `json:"method"`
	Target  string         `json:"target"`
	Rows    int            `json:"rows"`
	Read    int            `json:"read"`
	Deleted int            `json:"deleted"`
	RowKeys []string       `json:"row_keys"`
	Params  map[string]any `json:"params"`
}

// TestReferenceProfileEndToEnd runs the reference deployment's methods as
// its operator would: one methods file with `base: reference` that gives
// each method only its interpreter, program and folders, the reference's
// cache folder names, and programs that behave as the reference's do (the
// environment names they read, the row keys, ids from seqmap.sqlite3 or
// the row's seq_id, the embedding under its reference folder, the files
// they delete, their answer's form). Every job completes with every value
// the program's, converted into its column's unit (RealKcat's class index
// to its class value, its Km from M to mM; IECata's log10 per (s*M) to a
// linear value per (s*mM)); the programs that delete what they read leave
// the shared cache as it was; on both databases.
func TestReferenceProfileEndToEnd(t *testing.T) {
	py := input.DefaultPython
	if err := exec.Command(py, "-c", "import numpy, sqlite3").Run(); err != nil {
		testenv.Unavailable(t, "the stand-in programs need %s with numpy", py)
	}
	script, err := filepath.Abs(filepath.Join("testdata", "reference", "standin.py"))
	if err != nil {
		t.Fatal(err)
	}
	eachDatabase(t, func(t *testing.T, env map[string]string) {
		dir := t.TempDir()
		for _, d := range []string{"tools", "models", "data"} {
			if err := os.MkdirAll(filepath.Join(dir, d), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		logPath := filepath.Join(dir, "runs.jsonl")
		var b strings.Builder
		b.WriteString("base: reference\nmethods:\n")
		for _, m := range referenceStandins {
			fmt.Fprintf(&b, "  - key: %s\n    command:\n      python: %s\n      script: %s\n      extra_args: [--as, %s]\n"+
				"      paths: {tools: %s, model_dir: %s, data_dir: %s}\n      extra_env: {STANDIN_LOG: %s}\n",
				m, py, script, m, filepath.Join(dir, "tools"), filepath.Join(dir, "models"), filepath.Join(dir, "data"), logPath)
		}
		methodsFile := filepath.Join(dir, "methods.yaml")
		if err := os.WriteFile(methodsFile, []byte(b.String()), 0o644); err != nil {
			t.Fatal(err)
		}
		env["KINFLOW_PREDICTION_ENGINE"] = "command"
		env["KINFLOW_METHODS_FILE"] = methodsFile
		env["KINFLOW_CACHE_FOLDERS"] = "reference"
		s := newStack(t, env, nil)
		cat, err := methods.Load(methodsFile)
		if err != nil {
			t.Fatal(err)
		}

		seqs := []string{"MKTAYIAKQRQISFVKSHFSRQ", "MSTNPKPQRKTKRNTNRRPQDVKFPGG", "MGSSHHHHHHSSGLVPRGSHM"}
		single := func(substrate string) string {
			var in strings.Builder
			in.WriteString("Protein Sequence,Substrate\n")
			for _, q := range seqs {
				in.WriteString(q + "," + substrate + "\n")
			}
			return in.String()
		}
		// want is what a method's column holds for a sequence: the stand-in's
		// answer in the method's declared form, converted.
		want := func(key string, tg methods.Target, seq string) float64 {
			n := float64(len(seq))
			d, ok := cat.Get(key)
			if !ok {
				t.Fatalf("no %s in the reference profile", key)
			}
			var answer float64
			switch key {
			case "RealKcat":
				answer = float64(len(seq) % 3)
			case "IECata":
				answer = 1 + n/10
			default:
				answer = n * map[string]float64{"CataPro": 1.5, "UniKP": 2.5, "TurNup": 3.5, "EITLEM": 4.5, "MMISA-KM": 0.25, "DLKcat": 5.5,
					"OmniESI": 6.5, "OmniESI-O2DENet": 7.5}[key]
			}
			v, msg := d.OutputOf(tg).Convert(answer)
			if msg != "" {
				t.Fatalf("%s %s: %v is not in its declared form: %s", key, tg, answer, msg)
			}
			return v
		}
		check := func(job string, in string, picks map[methods.Target]string) {
			t.Helper()
			recs, err := csv.NewReader(strings.NewReader(s.resultCSV(job))).ReadAll()
			if err != nil || len(recs) != len(seqs)+1 {
				t.Fatalf("result of %s: %v %v", job, err, recs)
			}
			for tg, key := range picks {
				d, _ := cat.Get(key)
				if o := d.OutputOf(tg); o.IsRange() {
					// The range text in the target's column, the midpoint
					// beside it, in the program's own units.
					col := slices.Index(recs[0], d.OutputCols[tg])
					if col < 0 || col+3 >= len(recs[0]) {
						t.Fatalf("%s: no column %q in %q", job, d.OutputCols[tg], recs[0])
					}
					for r, seq := range seqs {
						class := len(seq) % o.Classes()
						mid, err := strconv.ParseFloat(recs[r+1][col+3], 64)
						if recs[r+1][col] != o.Label(class) || err != nil || mid != o.Midpoint(class) {
							t.Errorf("%s %s row %d: %q, want class %q midpoint %v", key, tg, r, recs[r+1], o.Label(class), o.Midpoint(class))
						}
					}
					continue
				}
				col := slices.Index(recs[0], d.OutputCols[tg])
				if col < 0 {
					t.Fatalf("%s: no column %q in %q", job, d.OutputCols[tg], recs[0])
				}
				for r, seq := range seqs {
					got, err := strconv.ParseFloat(recs[r+1][col], 64)
					w := want(key, tg, seq)
					if err != nil || math.Abs(got-w) > 1e-9*math.Max(1, math.Abs(w)) {
						t.Errorf("%s %s row %d: %q, want %v (row %q)", key, tg, r, recs[r+1][col], w, recs[r+1])
					}
				}
			}
		}
		run := func(in string, picks map[methods.Target]string) string {
			t.Helper()
			var targets []string
			sel := map[string]string{}
			for tg, key := range picks {
				targets = append(targets, string(tg))
				sel[string(tg)] = key
			}
			slices.Sort(targets)
			job := s.submit(in, targets, sel)
			if st := s.waitDone(job, 3*time.Minute); st.Status != "Completed" {
				t.Fatalf("job %v: %s %s", picks, st.Status, st.Error)
			}
			check(job, in, picks)
			// The JSON result says how to cite each method that made its
			// numbers, as the reference's descriptor states it.
			var res struct {
				Provenance []struct {
					Method   string `json:"method"`
					Citation string `json:"citation"`
				} `json:"provenance"`
			}
			if code := s.do("GET", "/api/v1/result/"+job+"/?format=json", nil, "", &res); code != 200 {
				t.Fatalf("JSON result of %s: %d", job, code)
			}
			for _, p := range res.Provenance {
				d, _ := cat.Get(p.Method)
				if d == nil || p.Citation == "" || p.Citation != d.Citation() || !strings.Contains(p.Citation, d.CitationURL) {
					t.Errorf("%s: citation %q", p.Method, p.Citation)
				}
			}
			if len(res.Provenance) != len(picks) {
				t.Errorf("provenance of %d stages for %d targets", len(res.Provenance), len(picks))
			}
			return job
		}

		run(single("CCO"), map[methods.Target]string{methods.Kcat: "CataPro", methods.Km: "UniKP", methods.KcatKm: "IECata"})
		// The programs that delete what they read (IECata here) deleted only
		// their view's links: the persistent families are as they were.
		before := s.persistentCacheFiles()
		if len(before) < len(seqs) {
			t.Fatalf("the shared cache holds %d persistent files after the first job: %v", len(before), before)
		}
		run(single("CCO"), map[methods.Target]string{methods.Kcat: "RealKcat", methods.Km: "OmniESI"})
		run(single("CCN"), map[methods.Target]string{methods.Kcat: "DLKcat", methods.Km: "MMISA-KM", methods.KcatKm: "IECata"})
		run(single("CCO"), map[methods.Target]string{methods.Kcat: "EITLEM", methods.Km: "RealKcat"})
		run(single("CCO"), map[methods.Target]string{methods.Kcat: "OmniESI-O2DENet", methods.Km: "CatRange"})
		run(single("CCN"), map[methods.Target]string{methods.Kcat: "CatRange"})
		var reaction strings.Builder
		reaction.WriteString("Protein Sequence,Substrates,Products\n")
		for _, q := range seqs {
			reaction.WriteString(q + ",CCO;O=O,CC=O;OO\n")
		}
		run(reaction.String(), map[methods.Target]string{methods.Kcat: "TurNup"})
		after := s.persistentCacheFiles()
		for p, st := range before {
			if after[p] != st {
				t.Errorf("shared file %s changed: %q, then %q", p, st, after[p])
			}
		}

		// What the programs saw: JSON rows with `substrates` (and seq_id
		// where the reference's engine attaches it), every embedding found,
		// OmniESI and EITLEM told not to delete, IECata deleting its links.
		runs := readStandinLog(t, logPath)
		seen := map[string]bool{}
		for _, r := range runs {
			seen[r.Method] = true
			if r.Rows != len(seqs) {
				t.Errorf("%s %s: %d rows reached the program", r.Method, r.Target, r.Rows)
			}
			if e := map[string]bool{"MMISA-KM": true, "DLKcat": true}[r.Method]; !e && r.Read != r.Rows {
				t.Errorf("%s %s: read %d embeddings for %d rows", r.Method, r.Target, r.Read, r.Rows)
			}
			switch r.Method {
			case "IECata":
				if r.Deleted != r.Read {
					t.Errorf("IECata deleted %d of the %d files it read", r.Deleted, r.Read)
				}
			case "OmniESI", "OmniESI-O2DENet", "EITLEM":
				if r.Deleted != 0 {
					t.Errorf("%s deleted %d files: its deletion switch was not turned off", r.Method, r.Deleted)
				}
			}
			if strings.HasPrefix(r.Method, "OmniESI") && r.Params["cleanup_embeddings_after_run"] != false {
				t.Errorf("OmniESI's params %v", r.Params)
			}
		}
		for _, m := range referenceStandins {
			if !seen[m] {
				t.Errorf("%s's program never ran", m)
			}
		}
	})
}

// persistentCacheFiles is cacheFiles restricted to the families that keep
// integrity records (the ephemeral ones are removed by design once no job
// needs them).
func (s *stack) persistentCacheFiles() map[string]string {
	s.t.Helper()
	out := map[string]string{}
	for p, st := range s.cacheFiles() {
		rel := filepath.ToSlash(p)
		keep := false
		for _, f := range embedding.Families() {
			if f.Persistent && strings.Contains(rel, "/"+embedding.FoldersReference.Folder(f.Name)+"/") {
				keep = true
			}
		}
		if keep {
			out[p] = st
		}
	}
	return out
}

func readStandinLog(t *testing.T, path string) []standinRun {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatalf("no stand-in ran: %v", err)
	}
	defer f.Close()
	var out []standinRun
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var r standinRun
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("stand-in log line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}
