package embedding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
)

func newLayout(t testing.TB) *Layout {
	t.Helper()
	l, err := NewLayout(filepath.Join(t.TempDir(), "media"), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	return l
}

// testSeqs returns n distinct sequences with their hash ids.
func testSeqs(n int) ([]string, map[string]string) {
	ids := make([]string, n)
	m := make(map[string]string, n)
	for i := range ids {
		seq := fmt.Sprintf("MKT%sACDE%d", strings.Repeat("W", i%7+1), i)
		ids[i] = BaseSeqID(seq)
		m[ids[i]] = seq
	}
	return ids, m
}

func plan(t *testing.T, l *Layout, d *methods.Descriptor, tg methods.Target, ids []string, m map[string]string) *Plan {
	t.Helper()
	p, err := l.BuildPlan(context.Background(), PlanRequest{MethodKey: d.Key, Target: tg, Profile: d.Profile, SeqIDs: ids, SeqIDToSeq: m})
	if err != nil {
		t.Fatalf("plan %s/%s: %v", d.Key, tg, err)
	}
	return p
}

// checkPlanInvariants checks the relations between a plan's fields.
func checkPlanInvariants(t *testing.T, p *Plan) {
	t.Helper()
	exp, miss := 0, 0
	for _, sid := range p.SeqIDs {
		exp += len(p.ExpectedPathsBySeq[sid])
		miss += len(p.MissingPathsBySeq[sid])
		for _, mp := range p.MissingPathsBySeq[sid] {
			if !slices.Contains(p.ExpectedPathsBySeq[sid], mp) {
				t.Errorf("missing path %s not expected", mp)
			}
			if _, err := os.Stat(mp); err == nil {
				t.Errorf("missing path %s exists", mp)
			}
		}
	}
	if exp != p.Total || miss != p.NeedComputation || p.Total != p.CachedAlready+p.NeedComputation {
		t.Errorf("counts: total %d cached %d need %d; expected %d missing %d", p.Total, p.CachedAlready, p.NeedComputation, exp, miss)
	}
	for sid := range p.MissingPathsBySeq {
		if len(p.MissingPathsBySeq[sid]) == 0 {
			t.Errorf("empty missing entry for %s", sid)
		}
	}
	for _, sp := range p.StepPlans {
		if !slices.IsSorted(sp.MissingSeqIDs) {
			t.Errorf("step %s ids not sorted", sp.StepKey)
		}
		if len(sp.RequiredPathsBySeq) != len(sp.MissingSeqIDs) {
			t.Errorf("step %s: %d required for %d ids", sp.StepKey, len(sp.RequiredPathsBySeq), len(sp.MissingSeqIDs))
		}
	}
}

func stepIDs(p *Plan) map[string][]string {
	out := map[string][]string{}
	for _, sp := range p.StepPlans {
		out[sp.StepKey] = sp.MissingSeqIDs
	}
	return out
}

// TestPlanEveryMethod: for every method and target with a profile, a full
// miss, a cache hit after computing the step work, and a partial miss.
func TestPlanEveryMethod(t *testing.T) {
	cat := methods.Default()
	ctx := context.Background()
	for _, d := range cat.All() {
		for _, tg := range d.Supports {
			t.Run(d.Key+"/"+strings.ReplaceAll(string(tg), "/", "_"), func(t *testing.T) {
				l := newLayout(t)
				ids, m := testSeqs(3)
				if d.Profile == methods.ProfileNone {
					_, err := l.BuildPlan(ctx, PlanRequest{MethodKey: d.Key, Target: tg, Profile: d.Profile, SeqIDs: ids, SeqIDToSeq: m})
					if !errors.Is(err, ErrNoCacheProfile) {
						t.Fatalf("method without profile: %v", err)
					}
					_, err = PlanSequences(ctx, l, nil, d, tg, []string{"MKT"})
					if !errors.Is(err, ErrNoCacheProfile) {
						t.Fatalf("PlanSequences: %v", err)
					}
					return
				}
				// Full miss.
				p := plan(t, l, d, tg, ids, m)
				checkPlanInvariants(t, p)
				if p.Total == 0 || p.CachedAlready != 0 || p.NeedComputation != p.Total {
					t.Fatalf("full miss counts %d/%d/%d", p.Total, p.CachedAlready, p.NeedComputation)
				}
				sorted := slices.Sorted(slices.Values(ids))
				wantSteps := d.StepKeysFor(tg)
				if got := slices.Collect(func(yield func(string) bool) {
					for _, sp := range p.StepPlans {
						if !yield(sp.StepKey) {
							return
						}
					}
				}); !reflect.DeepEqual(got, wantSteps) {
					t.Fatalf("steps %v, want %v", got, wantSteps)
				}
				for _, sp := range p.StepPlans {
					if !reflect.DeepEqual(sp.MissingSeqIDs, sorted) {
						t.Errorf("full miss step %s ids %v", sp.StepKey, sp.MissingSeqIDs)
					}
				}
				if len(p.WatchDirs) == 0 {
					t.Error("no watch dirs")
				}
				// Compute, then a cache hit.
				var seen []string
				n, err := computeStepWork(ctx, l, p.StepWork(), p.WorkSeqIDToSeq(), func(path string) { seen = append(seen, path) })
				if err != nil {
					t.Fatal(err)
				}
				if n != p.NeedComputation || len(seen) != n {
					t.Fatalf("computed %d files (%d reported), need %d", n, len(seen), p.NeedComputation)
				}
				hit := plan(t, l, d, tg, ids, m)
				checkPlanInvariants(t, hit)
				if hit.NeedComputation != 0 || hit.CachedAlready != hit.Total || !hit.Complete() || len(hit.StepWork()) != 0 {
					t.Fatalf("cache hit: %d/%d/%d, work %v", hit.Total, hit.CachedAlready, hit.NeedComputation, hit.StepWork())
				}
				// Partial miss: one file of one id of the last step.
				last := hit.StepPlans[len(hit.StepPlans)-1].StepKey
				spec, _ := l.Step(last)
				victim := ids[1]
				path, _ := l.Path(spec.Families[0], victim)
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				part := plan(t, l, d, tg, ids, m)
				checkPlanInvariants(t, part)
				if part.NeedComputation != 1 || !reflect.DeepEqual(part.MissingPathsBySeq, map[string][]string{victim: {path}}) {
					t.Fatalf("partial miss: need %d, missing %v", part.NeedComputation, part.MissingPathsBySeq)
				}
				if got := part.StepWork(); !reflect.DeepEqual(got, map[string][]string{last: {victim}}) {
					t.Fatalf("partial step work %v", got)
				}
				if !slices.Contains(part.StepPlans[len(part.StepPlans)-1].RequiredPathsBySeq[victim], path) {
					t.Error("required paths lack the missing file")
				}
				if n, err := computeStepWork(ctx, l, part.StepWork(), part.WorkSeqIDToSeq(), nil); err != nil || n != 1 {
					t.Fatalf("recompute: %d %v", n, err)
				}
			})
		}
	}
}

func TestPlanMethodAOneStepMissingPerSequence(t *testing.T) {
	ctx := context.Background()
	l := newLayout(t)
	a, _ := methods.Default().Get("A-H")
	ids, m := testSeqs(5)
	p := plan(t, l, a, methods.Kcat, ids, m)
	if p.Total != 5*12 || p.MissingBindingSites != 5 {
		t.Fatalf("method A: total %d, missing binding sites %d", p.Total, p.MissingBindingSites)
	}
	if _, err := computeStepWork(ctx, l, p.StepWork(), p.SeqIDToSeq, nil); err != nil {
		t.Fatal(err)
	}
	rm := func(family, sid string) {
		f, _ := FamilyByName(family)
		path, _ := l.Path(f, sid)
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}
	}
	// ids[0]: one ESM2 file; ids[1]: one ESMC file; ids[2]: only its
	// binding-site row; ids[3]: one ProtT5 file and its binding-site row;
	// ids[4]: complete.
	rm(FamilyESM2Layer29Weighted, ids[0])
	rm(FamilyESMCLayer24Mean, ids[1])
	rm(FamilyProtT5LastMean, ids[3])
	dropBindingRows(t, l.BindingSiteTable(), ids[2], ids[3])
	p = plan(t, l, a, methods.Kcat, ids, m)
	checkPlanInvariants(t, p)
	want := map[string][]string{
		methods.StepMethodAT5Full:     slices.Sorted(slices.Values([]string{ids[2], ids[3]})),
		methods.StepMethodAESM2Layers: {ids[0]},
		methods.StepMethodAESMCLayers: {ids[1]},
	}
	if got := stepIDs(p); !reflect.DeepEqual(got, want) {
		t.Fatalf("step ids %v, want %v", got, want)
	}
	if p.NeedComputation != 3 || p.MissingBindingSites != 2 {
		t.Errorf("need %d, missing binding sites %d", p.NeedComputation, p.MissingBindingSites)
	}
	// Only the binding-site row missing: no file is missing but work remains.
	if _, ok := p.MissingPathsBySeq[ids[2]]; ok {
		t.Error("binding-site-only id must have no missing files")
	}
	if p.Complete() {
		t.Error("plan with work is complete")
	}
	n, err := computeStepWork(ctx, l, p.StepWork(), p.SeqIDToSeq, nil)
	if err != nil || n != 3 {
		t.Fatalf("compute: %d %v", n, err)
	}
	if p = plan(t, l, a, methods.Kcat, ids, m); !p.Complete() || p.MissingBindingSites != 0 {
		t.Fatalf("after compute: %+v", p.StepWork())
	}
	ids2, _ := BindingSiteIDs(l.BindingSiteTable())
	if len(ids2) != 5 {
		t.Errorf("binding-site table has %d ids", len(ids2))
	}
}

func dropBindingRows(t *testing.T, path string, sids ...string) {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var keep []string
	for _, line := range strings.SplitAfter(string(b), "\n") {
		id, _, _ := strings.Cut(line, "\t")
		if !slices.Contains(sids, id) {
			keep = append(keep, line)
		}
	}
	if err := os.WriteFile(path, []byte(strings.Join(keep, "")), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestPlanMixedCacheState(t *testing.T) {
	ctx := context.Background()
	l := newLayout(t)
	b, _ := methods.Default().Get("B")
	h, _ := methods.Default().Get("H")
	ids, m := testSeqs(4)
	// B's ProtT5 mean exists for ids[0] and ids[1] only (written by an
	// earlier job of method C, which shares the family).
	if _, err := ComputeStep(ctx, l, methods.StepProtT5Mean, ids[:2], m, nil); err != nil {
		t.Fatal(err)
	}
	p := plan(t, l, b, methods.KcatKm, ids, m)
	checkPlanInvariants(t, p)
	if p.Total != 4 || p.CachedAlready != 2 || p.NeedComputation != 2 {
		t.Fatalf("B counts %d/%d/%d", p.Total, p.CachedAlready, p.NeedComputation)
	}
	if got := p.StepWork(); !reflect.DeepEqual(got, map[string][]string{"prot_t5_mean": slices.Sorted(slices.Values(ids[2:]))}) {
		t.Fatalf("B work %v", got)
	}
	if got := p.WorkSeqIDToSeq(); len(got) != 2 || got[ids[2]] != m[ids[2]] {
		t.Errorf("work map %v", got)
	}
	// Method H's family is separate: all missing.
	if p := plan(t, l, h, methods.Km, ids, m); p.NeedComputation != 4 {
		t.Errorf("H need %d", p.NeedComputation)
	}
	// Duplicated ids count once.
	if p := plan(t, l, b, methods.Kcat, append(ids, ids[0]), m); p.Total != 4 || len(p.SeqIDs) != 4 {
		t.Errorf("duplicate ids: total %d", p.Total)
	}
}

func TestPlanMethodETargetSpecific(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	for _, p := range []string{"kcat/fold_0/model_0/model.pt", "kcat/fold_0/model_1/model.pt", "kcat/fold_0/model_1/other.pt",
		"km/fold_1/model_0/model.pt", "km/nested/deeper/fold_2/model_3/model.pt"} {
		full := filepath.Join(root, filepath.FromSlash(p))
		if err := os.MkdirAll(filepath.Dir(full), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(full, []byte("x"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	l, err := NewLayout(filepath.Join(t.TempDir(), "media"), "", root, "")
	if err != nil {
		t.Fatal(err)
	}
	if keys, _ := l.MethodEModelKeys("kcat"); !reflect.DeepEqual(keys, []string{"fold_0__model_0", "fold_0__model_1"}) {
		t.Fatalf("kcat keys %v", keys)
	}
	if keys, _ := l.MethodEModelKeys("km"); !reflect.DeepEqual(keys, []string{"fold_1__model_0", "fold_2__model_3"}) {
		t.Fatalf("km keys %v", keys)
	}
	e, _ := methods.Default().Get("E")
	ids, m := testSeqs(2)
	pk := plan(t, l, e, methods.Kcat, ids, m)
	if got := stepIDs(pk); len(got) != 1 || got["methode_embed_kcat"] == nil {
		t.Fatalf("kcat steps %v", got)
	}
	want := filepath.Join(l.MediaRoot, "sequence_info", "methode_esm2", "kcat", "fold_0__model_1", ids[0]+".pt")
	if !slices.Contains(pk.ExpectedPathsBySeq[ids[0]], want) || pk.Total != 4 {
		t.Fatalf("kcat expected %v", pk.ExpectedPathsBySeq[ids[0]])
	}
	pm := plan(t, l, e, methods.Km, ids, m)
	if got := stepIDs(pm); len(got) != 1 || got["methode_embed_km"] == nil || pm.Total != 4 {
		t.Fatalf("km steps %v total %d", got, pm.Total)
	}
	// Computing kcat fills nothing of km.
	if _, err := computeStepWork(ctx, l, pk.StepWork(), m, nil); err != nil {
		t.Fatal(err)
	}
	if p := plan(t, l, e, methods.Kcat, ids, m); !p.Complete() {
		t.Error("kcat not complete")
	}
	if p := plan(t, l, e, methods.Km, ids, m); p.NeedComputation != 4 {
		t.Errorf("km need %d", p.NeedComputation)
	}
	if _, err := l.BuildPlan(ctx, PlanRequest{MethodKey: "E", Target: methods.KcatKm, Profile: e.Profile, SeqIDs: ids, SeqIDToSeq: m}); err == nil {
		t.Error("method E kcat/Km planned")
	}
	// An empty parameter folder is a plan failure, not an empty plan.
	empty, _ := NewLayout(t.TempDir(), "", t.TempDir(), "")
	if _, err := empty.BuildPlan(ctx, PlanRequest{MethodKey: "E", Target: methods.Kcat, Profile: e.Profile, SeqIDs: ids, SeqIDToSeq: m}); err == nil {
		t.Error("no checkpoints planned")
	}
	// Without a checkpoint root: the synthetic model key.
	syn := newLayout(t)
	p := plan(t, syn, e, methods.Km, ids, m)
	if !strings.Contains(p.ExpectedPathsBySeq[ids[0]][0], "/methode_esm2/km/"+SyntheticMethodEModelKey+"/") {
		t.Errorf("synthetic path %v", p.ExpectedPathsBySeq[ids[0]])
	}
}

func TestPresenceDistrustsManifestAndTempFiles(t *testing.T) {
	ctx := context.Background()
	l := newLayout(t)
	f, _ := methods.Default().Get("F")
	ids, m := testSeqs(4)
	if _, err := ComputeStep(ctx, l, methods.StepMethodFESM1v, ids, m, nil); err != nil {
		t.Fatal(err)
	}
	fam, _ := FamilyByName(FamilyESM1v)
	dir := l.FamilyDir(fam)
	// ids[0]: deleted by the prediction script, its manifest entry left
	// behind (the reference's method F); ids[1]: only a temp file of a
	// writer that died; ids[2]: a folder with the artefact's name.
	p0, _ := l.Path(fam, ids[0])
	p1, _ := l.Path(fam, ids[1])
	p2, _ := l.Path(fam, ids[2])
	for _, p := range []string{p0, p1, p2} {
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "."+ids[1]+".abc123.npy"), []byte("partial"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(p2, 0o755); err != nil {
		t.Fatal(err)
	}
	if e := ReadManifest(dir)[ids[0]]; !e.Ready {
		t.Fatal("test setup: manifest entry should claim ready")
	}
	p := plan(t, l, f, methods.Kcat, ids, m)
	if got := stepIDs(p)["methodf_esm1v"]; !reflect.DeepEqual(got, slices.Sorted(slices.Values(ids[:3]))) {
		t.Fatalf("missing %v", got)
	}
}

func TestSeqIDsThatEscapeTheRoot(t *testing.T) {
	ctx := context.Background()
	l := newLayout(t)
	b, _ := methods.Default().Get("B")
	outside := filepath.Join(filepath.Dir(l.MediaRoot), "pwned")
	for _, bad := range []string{"../../pwned", "../pwned", "/etc/passwd", "..", ".", ".hidden", "a/b", `a\b`, "", "x\x00y"} {
		m := map[string]string{bad: "MKT"}
		if _, err := l.BuildPlan(ctx, PlanRequest{MethodKey: "B", Target: methods.Kcat, Profile: b.Profile, SeqIDs: []string{bad}, SeqIDToSeq: m}); err == nil {
			t.Errorf("plan accepted %q", bad)
		}
		if _, err := ComputeStep(ctx, l, methods.StepProtT5Mean, []string{bad}, m, nil); err == nil {
			t.Errorf("ComputeStep accepted %q", bad)
		}
		if tmp, err := writeArtefactTemp(l.SequenceInfo(), bad, ".npy", []byte("x"), true); err == nil {
			tmp.Discard()
			t.Errorf("writeArtefactTemp accepted %q", bad)
		}
		if _, err := AppendBindingSites(l.BindingSiteTable(), []BindingSiteRow{{SeqID: bad}}); err == nil {
			t.Errorf("AppendBindingSites accepted %q", bad)
		}
		fam, _ := FamilyByName(FamilyProtT5LastMean)
		if _, err := l.Path(fam, bad); err == nil {
			t.Errorf("Path accepted %q", bad)
		}
	}
	if _, err := MethodEFamily("kcat", "../x"); err == nil {
		t.Error("method E model key escaped")
	}
	if _, err := MethodEFamily("../kcat", "m"); err == nil {
		t.Error("method E parameter escaped")
	}
	if _, err := NewLayout(t.TempDir(), "", "", "../up"); err == nil {
		t.Error("binding-site dir outside the media root accepted")
	}
	if _, err := os.Stat(outside); err == nil {
		t.Fatal("something was written outside the media root")
	}
	var found []string
	_ = filepath.Walk(filepath.Dir(l.MediaRoot), func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() && !strings.HasPrefix(p, l.MediaRoot+string(filepath.Separator)) {
			found = append(found, p)
		}
		return nil
	})
	if len(found) > 0 {
		t.Fatalf("files outside the media root: %v", found)
	}
}

func TestDeprecatedStepKeys(t *testing.T) {
	ctx := context.Background()
	l := newLayout(t)
	for _, k := range []string{"methoda_bindsites", "methoda_prott5_layers"} {
		s, err := l.Step(k)
		if err != nil || s.Key != "methoda_t5_full" || !s.BindingSites || len(s.Families) != 4 {
			t.Fatalf("Step(%s) = %+v, %v", k, s, err)
		}
	}
	if _, err := l.Step("methoda_everything"); !errors.Is(err, ErrUnknownStep) {
		t.Errorf("unknown step: %v", err)
	}
	ids, m := testSeqs(2)
	n, err := computeStepWork(ctx, l, map[string][]string{"methoda_bindsites": {ids[0]}, "methoda_prott5_layers": {ids[0], ids[1]}}, m, nil)
	if err != nil || n != 8 {
		t.Fatalf("deprecated step work: %d %v", n, err)
	}
	have, _ := BindingSiteIDs(l.BindingSiteTable())
	if len(have) != 2 {
		t.Errorf("binding-site rows %v", have)
	}
	if _, err := computeStepWork(ctx, l, map[string][]string{"nope": ids}, m, nil); !errors.Is(err, ErrUnknownStep) {
		t.Errorf("unknown step work: %v", err)
	}
}

// computeStepWork runs every step of a plan's sparse step work (Plan.StepWork)
// with the synthetic embedder, in the order of methods.ActiveSteps (so
// methoda_t5_full, which writes the binding-site rows, runs first).
// Deprecated keys are mapped to their replacement.
// The tests fill the cache with it, like the embed job's steps do.
func computeStepWork(ctx context.Context, l *Layout, stepWork map[string][]string, seqIDToSeq map[string]string, onFile func(path string)) (int, error) {
	merged := map[string][]string{}
	for key, ids := range stepWork {
		c, ok := methods.CanonicalStep(key)
		if !ok {
			return 0, fmt.Errorf("%w %q", ErrUnknownStep, key)
		}
		merged[c] = append(merged[c], ids...)
	}
	total := 0
	for _, key := range methods.ActiveSteps() {
		ids, ok := merged[key]
		if !ok {
			continue
		}
		slices.Sort(ids)
		ids = slices.Compact(ids)
		n, err := ComputeStep(ctx, l, key, ids, seqIDToSeq, onFile)
		total += n
		if err != nil {
			return total, err
		}
	}
	return total, nil
}
