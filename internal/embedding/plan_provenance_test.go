package embedding

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/provenance"
)

// A real engine's plan counts synthetic files as missing; a synthetic
// engine's plan counts them and says so; files without a record are
// unverified; a real writer's files in the same family count again.
func TestPlanSyntheticFilesAndOrigins(t *testing.T) {
	l := newLayout(t)
	ids, m := testSeqs(3)
	d, _ := methods.Default().Get("B")
	ctx := context.Background()
	req := PlanRequest{MethodKey: d.Key, Target: methods.Kcat, Profile: d.Profile, SeqIDs: ids, SeqIDToSeq: m}
	p0, err := l.BuildPlan(ctx, req)
	if err != nil {
		t.Fatal(err)
	}
	work := p0.StepWork()
	if _, err := computeStepWork(ctx, l, work, m, nil); err != nil {
		t.Fatal(err)
	}
	synth, err := l.BuildPlan(ctx, req)
	if err != nil || !synth.Complete() || !synth.SyntheticUsed || len(synth.Unverified) != 0 {
		t.Fatalf("synthetic engine's plan: %+v %v", synth, err)
	}
	for fam, id := range synth.Families {
		if len(id) < 10 || id[:10] != "synthetic-" {
			t.Errorf("family %s: id %q", fam, id)
		}
	}
	req.RealOnly = true
	real, err := l.BuildPlan(ctx, req)
	if err != nil || real.Complete() || real.CachedAlready != 0 || real.SyntheticIgnored != real.Total || real.SyntheticUsed {
		t.Fatalf("real engine's plan must see nothing cached: %+v %v", real, err)
	}

	// A real writer takes the family over and rewrites the first id.
	sp := real.StepPlans[0]
	fam, _ := FamilyByName(FamilyProtT5LastMean)
	if len(sp.RequiredPathsBySeq[ids[0]]) != 1 {
		t.Fatalf("method B writes one family: %v", sp.RequiredPathsBySeq)
	}
	dir := l.FamilyDir(fam)
	fp := provenance.Fingerprint{Model: "prot_t5_xl_uniref50", Weights: map[string]string{"pytorch_model.bin": "00"}}
	if v, err := provenance.Admit(dir, fam.Name, fp); err != nil || v != provenance.SyntheticRecorded {
		t.Fatalf("admit: %v %v", v, err)
	}
	data, _ := EncodeArtefact(fam.Format, SyntheticArtefact(fam, m[ids[0]]))
	if err := os.WriteFile(sp.RequiredPathsBySeq[ids[0]][0], data, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := MergeManifest(dir, []Commit{{SeqID: ids[0], Suffix: fam.Suffix(), Bytes: int64(len(data))}}, nil); err != nil {
		t.Fatal(err)
	}
	real, err = l.BuildPlan(ctx, req)
	if err != nil || real.CachedAlready != 1 || real.SyntheticIgnored != 2 {
		t.Fatalf("after one real file: cached %d ignored %d %v", real.CachedAlready, real.SyntheticIgnored, err)
	}
	if real.Families[fam.Name] != fp.ForFamily(fam.Name).ID() {
		t.Fatalf("families %v", real.Families)
	}

	// Files of unknown origin (the reference's cache: no record).
	if err := os.Remove(filepath.Join(dir, provenance.RecordName)); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(filepath.Join(dir, ManifestName)); err != nil {
		t.Fatal(err)
	}
	ref, err := l.BuildPlan(ctx, req)
	if err != nil || !ref.Complete() || !slices.Equal(ref.Unverified, []string{fam.Name}) || ref.Families[fam.Name] != provenance.UnverifiedID {
		t.Fatalf("reference cache: %+v %v", ref, err)
	}
}
