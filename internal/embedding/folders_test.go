package embedding

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
)

// referenceNames are the reference deployment's folders of the five
// families it names otherwise (its method programs read them).
var referenceNames = map[string]string{
	FamilyESM1bMethodD:          "esm1b_turnup",
	FamilyMethodGESM2:           "omniesi_esm2",
	FamilyMethodIProtT5Residues: "iecata_prot_t5_residues",
	FamilyMethodKESMC:           "catrange_esmc",
}

// TestLayoutFoldersEveryFamily: under each naming, every fixed family and a
// method E family has its folder, the quarantine folder follows it, and the
// folder maps back to the family (a folder of the other naming does not).
func TestLayoutFoldersEveryFamily(t *testing.T) {
	eKcat, _ := MethodEFamily("kcat", "fold_0__model_3")
	for _, n := range []Folders{"", FoldersKinflow, FoldersReference} {
		l := newLayout(t)
		l.Folders = n
		for _, f := range append(Families(), eKcat) {
			want := f.Name
			if n == FoldersReference {
				if r, ok := referenceNames[f.Name]; ok {
					want = r
				} else if f.Name == eKcat.Name {
					want = "catpred_esm2/kcat/fold_0__model_3"
				}
			}
			if got := l.Folder(f); got != want {
				t.Errorf("%q: %s's folder %q, want %q", n, f.Name, got, want)
			}
			if got := l.FamilyDir(f); got != filepath.Join(l.MediaRoot, SequenceInfoDir, filepath.FromSlash(want)) {
				t.Errorf("%q: %s's dir %s", n, f.Name, got)
			}
			if got := l.QuarantineFolder(f); got != filepath.Join(l.MediaRoot, SequenceInfoDir, QuarantineDir, filepath.FromSlash(want)) {
				t.Errorf("%q: %s's quarantine %s", n, f.Name, got)
			}
			back, ok := l.FamilyOfDir(l.FamilyDir(f))
			if !ok || back.Name != f.Name {
				t.Errorf("%q: folder %s maps back to %q %v", n, want, back.Name, ok)
			}
			if got, ok := l.FolderOf(f.Name); !ok || got != l.FamilyDir(f) {
				t.Errorf("%q: FolderOf(%s) = %s %v", n, f.Name, got, ok)
			}
		}
		if got := l.MethodEParameterDir("km"); !strings.HasSuffix(got, map[bool]string{true: "/catpred_esm2/km", false: "/methode_esm2/km"}[n == FoldersReference]) {
			t.Errorf("%q: method E km folder %s", n, got)
		}
	}
	ref := &Layout{MediaRoot: "/m", Folders: FoldersReference}
	kin := &Layout{MediaRoot: "/m"}
	for name, r := range referenceNames {
		if _, ok := ref.FamilyOfDir("/m/sequence_info/" + name); ok {
			t.Errorf("reference naming: kinflow folder %s taken for a family", name)
		}
		if _, ok := kin.FamilyOfDir("/m/sequence_info/" + r); ok {
			t.Errorf("kinflow naming: reference folder %s taken for a family", r)
		}
	}
	if n, err := FoldersOf(map[string]string{"esm1b_turnup": FamilyESM1bMethodD, "esm1v": FamilyESM1v}); err != nil || n != FoldersReference {
		t.Errorf("FoldersOf reference map: %q %v", n, err)
	}
	if n, err := FoldersOf(map[string]string{"esm1v": FamilyESM1v}); err != nil || n != FoldersKinflow {
		t.Errorf("FoldersOf shared folder: %q %v", n, err)
	}
	if _, err := FoldersOf(map[string]string{"elsewhere": FamilyESM1v}); err == nil {
		t.Error("FoldersOf accepted a folder no naming gives")
	}
	if _, err := ParseFolders("upstream"); err == nil {
		t.Error("ParseFolders accepted an unknown naming")
	}
}

// TestPlanOnReferenceFolders: with the reference naming, method D's plan
// expects esm1b_turnup/<id>.npy, finds the files there (not in
// esm1b_methodd/) and sets a bad one aside under .quarantine/esm1b_turnup/.
func TestPlanOnReferenceFolders(t *testing.T) {
	ctx := context.Background()
	l := newLayout(t)
	l.Folders = FoldersReference
	d, _ := methods.Default().Get("D")
	ids, m := testSeqs(3)
	p := plan(t, l, d, methods.Kcat, ids, m)
	if p.NeedComputation != 3 {
		t.Fatalf("empty cache: need %d", p.NeedComputation)
	}
	for _, sid := range ids {
		want := filepath.Join(l.SequenceInfo(), "esm1b_turnup", sid+".npy")
		if got := p.ExpectedPathsBySeq[sid]; len(got) != 1 || got[0] != want {
			t.Fatalf("%s: expected %v, want %s", sid, got, want)
		}
	}
	if _, err := computeStepWork(ctx, l, p.StepWork(), p.SeqIDToSeq, nil); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(l.SequenceInfo(), FamilyESM1bMethodD)); !os.IsNotExist(err) {
		t.Fatalf("the kinflow folder was written: %v", err)
	}
	if p := plan(t, l, d, methods.Kcat, ids, m); !p.Complete() {
		t.Fatalf("after the write: need %d", p.NeedComputation)
	}
	// The same cache under the kinflow naming has none of the files.
	kin := *l
	kin.Folders = FoldersKinflow
	if p := plan(t, &kin, d, methods.Kcat, ids, m); p.NeedComputation != 3 {
		t.Fatalf("kinflow naming over a reference cache: need %d", p.NeedComputation)
	}
	if err := os.Truncate(filepath.Join(l.SequenceInfo(), "esm1b_turnup", ids[0]+".npy"), 100); err != nil {
		t.Fatal(err)
	}
	p, err := l.BuildPlan(ctx, PlanRequest{MethodKey: d.Key, Target: methods.Kcat, Profile: d.Profile, SeqIDs: ids, SeqIDToSeq: m, Verify: true})
	if err != nil {
		t.Fatal(err)
	}
	if p.NeedComputation != 1 || p.Integrity == nil || len(p.Integrity.Bad) != 1 {
		t.Fatalf("truncated file: need %d, bad %+v", p.NeedComputation, p.Integrity.Bad)
	}
	if q := p.Integrity.Bad[0].Quarantined; !strings.HasPrefix(q, QuarantineDir+"/esm1b_turnup/"+ids[0]+".npy.") {
		t.Fatalf("quarantined at %s", q)
	}
	f, _ := FamilyByName(FamilyESM1bMethodD)
	if q, _ := l.Quarantined(f); len(q) != 1 {
		t.Fatalf("Quarantined: %v", q)
	}
	// A method's read of the files is checked against the records there.
	paths := p.ExpectedPathsBySeq[ids[1]]
	if ch := l.ChangedSinceCheck(paths); len(ch) != 0 {
		t.Fatalf("changed since check: %v", ch)
	}
}
