package methods_test

import (
	"context"
	"fmt"
	"slices"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

func runCommand(d *methods.Descriptor, req methods.CommandRequest) ([]*float64, map[int]string, error) {
	return methods.RunCommand(context.Background(), d, req)
}

// catpredEngine stands in for the reference's CatPred program (its
// webKinPred adapter over CatPred's predict.py), written from what they
// print and write: predict.py's tqdm bars on stderr (the input rows, then
// 4 models with 2 batches each nested under them, leave=False), one
// `Progress: n/n` line on stdout when all is done, and an output of
// predictions, invalid_indices and invalid_reasons, no uncertainty.
const catpredEngine = `import json, sys, time
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
rows = json.load(open(inp))["rows"]
n = len(rows)
e = sys.stderr
def bar(i, t):
    return "%3d%%|#   | %d/%d [00:00<00:00, 9.99it/s]" % (100 * i // t, i, t)
e.write("\r0it [00:00, ?it/s]\r%dit [00:00, 99.9it/s]\n" % n)
e.write("\r" + bar(0, n) + "\r" + bar(n, n) + "\n")
e.flush()
print("Test size = %d" % n, flush=True)
for m in range(4):
    e.write("\r" + bar(m, 4))
    for b in range(3):
        e.write("\n\r" + bar(b, 2) + "\x1b[A")
        e.flush()
        time.sleep(0.01)
    e.write("\n\r" + " " * 40 + "\x1b[A")
e.write("\r" + bar(4, 4) + "\n")
e.flush()
# The streams are read apart: let the bars be read before the last line.
time.sleep(0.3)
print("Progress: %d/%d" % (n, n), flush=True)
json.dump({"predictions": [len(r["sequence"]) for r in rows], "invalid_indices": [1],
           "invalid_reasons": {"1": "Invalid substrate (not a valid SMILES)"}}, open(out, "w"))
`

// TestTqdmProgressCatPred: method E's progress is read from its program's
// tqdm bars on stderr while it runs, not only from its last Progress line;
// its uncertainty columns stay blank, as its program gives none. A method
// whose progress is `lines` (G) running the same program sees only the
// Progress line.
func TestTqdmProgressCatPred(t *testing.T) {
	for key, want := range map[string][]int{
		"E": {2, 5, 7, 10, 12, 15, 17, 20, 20},
		"G": {20},
	} {
		d, req, _ := program(t, key, catpredEngine, 20)
		var got []int
		req.Progress = func(done int) { got = append(got, done) }
		req.Uncertainty = func(row int, u units.Uncertainty) { t.Errorf("%s: row %d has uncertainty %+v", key, row, u) }
		vals, reasons, err := runCommand(d, req)
		if err != nil {
			t.Fatal(err)
		}
		if !slices.Equal(got, want) {
			t.Errorf("%s: progress %v, want %v", key, got, want)
		}
		if vals[0] == nil || *vals[0] != 1 || reasons[1] != "Invalid substrate (not a valid SMILES)" {
			t.Errorf("%s: values %v, reasons %v", key, vals, reasons)
		}
	}
}

// sdEngine passes CatPred's own per-row numbers on: its service's standard
// deviations of log10 (SD_total, SD_aleatoric, SD_epistemic) and
// predict.py's variance (log10kcat_max_mve_uncal_var).
const sdEngine = `import json, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
rows = json.load(open(inp))["rows"]
json.dump({"predictions": [1.0] * len(rows),
           "SD_total": [0.5, None, -1.0][:len(rows)], "SD_aleatoric": [0.4, 0.1, 0.1][:len(rows)],
           "SD_epistemic": [0.3, 0.1, "x"][:len(rows)],
           "log10kcat_max_mve_uncal_var": [0.25, 0.0625, None][:len(rows)],
           "uncertainties": [{"sd_total": 9}] * len(rows)}, open(out, "w"))
`

// TestUncertaintyFromDeclaredLists: a descriptor's uncertainty_from reads
// the lists it names (and not "uncertainties"); the var form serves the
// square root of a variance.
func TestUncertaintyFromDeclaredLists(t *testing.T) {
	for _, c := range []struct {
		fields string
		want   []string
	}{
		{"    uncertainty_from: {total: SD_total, aleatoric: SD_aleatoric, epistemic: SD_epistemic}\n",
			[]string{"0:0.5/0.4/0.3"}},
		{"    uncertainty_from: {total: log10kcat_max_mve_uncal_var, form: var}\n",
			[]string{"0:0.5/-/-", "1:0.25/-/-"}},
		{"    uncertainty_from: {total: missing_key}\n", nil},
		{"", []string{"0:9/-/-", "1:9/-/-", "2:9/-/-"}},
	} {
		d, req, _ := programFields(t, "E", sdEngine, 3, c.fields)
		var got []string
		part := func(p *float64) string {
			if p == nil {
				return "-"
			}
			return fmt.Sprint(*p)
		}
		req.Uncertainty = func(row int, u units.Uncertainty) {
			got = append(got, fmt.Sprintf("%d:%v/%s/%s", row, u.Total, part(u.Aleatoric), part(u.Epistemic)))
		}
		if _, _, err := runCommand(d, req); err != nil {
			t.Fatal(err)
		}
		slices.Sort(got)
		if !slices.Equal(got, c.want) {
			t.Errorf("%q: %v, want %v", c.fields, got, c.want)
		}
	}
}

// TestProgressAndUncertaintySourceFields: E reads tqdm bars, every other
// built-in method Progress lines alone; a methods file's progress and
// uncertainty_from are checked.
func TestProgressAndUncertaintySourceFields(t *testing.T) {
	for _, d := range methods.Default().All() {
		want := methods.ProgressForm("")
		if d.Key == "E" {
			want = methods.ProgressTqdm
		}
		if d.Progress != want {
			t.Errorf("%s: progress %q, want %q", d.Key, d.Progress, want)
		}
	}
	for file, ok := range map[string]bool{
		"methods: [{key: B, progress: tqdm}]":                                             true,
		"methods: [{key: B, progress: lines}]":                                            true,
		"methods: [{key: B, progress: bars}]":                                             false,
		"methods: [{key: E, uncertainty_from: {total: SD_total, form: var}}]":             true,
		"methods: [{key: E, uncertainty_from: {total: SD_total, form: cv}}]":              false,
		"methods: [{key: E, uncertainty_from: {aleatoric: SD_aleatoric}}]":                false,
		"methods: [{key: B, uncertainty_from: {total: SD_total}}]":                        false,
		"methods: [{key: E, file_contract: substrate_csv, uncertainty_from: {total: x}}]": false,
	} {
		if _, err := methods.Parse([]byte(file)); (err == nil) != ok {
			t.Errorf("%s: error %v, want ok %v", file, err, ok)
		}
	}
}
