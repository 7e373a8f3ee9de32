package experimental

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

const ethanol = "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"

// kcatTable has one row per Source label, a duplicate key (the first row
// must win) and a row with every optional field absent.
const kcatTable = `substrate_inchi,protein_sequence,protein_ID,protein_type,mutation,kcat_value,kcat_SD,all_substrates,all_products,temperature,ph,from_brenda,from_sabio,from_uniprot,extra
"` + ethanol + `",MKVLAAGG,P12345,wildtype,-,12.5,0.5,ethanol;NAD+,acetaldehyde;NADH,25.0,7.5,1,0,0,x
"` + ethanol + `",MKVLAAGG,P99999,,,99,,,,,,0,1,0,x
"` + ethanol + `",MKVLSSGG,Q1,variant,A12G mutant,3.0,nan,,,30,,0,1.0,0,x
"` + ethanol + `",MKVLTTGG,Q2,,,1e-05,,,,,8,0,0,1,x
"` + ethanol + `",MKVLWWGG,,,,0.25,NaN,,,,,0,0,0,x
`

func table(t *testing.T) *Table {
	t.Helper()
	tb, err := Read(strings.NewReader(kcatTable), Kcat)
	if err != nil {
		t.Fatal(err)
	}
	return tb
}

func TestLookupFirstRowWins(t *testing.T) {
	tb := table(t)
	if tb.Rows() != 5 {
		t.Fatalf("rows %d", tb.Rows())
	}
	r, ok := tb.Lookup(ethanol, "MKVLAAGG")
	if !ok || r["protein_ID"] != "P12345" {
		t.Fatalf("lookup: %v %v", r, ok)
	}
	if v, ok := r.Value(Kcat); !ok || v != 12.5 {
		t.Errorf("value %v %v", v, ok)
	}
	for _, miss := range [][2]string{{ethanol, "MKVLAAG"}, {ethanol, "mkvlaagg"}, {"InChI=1S/CH4/h1H4", "MKVLAAGG"}, {"CCO", "MKVLAAGG"}} {
		if _, ok := tb.Lookup(miss[0], miss[1]); ok {
			t.Errorf("%v matched", miss)
		}
	}
}

func TestSourceLabels(t *testing.T) {
	tb := table(t)
	for seq, want := range map[string]string{"MKVLAAGG": "BRENDA", "MKVLSSGG": "Sabio-RK", "MKVLTTGG": "UniProt", "MKVLWWGG": "Experimental"} {
		r, ok := tb.Lookup(ethanol, seq)
		if !ok {
			t.Fatalf("%s not found", seq)
		}
		if got := r.Source(); got != want {
			t.Errorf("%s: source %q, want %q", seq, got, want)
		}
	}
}

func TestExtraInfo(t *testing.T) {
	tb := table(t)
	pred := 3.25
	zero := 0.0
	cases := []struct {
		seq  string
		pred *float64
		want string
	}{
		{"MKVLAAGG", &pred, "This is reported in BRENDA for protein P12345 (wildtype). Standard deviation is 0.5. Full reaction is: ethanol;NAD+ --> acetaldehyde;NADH. at temperature 25.0 and pH 7.5. Prediction by Method B is 3.25"},
		{"MKVLSSGG", nil, "This is reported in Sabio-RK for protein Q1 (variant A12G). Standard deviation is not reported. at temperature 30.0"},
		{"MKVLTTGG", &zero, "This is reported in UniProt for protein Q2. Standard deviation is not reported. at pH 8.0"},
		{"MKVLWWGG", nil, "This is reported in Experimental for protein unknown ID. Standard deviation is not reported"},
	}
	for _, c := range cases {
		r, _ := tb.Lookup(ethanol, c.seq)
		if got := r.ExtraInfo(Kcat, c.pred, "Method B"); got != c.want {
			t.Errorf("%s:\n got %q\nwant %q", c.seq, got, c.want)
		}
	}
}

func TestNullish(t *testing.T) {
	for _, v := range []string{"", " ", "nan", "NaN", "None", "none", "-"} {
		if !Nullish(v) {
			t.Errorf("%q not nullish", v)
		}
	}
	for _, v := range []string{"0", "x", "--"} {
		if Nullish(v) {
			t.Errorf("%q nullish", v)
		}
	}
}

func TestReadNeedsColumns(t *testing.T) {
	if _, err := Read(strings.NewReader("substrate_inchi,protein_sequence,kcat_value\n"), Km); err == nil {
		t.Error("a km table without km_value was accepted")
	}
}

func TestTablesLoadOnceAndReload(t *testing.T) {
	dir := t.TempDir()
	ts := &Tables{Dir: dir}
	if _, err := ts.Get(Km); !errors.Is(err, ErrNotConfigured) {
		t.Fatalf("absent table: %v", err)
	}
	path := filepath.Join(dir, Kcat.FileName())
	if err := os.WriteFile(path, []byte(kcatTable), 0o644); err != nil {
		t.Fatal(err)
	}
	a, err := ts.Get(Kcat)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := ts.Get(Kcat)
	if a != b {
		t.Error("an unchanged table was read again")
	}
	later := time.Now().Add(time.Minute)
	if err := os.WriteFile(path, []byte("substrate_inchi,protein_sequence,kcat_value\n"+ethanol+",MK,1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_ = os.Chtimes(path, later, later)
	c, err := ts.Get(Kcat)
	if err != nil || c == a || c.Rows() != 1 {
		t.Errorf("changed table not reloaded: %v", err)
	}
}

func TestFormatFloat(t *testing.T) {
	for v, want := range map[float64]string{12.5: "12.5", 1e-05: "1e-05", 25: "25.0", 1.5e16: "1.5e+16"} {
		if got := FormatFloat(v); got != want {
			t.Errorf("%v: %q want %q", v, got, want)
		}
	}
}
