package methods_test

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
)

// dlkcatLike stands in for method L's program (the reference's DLKcat),
// written from its contract: argv `<input.tsv> <output.tsv>`, the input's
// header `Substrate Name`, `Substrate SMILES`, `Protein Sequence`; it
// fails on a letter outside the twenty amino acids (the real program's
// word dictionary has none) and on a dotted SMILES, as the real one would,
// and writes the input's three columns and a fourth, kcat in 1/s (here the
// sequence's length times the SMILES's). It records its argv and the
// environment it was given.
const dlkcatLike = `import json, os, sys
inp, out = sys.argv[1], sys.argv[2]
lines = open(inp).read().splitlines()
assert lines[0] == "Substrate Name\tSubstrate SMILES\tProtein Sequence", lines[0]
rows = [l.split("\t") for l in lines[1:]]
json.dump({"argv": sys.argv[1:], "n": len(rows), "data": os.environ.get("METHODL_DATA_PATH"), "results": os.environ.get("METHODL_RESULTS_PATH")},
          open(os.path.join(os.environ["KEEP_DIR"], "seen.json"), "w"))
with open(out, "w") as f:
    f.write("Substrate Name\tSubstrate SMILES\tProtein Sequence\tKcat value (1/s)\n")
    for name, smiles, seq in rows:
        assert name == "noname" and set(seq) <= set("ACDEFGHIKLMNPQRSTVWY") and "." not in smiles, (name, smiles, seq)
        f.write("%s\t%s\t%s\t%.4f\n" % (name, smiles, seq, len(seq) * len(smiles)))
`

// TestSubstrateTSVContract: method L's rows reach its program as the
// reference's DLKcat reads them, the fourth output column is the value of
// the row it belongs to, and the rows the program cannot read (a
// non-standard amino acid, a substrate of two molecules) are left out with
// the reference's reasons, their neighbours' values still in place.
func TestSubstrateTSVContract(t *testing.T) {
	d, req, dir := program(t, "L", dlkcatLike, 0)
	d.Command.Paths = map[string]string{"data_dir": "/srv/dlkcat/Data", "model_dir": "/srv/dlkcat/Results"}
	if d.FileContract != methods.ContractSubstrateTSV {
		t.Fatalf("L's contract %q", d.FileContract)
	}
	req.Chem = passChem{}
	req.Rows = []methods.EngineRow{
		{Seq: "MKTAYIAK", Kwargs: map[string]string{"smiles": "CCO"}},
		{Seq: "MKUAY", Kwargs: map[string]string{"smiles": "CCO"}},
		{Seq: "MKTAY", Kwargs: map[string]string{"smiles": "CCO.O"}},
		{Seq: "MSTNPK", Kwargs: map[string]string{"smiles": "OC(=O)CC"}},
	}
	vals, reasons, err := methods.RunCommand(context.Background(), d, req)
	if err != nil {
		t.Fatal(err)
	}
	want := []float64{8 * 3, 0, 0, 6 * 8}
	for i, v := range vals {
		switch i {
		case 1, 2:
			if v != nil {
				t.Errorf("row %d: value %v for a row the program cannot read", i, *v)
			}
		default:
			if v == nil || *v != want[i] {
				t.Errorf("row %d: value %v, want %v", i, v, want[i])
			}
		}
	}
	if reasons[1] != methods.ReasonTSVSequence || reasons[2] != methods.ReasonTSVFragments || len(reasons) != 2 {
		t.Errorf("reasons %v", reasons)
	}
	var seen struct {
		Argv          []string `json:"argv"`
		N             int      `json:"n"`
		Data, Results string
	}
	raw, err := os.ReadFile(filepath.Join(dir, "seen.json"))
	if err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal(raw, &seen); err != nil {
		t.Fatal(err)
	}
	if seen.N != 2 || len(seen.Argv) != 2 || filepath.Base(seen.Argv[0]) != "input_job1.tsv" || filepath.Base(seen.Argv[1]) != "output_job1.tsv" {
		t.Errorf("program saw %+v", seen)
	}
	if seen.Data != "/srv/dlkcat/Data" || seen.Results != "/srv/dlkcat/Results" {
		t.Errorf("environment data %q results %q", seen.Data, seen.Results)
	}

	// Every row unreadable: the program is not run, each row has its reason.
	_ = os.Remove(filepath.Join(dir, "seen.json"))
	req.Rows = req.Rows[1:3]
	vals, reasons, err = methods.RunCommand(context.Background(), d, req)
	if err != nil || len(vals) != 2 || vals[0] != nil || vals[1] != nil || len(reasons) != 2 {
		t.Fatalf("all rows left out: %v %v %v", vals, reasons, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "seen.json")); !os.IsNotExist(err) {
		t.Errorf("the program ran with no row to read: %v", err)
	}
}

// TestSubstrateTSVWrongRowCount: an output with fewer lines than rows
// sent is an error, never values shifted onto other rows.
func TestSubstrateTSVWrongRowCount(t *testing.T) {
	short := `import sys
open(sys.argv[2], "w").write("h1\th2\th3\tKcat value (1/s)\nnoname\tCCO\tMK\t1.5\n")
`
	d, req, _ := program(t, "L", short, 0)
	req.Chem = passChem{}
	req.Rows = []methods.EngineRow{{Seq: "MK", Kwargs: map[string]string{"smiles": "CCO"}}, {Seq: "MKT", Kwargs: map[string]string{"smiles": "CCO"}}}
	if _, _, err := methods.RunCommand(context.Background(), d, req); err == nil {
		t.Fatal("a short output was accepted")
	}
}

// passChem hands substrates over as given (the tests' SMILES are already
// in the form the program reads).
type passChem struct{}

func (passChem) Convert(_ context.Context, _ methods.SubstrateForm, texts []string) ([]string, bool, error) {
	return texts, true, nil
}
