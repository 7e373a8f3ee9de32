package activities

import (
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// answersEngine stands in for a program that answers, row by row, the
// numbers in its ANSWERS variable (its own form: class indices, log10
// values), and records each row's seq_id.
const answersEngine = `import json, os, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
answers = [float(x) for x in os.environ["ANSWERS"].split(",")]
ids = [r.get("seq_id", "") for r in job["rows"]]
json.dump(ids, open(os.path.join(os.environ["KEEP_DIR"], job["method"] + "-seq-ids.json"), "w"))
json.dump({"predictions": answers[:len(job["rows"])]}, open(out, "w"))
`

// TestDeclaredOutputFormsAreConverted: method H's program answers a class
// index and I's log10 of kcat/Km per (s·M); the stage holds the class's
// range mean (Km in mM) and the linear value per (s·mM), and an answer
// outside the declared form fails its row with the reason, never served.
// Each row reached the program with its seq_id.
func TestDeclaredOutputFormsAreConverted(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		dir := t.TempDir()
		script := filepath.Join(dir, "answers.py")
		if err := os.WriteFile(script, []byte(answersEngine), 0o644); err != nil {
			t.Fatal(err)
		}
		py := python(t)
		keep := filepath.Join(dir, "keep")
		_ = os.MkdirAll(keep, 0o755)
		cmd := func(answers string) string {
			return fmt.Sprintf("{python: %s, script: %s, extra_env: {ANSWERS: %q, KEEP_DIR: %s}}", py, script, answers, keep)
		}
		h := newPredictHarness(t, s, nil, fmt.Sprintf("  - key: H\n    command: %s\n  - key: I\n    command: %s\n",
			cmd("3,0,7,2.5"), cmd("4,-2,400,1")))
		h.submit("jobforms1", map[string]string{"kcat": "H", "Km": "H", "kcat/Km": "I"}, true, fourRows)

		kcat, err := h.predict("jobforms1", 0)
		if err != nil {
			t.Fatal(err)
		}
		km, err := h.predict("jobforms1", 1)
		if err != nil {
			t.Fatal(err)
		}
		ratio, err := h.predict("jobforms1", 2)
		if err != nil {
			t.Fatal(err)
		}
		near := func(what string, got *float64, want float64) {
			t.Helper()
			if got == nil || math.Abs(*got-want) > 1e-12*math.Abs(want) {
				t.Errorf("%s = %v, want %v", what, got, want)
			}
		}
		near("H kcat class 3", kcat.Values[0], (1.01e-1+1)/2)
		near("H kcat class 0", kcat.Values[1], 3.32e-8/2)
		near("H kcat class 7", kcat.Values[2], (1.002e3+7e7)/2)
		near("H Km class 3 in mM", km.Values[0], (1.002e-3+1e-2)/2*1000)
		for _, p := range []struct {
			name   string
			reason string
		}{{"kcat", kcat.Reasons[3]}, {"Km", km.Reasons[3]}} {
			if kcatV := kcat.Values[3]; kcatV != nil || !strings.Contains(p.reason, "not one of its") {
				t.Errorf("H %s answer 2.5: value %v reason %q", p.name, kcatV, p.reason)
			}
		}
		near("I log10 4 per (s*M)", ratio.Values[0], 10)
		near("I log10 -2 per (s*M)", ratio.Values[1], 1e-5)
		if ratio.Values[2] != nil || !strings.Contains(ratio.Reasons[2], "outside the range of a number") {
			t.Errorf("I answer 10^400: %v %q", ratio.Values[2], ratio.Reasons[2])
		}
		for _, m := range []string{"H", "I"} {
			raw, err := os.ReadFile(filepath.Join(keep, m+"-seq-ids.json"))
			if ids := string(raw); err != nil || strings.Contains(ids, `""`) || strings.Count(ids, ",") != 3 {
				t.Errorf("%s's rows without their seq_id: %s", m, ids)
			}
		}
	})
}
