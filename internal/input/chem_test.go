package input

import (
	"context"
	"errors"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
)

// smilesCorpus holds SMILES RDKit 2022.09 accepts (true) or rejects on
// syntax (false), checked against Debian's python3-rdkit.
var smilesCorpus = map[string]bool{
	"CCO": true, " CCO": true, "CCO ethanol": true, "C1.C1": true, "[H]": true, "[H+]": true, "[#6]": true,
	"C(C)1CC1": true, "C=1CC-1": true, "C%10CC%10": true, "C%(100)CC%(100)": true, "[C@TH1](F)(Cl)Br": true,
	"[C@@H](F)(Cl)Br": true, "*": true, "[*]": true, "C$C": true, "c1ccccc1": true, "[se]1cccc1": true,
	"[CH4+2]": true, "[13CH3:1]C": true, "[Hg]": true, "[HH]": true, "C\\C=C/C": true, "C/1CC/1": true,
	"ClCl": true, "[2H]": true, "[0CH4]": true, "[C--]": true, "[C-2]": true, "C0CC0": true, "C:C": true,
	"[O-][N+](=O)c1ccccc1": true, "OS(=O)(=O)O": true, "C1.C2.C12": true, "[NH4+].[Cl-]": true,
	"C12C3C1C23": true, "C(C)(C)": true, "CC(=O)O.O": true, "[Cu+2]": true, "[Fe@@]": true,

	"C..C": false, ".C": false, "C.": false, "C11": false, "C12CC12": false, "C1C1": false, "H": false,
	"C(.C)C": false, "C()C": false, "(C)C": false, "C-": false, "C=": false, "C(=)C": false, "[C+++]": false,
	"[Xx]": false, "C1CC": false, "C)": false, "((C))": false, "C((C))": false, "CC(C": false, "C%1": false,
	"C%": false, "%10": false, "C--C": false, "C=-C": false, "C=.C": false, "C.=C": false, "[C@@@H]": false,
	"[C+-]": false, "C%00CC%00": false, "{": false, "C{": false, "[cl]": false, "InChI=1S/H2O/h1H2": false,
	"": false, "[C": false, "[]": false, "[13]": false, "C[": false, "C]": false, "[C:]": false,
}

func TestCheckSMILESCorpus(t *testing.T) {
	for s, want := range smilesCorpus {
		err := CheckSMILES(s)
		if (err == nil) != want {
			t.Errorf("CheckSMILES(%q) = %v, want valid=%v", s, err, want)
		}
		if err != nil {
			var se *SyntaxError
			if !errors.As(err, &se) {
				t.Errorf("%q: error %T is not a *SyntaxError", s, err)
			}
		}
	}
}

func TestCheckInChI(t *testing.T) {
	for s, want := range map[string]bool{
		"InChI=1S/H2O/h1H2": true, "InChI=1/CH4/h1H4": true, "  InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3 ": true,
		"InChI=1S/": false, "InChI=1S/H2O//h1": false, "InChI=1S/H2 O": false, "inchi=1S/H2O": false, "InChI=2/H2O": false,
	} {
		if (CheckInChI(s) == nil) != want {
			t.Errorf("CheckInChI(%q) = %v", s, CheckInChI(s))
		}
	}
	for s, want := range map[string]bool{"None": false, " nan ": false, "NaN": false, "": false, "CCO": true, "InChI=1S/H2O/h1H2": true, "C(C)(C)(C)(C)C": true} {
		if GoValid(s) != want {
			t.Errorf("GoValid(%q) != %v", s, want)
		}
	}
}

func TestChemistryWithoutRDKit(t *testing.T) {
	ctx := context.Background()
	rd := NewRDKit(RDKitOptions{Python: "/nonexistent/python3"})
	chem := NewChemistry(rd, nil)
	ch := chem.Checks(ctx)
	if !ch.GoSyntax || ch.RDKit || ch.Reason == "" {
		t.Fatalf("checks %+v", ch)
	}
	if _, err := rd.Probe(ctx); !errors.Is(err, ErrRDKitUnavailable) {
		t.Fatalf("probe: %v", err)
	}
	v, err := chem.ValidMany(ctx, []string{"CCO", "C(C)(C)(C)(C)C", "C1CC", "InChI=1S/H2O/h1H2"})
	if err != nil || !v["CCO"] || !v["C(C)(C)(C)(C)C"] || v["C1CC"] || !v["InChI=1S/H2O/h1H2"] {
		t.Fatalf("Go verdicts %v %v", v, err)
	}
	out, used, err := chem.Convert(ctx, FormCanonicalSMILES, []string{" OCC "})
	if err != nil || used || out[0] != "OCC" {
		t.Fatalf("convert without RDKit: %q %v %v", out, used, err)
	}
}

func needRDKit(t *testing.T) *RDKit {
	t.Helper()
	if err := exec.Command(DefaultPython, "-c", "import rdkit").Run(); err != nil {
		testenv.Unavailable(t, "RDKit (Debian python3-rdkit) is not installed for %s", DefaultPython)
	}
	rd := NewRDKit(RDKitOptions{})
	t.Cleanup(func() { _ = rd.Close() })
	return rd
}

func TestChemistryWithRDKit(t *testing.T) {
	rd := needRDKit(t)
	ctx := context.Background()
	chem := NewChemistry(rd, nil)
	ch := chem.Checks(ctx)
	if !ch.RDKit || ch.RDKitVersion == "" {
		t.Fatalf("checks %+v", ch)
	}
	// The Go checker must never reject what RDKit accepts; RDKit adds
	// sanitisation (valences, aromaticity) on top.
	var all []string
	for s := range smilesCorpus {
		if s != "" {
			all = append(all, s)
		}
	}
	res, err := rd.call(ctx, "check", all)
	if err != nil {
		t.Fatal(err)
	}
	for i, s := range all {
		if res[i].OK && CheckSMILES(s) != nil {
			t.Errorf("Go rejects %q, which RDKit accepts", s)
		}
		if res[i].OK != smilesCorpus[s] && !strings.HasPrefix(s, "InChI=") {
			t.Errorf("corpus says %q valid=%v, RDKit says %v", s, smilesCorpus[s], res[i].OK)
		}
	}
	v, err := chem.ValidMany(ctx, []string{"CCO", "C(C)(C)(C)(C)C", "c1cccc1", "N(=O)=O", "InChI=1S/H2O/h1H2", "None"})
	if err != nil {
		t.Fatal(err)
	}
	if !v["CCO"] || v["C(C)(C)(C)(C)C"] || v["c1cccc1"] || v["N(=O)=O"] || v["None"] {
		t.Fatalf("RDKit verdicts %v", v)
	}
	if v["InChI=1S/H2O/h1H2"] != true { // RDKit without InChI: the shape check stands
		t.Fatalf("InChI verdict %v (inchi support %v)", v, ch.InChI)
	}
	out, used, err := chem.Convert(ctx, FormCanonicalSMILES, []string{"OCC", " C(=O)(O)C ", "C1CC"})
	if err != nil || !used || out[0] != "CCO" || out[1] != "CC(=O)O" || out[2] != "C1CC" {
		t.Fatalf("canonical: %q %v %v", out, used, err)
	}
	out, _, _ = chem.Convert(ctx, FormSMILES, []string{"OCC"})
	if out[0] != "OCC" {
		t.Fatalf("raw SMILES kept: %q", out)
	}
}

func TestRDKitRestartAndConcurrency(t *testing.T) {
	rd := needRDKit(t)
	ctx := context.Background()
	if _, err := rd.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	// Kill the helper behind its back: the next request fails, the one
	// after restarts it.
	rd.mu.Lock()
	_ = rd.proc.cmd.Process.Kill()
	<-rd.proc.exited
	rd.mu.Unlock()
	chem := NewChemistry(rd, nil)
	v, err := chem.ValidMany(ctx, []string{"CCO", "C(C)(C)(C)(C)C"})
	if err != nil || !v["CCO"] || v["C(C)(C)(C)(C)C"] {
		t.Fatalf("after kill: %v %v", v, err)
	}
	var wg sync.WaitGroup
	errs := make(chan error, 16)
	for i := 0; i < 16; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := strings.Repeat("C", i+1)
			out, _, err := chem.Convert(ctx, FormCanonicalSMILES, []string{s, "OCC"})
			if err != nil || out[0] != s || out[1] != "CCO" {
				errs <- errors.New("concurrent convert: " + strings.Join(out, ","))
			}
		}(i)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	// A request over its timeout kills the helper; the next one works.
	fast := NewRDKit(RDKitOptions{RequestTimeout: time.Nanosecond})
	defer fast.Close()
	if _, err := fast.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fast.call(ctx, "check", []string{"CCO"}); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("timeout: %v", err)
	}
	fast.opts.RequestTimeout = 30 * time.Second
	if res, err := fast.call(ctx, "check", []string{"CCO"}); err != nil || !res[0].OK {
		t.Fatalf("after timeout: %v %v", res, err)
	}
}
