package input

import (
	"context"
	"errors"
	"log/slog"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/methods"
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
	if !ch.GoSyntax || ch.RDKit || ch.InChI || ch.InChIVia != "" || ch.Reason == "" {
		t.Fatalf("checks %+v", ch)
	}
	if _, err := rd.Probe(ctx); !errors.Is(err, ErrRDKitUnavailable) {
		t.Fatalf("probe: %v", err)
	}
	v, err := chem.ValidMany(ctx, []string{"CCO", "C(C)(C)(C)(C)C", "C1CC", "InChI=1S/H2O/h1H2"})
	if err != nil || !v["CCO"] || !v["C(C)(C)(C)(C)C"] || v["C1CC"] || !v["InChI=1S/H2O/h1H2"] {
		t.Fatalf("Go verdicts %v %v", v, err)
	}
	out, used, err := chem.Convert(ctx, methods.FormCanonicalSMILES, []string{" OCC "})
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
		if res[i].OK && !GoValid(s) { // InChI too, when the helper reads it
			t.Errorf("Go rejects %q, which RDKit accepts", s)
		}
		if res[i].OK != smilesCorpus[s] && !strings.HasPrefix(s, "InChI=") {
			t.Errorf("corpus says %q valid=%v, RDKit says %v", s, smilesCorpus[s], res[i].OK)
		}
	}
	v, err := chem.ValidMany(ctx, []string{"CCO", "C(C)(C)(C)(C)C", "c1cccc1", "N(=O)=O", "InChI=1S/H2O/h1H2", "InChI=1S/garbage", "None"})
	if err != nil {
		t.Fatal(err)
	}
	if !v["CCO"] || v["C(C)(C)(C)(C)C"] || v["c1cccc1"] || v["N(=O)=O"] || v["None"] {
		t.Fatalf("RDKit verdicts %v", v)
	}
	// Water is valid either way: parsed (InChI through RDKit or Open Babel)
	// or, without InChI support, by the shape check that then stands, which
	// also lets a well-shaped non-molecule through.
	if !v["InChI=1S/H2O/h1H2"] || v["InChI=1S/garbage"] != !ch.InChI {
		t.Fatalf("InChI verdicts %v (inchi support %v via %q)", v, ch.InChI, ch.InChIVia)
	}
	out, used, err := chem.Convert(ctx, methods.FormCanonicalSMILES, []string{"OCC", " C(=O)(O)C ", "C1CC"})
	if err != nil || !used || out[0] != "CCO" || out[1] != "CC(=O)O" || out[2] != "C1CC" {
		t.Fatalf("canonical: %q %v %v", out, used, err)
	}
	out, _, _ = chem.Convert(ctx, methods.FormSMILES, []string{"OCC"})
	if out[0] != "OCC" {
		t.Fatalf("raw SMILES kept: %q", out)
	}
}

// needInChI is needRDKit plus InChI support; via is what the helper must
// report using: "rdkit" when the RDKit build has InChI, else "openbabel".
func needInChI(t *testing.T) (rd *RDKit, via string) {
	t.Helper()
	rd = needRDKit(t)
	if exec.Command(DefaultPython, "-c", "from rdkit.Chem import inchi, MolFromInchi; assert inchi.INCHI_AVAILABLE").Run() == nil {
		return rd, "rdkit"
	}
	if err := exec.Command(DefaultPython, "-c", "from openbabel import pybel; assert 'inchi' in pybel.informats and 'inchi' in pybel.outformats").Run(); err != nil {
		testenv.Unavailable(t, "InChI: RDKit lacks it and Open Babel (Debian python3-openbabel) is not installed for %s", DefaultPython)
	}
	return rd, "openbabel"
}

func TestChemistryInChI(t *testing.T) {
	rd, via := needInChI(t)
	ctx := context.Background()
	chem := NewChemistry(rd, nil)
	ch := chem.Checks(ctx)
	if !ch.RDKit || !ch.InChI || ch.InChIVia != via {
		t.Fatalf("checks %+v, want InChI via %q", ch, via)
	}
	const (
		water   = "InChI=1S/H2O/h1H2"
		ethanol = "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1H3"
		methane = "InChI=1S/CH4/h1H4"
		benzene = "InChI=1S/C6H6/c1-2-4-6-5-3-1/h1-6H"
		alanine = "InChI=1S/C3H7NO2/c1-2(4)3(5)6/h2H,4H2,1H3,(H,5,6)/t2-/m0/s1" // L
		butene  = "InChI=1S/C4H8/c1-3-4-2/h3-4H,1-2H3/b4-3+"                    // trans
	)
	// Well shaped (the Go check passes them on) but no molecule: not an
	// InChI at all, a truncated hydrogen layer, a bond to a missing atom.
	broken := []string{"InChI=1S/garbage", "InChI=1S/C2H6O/c1-2-3/h3H,2H2,1", "InChI=1S/C2H6O/c1-2-9/h3H,2H2,1H3"}
	for _, s := range broken {
		if CheckInChI(s) != nil {
			t.Fatalf("%q must pass the shape check: %v", s, CheckInChI(s))
		}
	}
	good := []string{water, " " + ethanol + " ", "InChI=1/CH4/h1H4", alanine}
	v, err := chem.ValidMany(ctx, append(append([]string{}, good...), broken...))
	if err != nil {
		t.Fatal(err)
	}
	for _, s := range good {
		if !v[s] {
			t.Errorf("%q invalid", s)
		}
	}
	for _, s := range broken {
		if v[s] {
			t.Errorf("%q valid", s)
		}
	}

	// The helper itself reads only a whole text as one InChI (Open Babel
	// would take the first InChI found anywhere in its input).
	res, err := rd.call(ctx, "check", []string{water + " " + methane, "x" + water, water})
	if err != nil || len(res) != 3 || res[0].OK || res[1].OK || !res[2].OK {
		t.Fatalf("helper check of InChI with extra text: %+v %v", res, err)
	}

	out, used, err := chem.Convert(ctx, methods.FormInChI, []string{"CCO", methane, "OCC"})
	if err != nil || !used || len(out) != 3 || out[0] != ethanol || out[1] != methane || out[2] != ethanol {
		t.Fatalf("to InChI: %q %v %v", out, used, err)
	}
	// Aromatic and stereo SMILES, a non-standard InChI, and texts with no
	// standard InChI (kept as given).
	in := []string{"c1ccccc1", "C[C@H](N)C(=O)O", "C/C=C/C", " InChI=1/CH4/h1H4", "InChI=1S/garbage", "*"}
	want := []string{benzene, alanine, butene, methane, "InChI=1S/garbage", "*"}
	out, used, err = chem.Convert(ctx, methods.FormInChI, in)
	if err != nil || !used || strings.Join(out, " ") != strings.Join(want, " ") {
		t.Fatalf("to InChI:\n got %q %v %v\nwant %q", out, used, err, want)
	}

	out, used, err = chem.Convert(ctx, methods.FormCanonicalSMILES, []string{ethanol})
	if err != nil || !used || len(out) != 1 || out[0] != "CCO" {
		t.Fatalf("InChI to canonical SMILES: %q %v %v", out, used, err)
	}
	in = []string{benzene, alanine, butene, water, "InChI=1S/garbage"}
	want = []string{"c1ccccc1", "C[C@H](N)C(=O)O", "C/C=C/C", "O", "InChI=1S/garbage"}
	out, used, err = chem.Convert(ctx, methods.FormCanonicalSMILES, in)
	if err != nil || !used || strings.Join(out, " ") != strings.Join(want, " ") {
		t.Fatalf("InChI to canonical SMILES:\n got %q %v %v\nwant %q", out, used, err, want)
	}
	// methods.FormSMILES: a SMILES from an InChI, the raw text from a SMILES.
	out, _, err = chem.Convert(ctx, methods.FormSMILES, []string{water, "OCC"})
	if err != nil || out[0] != "O" || out[1] != "OCC" {
		t.Fatalf("to SMILES: %q %v", out, err)
	}
}

func TestRDKitMemoryLimit(t *testing.T) {
	needRDKit(t)
	ctx := context.Background()
	pid := func(rd *RDKit) int {
		sl := <-rd.slots
		defer rd.release(sl)
		if sl.proc == nil {
			return 0
		}
		return sl.proc.cmd.Process.Pid
	}
	// Past its limit (1 MiB: at once) the helper answers, then is replaced.
	tight := NewRDKit(RDKitOptions{MaxRSSMiB: 1, Helpers: 1, Log: slog.New(slog.DiscardHandler)})
	defer tight.Close()
	var pids []int
	for i := 0; i < 2; i++ {
		if _, err := tight.Probe(ctx); err != nil {
			t.Fatal(err)
		}
		pids = append(pids, pid(tight))
		res, err := tight.call(ctx, "canonical", []string{"OCC"})
		if err != nil || len(res) != 1 || !res[0].OK || res[0].Value == nil || *res[0].Value != "CCO" {
			t.Fatalf("answer before the restart: %+v %v", res, err)
		}
		if p := pid(tight); p != 0 {
			t.Fatalf("helper %d still running past its memory limit", p)
		}
	}
	if pids[0] == 0 || pids[0] == pids[1] {
		t.Fatalf("helper pids %v: want two different helpers", pids)
	}
	// Within the default limit it stays.
	rd := NewRDKit(RDKitOptions{Helpers: 1})
	defer rd.Close()
	if _, err := rd.call(ctx, "check", []string{"CCO"}); err != nil {
		t.Fatal(err)
	}
	first := pid(rd)
	if _, err := rd.call(ctx, "check", []string{"CCO"}); err != nil {
		t.Fatal(err)
	}
	if first == 0 || pid(rd) != first {
		t.Fatalf("helper replaced within its memory limit: %d then %d", first, pid(rd))
	}
}

func TestRDKitRestartAndConcurrency(t *testing.T) {
	rd := needRDKit(t)
	ctx := context.Background()
	if _, err := rd.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	// Kill the helpers behind its back: the next request fails, the one
	// after restarts it.
	var held []*rdkitSlot
	for range rd.opts.Helpers {
		sl := <-rd.slots
		if sl.proc != nil {
			_ = sl.proc.cmd.Process.Kill()
			<-sl.proc.exited
		}
		held = append(held, sl)
	}
	for _, sl := range held {
		rd.release(sl)
	}
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
			out, _, err := chem.Convert(ctx, methods.FormCanonicalSMILES, []string{s, "OCC"})
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
	fast := NewRDKit(RDKitOptions{MoleculeTimeout: time.Nanosecond, Helpers: 1})
	defer fast.Close()
	if _, err := fast.Probe(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := fast.call(ctx, "check", []string{"CCO"}); err == nil || !strings.Contains(err.Error(), "timed out") {
		t.Fatalf("timeout: %v", err)
	}
	fast.opts.MoleculeTimeout = 30 * time.Second
	if res, err := fast.call(ctx, "check", []string{"CCO"}); err != nil || !res[0].OK {
		t.Fatalf("after timeout: %v %v", res, err)
	}
}

// TestRDKitAnswersKept: the helper's answers to short texts are kept, so the
// same substrates checked or converted again cost no helper round trip and
// get the same answers; a long text (soloLen and over) is asked each time.
func TestRDKitAnswersKept(t *testing.T) {
	rd := needRDKit(t)
	ctx := context.Background()
	chem := NewChemistry(rd, nil)
	requests := func() (n int64) {
		for _, sl := range rd.all {
			n += sl.nextID
		}
		return n
	}
	texts := []string{"CCO", "C(C)(C)(C)(C)C", "c1ccccc1O", "N(=O)=O"}
	first, err := chem.ValidMany(ctx, texts)
	if err != nil {
		t.Fatal(err)
	}
	canon, used, err := chem.Convert(ctx, methods.FormCanonicalSMILES, []string{"OCC", "C1CC"})
	if err != nil || !used {
		t.Fatal(used, err)
	}
	before := requests()
	if before == 0 {
		t.Fatal("no helper request counted")
	}
	again, err := chem.ValidMany(ctx, texts)
	if err != nil {
		t.Fatal(err)
	}
	canon2, _, err := chem.Convert(ctx, methods.FormCanonicalSMILES, []string{"OCC", "C1CC"})
	if err != nil {
		t.Fatal(err)
	}
	if n := requests() - before; n != 0 {
		t.Fatalf("%d helper requests for texts answered before", n)
	}
	for _, s := range texts {
		if first[s] != again[s] {
			t.Fatalf("%q: %v then %v", s, first[s], again[s])
		}
	}
	if !first["CCO"] || first["C(C)(C)(C)(C)C"] || canon2[0] != "CCO" || canon2[0] != canon[0] || canon2[1] != canon[1] {
		t.Fatalf("answers %v, canonical %q then %q", first, canon, canon2)
	}
	long := strings.Repeat("C", soloLen)
	for range 2 {
		before = requests()
		if _, err := chem.ValidMany(ctx, []string{long}); err != nil {
			t.Fatal(err)
		}
		if requests() == before {
			t.Fatal("a long text was answered from the kept answers")
		}
	}
}
