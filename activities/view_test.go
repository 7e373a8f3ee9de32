package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// viewEngine stands in for a reference program that reads each row's
// cached file by its seq_id under <media>/sequence_info/ and answers a
// class index made of the file's bytes. What it does to the files after
// reading them is in $KEEP_DIR/mode: "delete" removes every file it read
// and then its family folder (as methods F, G and I do by default),
// "rewrite" opens each for writing and truncates it, anything else leaves
// them. It records the paths it was given in $KEEP_DIR/seen.json.
const viewEngine = `import json, os, shutil, sys
a = sys.argv[1:]
media, si = a[a.index("--media") + 1], a[a.index("--si") + 1]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
keep = os.environ["KEEP_DIR"]
mode = open(os.path.join(keep, "mode")).read().strip() if os.path.exists(os.path.join(keep, "mode")) else ""
job = json.load(open(inp))
fam = os.path.join(si, "esm2_layer_last_mean")
manifest = os.path.exists(os.path.join(fam, "manifest.json"))
preds, read = [], []
for r in job["rows"]:
    p = os.path.join(fam, r["seq_id"] + ".npy")
    data = open(p, "rb").read()
    read.append(p)
    preds.append(sum(data) % 8)
for p in read:
    if mode == "delete" and os.path.exists(p):
        os.remove(p)
    if mode == "rewrite":
        with open(p, "wb") as f:
            f.write(b"not an array any more")
if mode == "delete":
    shutil.rmtree(fam, ignore_errors=True)
json.dump({"media": media, "si": si, "seqmap": os.path.exists(os.path.join(media, "sequence_info", "seqmap.sqlite3")), "manifest": manifest},
          open(os.path.join(keep, "seen.json"), "w"))
json.dump({"predictions": preds}, open(out, "w"))
`

// viewHarness is a predict harness with a Layout whose method H runs
// viewEngine, and the job ids it planned, each with its cached files
// computed (synthetic, recorded).
type viewHarness struct {
	*predictHarness
	layout *embedding.Layout
	s      *store.Store
}

func newViewHarness(t *testing.T, s *store.Store) *viewHarness {
	t.Helper()
	script := filepath.Join(t.TempDir(), "view.py")
	if err := os.WriteFile(script, []byte(viewEngine), 0o644); err != nil {
		t.Fatal(err)
	}
	keep := t.TempDir()
	cmd := fmt.Sprintf(`{python: %s, script: %s, argv: ["{python}", "{script}", "--media", "{media}", "--si", "{sequence_info}", "--input", "{input}", "--output", "{output}"], extra_env: {KEEP_DIR: %s}}`,
		python(t), script, keep)
	h := newPredictHarness(t, s, nil, fmt.Sprintf("  - key: H\n    command: %s\n", cmd))
	h.keep = keep
	layout, err := embedding.NewLayout(h.a.Config.MediaRoot, "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	h.a.Layout = layout
	return &viewHarness{predictHarness: h, layout: layout, s: s}
}

// planned submits job id (method H for kcat over fourRows), plans it and
// computes its files; it returns the plan.
func (h *viewHarness) planned(id string) embedding.Plan {
	h.t.Helper()
	h.submit(id, map[string]string{"kcat": "H"}, true, fourRows)
	return h.compute(id)
}

// compute plans job id's stage 0 and computes the files the plan needs,
// as the stage's embedding phase does; it returns the plan.
func (h *viewHarness) compute(id string) embedding.Plan {
	h.t.Helper()
	if _, err := h.env.ExecuteActivity(h.a.BuildPlan, PlanInput{JobID: id, StageIndex: 0}); err != nil {
		h.t.Fatal(err)
	}
	dir, _ := h.a.stageDir(id, 0)
	var plan embedding.Plan
	if err := fsutil.ReadJSON(filepath.Join(dir, jobfiles.PlanFile), &plan); err != nil {
		h.t.Fatal(err)
	}
	if _, err := embedding.ComputeStep(context.Background(), h.layout, methods.StepMethodHESM2LastMean, plan.SeqIDs, plan.SeqIDToSeq, nil); err != nil {
		h.t.Fatal(err)
	}
	return plan
}

func (h *viewHarness) mode(m string) {
	h.t.Helper()
	if err := os.WriteFile(filepath.Join(h.keep, "mode"), []byte(m), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// paths are the plan's files, in the order of fourRows' sequences.
func (h *viewHarness) paths(plan embedding.Plan) []string {
	h.t.Helper()
	sidOf := map[string]string{}
	for sid, seq := range plan.SeqIDToSeq {
		sidOf[seq] = sid
	}
	var out []string
	for _, seq := range []string{"MKTAYIAK", "MKTAY", "MKTAYIAKQRQ", "MKTAYI"} {
		ps := plan.ExpectedPathsBySeq[sidOf[seq]]
		if len(ps) != 1 {
			h.t.Fatalf("%s: planned %v", seq, ps)
		}
		out = append(out, ps[0])
	}
	return out
}

// want is what the stage serves from viewEngine's answers for the files at
// paths: method H's class index converted into its class value. The files
// are the synthetic writer's, so the values are flagged synthetic, but
// they are the program's answers in its declared form all the same.
func (h *viewHarness) want(paths []string) []string {
	h.t.Helper()
	var out []string
	for _, p := range paths {
		data, err := os.ReadFile(p)
		if err != nil {
			h.t.Fatal(err)
		}
		sum := 0
		for _, b := range data {
			sum += int(b)
		}
		d, _ := h.a.Catalogue.Get("H")
		v, bad := d.OutputOf(methods.Kcat).Convert(float64(sum % 8))
		if bad != "" {
			h.t.Fatalf("class %d: %s", sum%8, bad)
		}
		out = append(out, fmt.Sprint(v))
	}
	return out
}

func (h *viewHarness) seen() (media, si string, seqmap, manifest bool) {
	h.t.Helper()
	var s struct {
		Media    string `json:"media"`
		SI       string `json:"si"`
		Seqmap   bool   `json:"seqmap"`
		Manifest bool   `json:"manifest"`
	}
	if err := fsutil.ReadJSON(filepath.Join(h.keep, "seen.json"), &s); err != nil {
		h.t.Fatal(err)
	}
	return s.Media, s.SI, s.Seqmap, s.Manifest
}

func stats(t *testing.T, paths []string) []embedding.FileStat {
	t.Helper()
	out := make([]embedding.FileStat, len(paths))
	for i, p := range paths {
		st, err := embedding.StatFile(p)
		if err != nil {
			t.Fatalf("shared file %s: %v", filepath.Base(p), err)
		}
		out[i] = st
	}
	return out
}

// A program that deletes every cached file it read, and their folder,
// deletes only its view's links: the shared files are untouched (same
// inode, size and times, their records still hold), the view is gone after
// the stage, and another job planned on the same files completes with the
// right values. The program was given the view, never the media root.
func TestProgramDeletingItsFilesLeavesTheSharedCache(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		h := newViewHarness(t, s)
		plan1 := h.planned("jobview01")
		plan2 := h.planned("jobview02")
		paths := h.paths(plan1)
		if p2 := h.paths(plan2); strings.Join(p2, ",") != strings.Join(paths, ",") {
			t.Fatalf("the two jobs planned other files: %v %v", paths, p2)
		}
		want := h.want(paths)
		before := stats(t, paths)

		h.mode("delete")
		p, err := h.predict("jobview01", 0)
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, p, want...)
		media, si, seqmap, manifest := h.seen()
		view, _ := h.a.stageViewDir("jobview01", 0)
		if media != view || si != filepath.Join(view, "sequence_info") || !seqmap || !manifest {
			t.Errorf("program given media %q, sequence_info %q (seqmap there: %v, manifest: %v); want the view %q", media, si, seqmap, manifest, view)
		}
		if _, err := os.Stat(filepath.Join(filepath.Dir(paths[0]), embedding.ManifestName)); err != nil {
			t.Errorf("the shared manifest: %v", err)
		}
		if after := stats(t, paths); fmt.Sprint(after) != fmt.Sprint(before) {
			t.Errorf("shared files changed: before %v, after %v", before, after)
		}
		if ch := h.layout.ChangedSinceCheck(paths); len(ch) != 0 {
			t.Errorf("integrity records no longer hold for %v", ch)
		}
		if _, err := os.Stat(view); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("the view is left after the stage: %v", err)
		}

		h.mode("")
		p, err = h.predict("jobview02", 0)
		if err != nil {
			t.Fatal(err)
		}
		wantValues(t, p, want...)
		if evs, _ := s.GPUPrecomputeEvents(context.Background(), "jobview01", 50); len(evs) != 0 {
			for _, ev := range evs {
				if strings.HasPrefix(ev.Reason, ReasonProgramChangedFiles) {
					t.Errorf("event %+v for a program that changed no shared file", ev)
				}
			}
		}
	})
}

// A program that rewrites the shared files in place (through its view's
// links) is found out. In the stage's first round that looks like any
// writer racing the read: the files are checked again and set aside, and
// the stage asks for a second round with the files computed anew. The
// program rewrites them again there, and then every unit fails with the
// reason and no value, the files are set aside (the next plan computes
// them again), a job event says so, and the stage asks for no third round.
func TestProgramRewritingASharedFileIsDetected(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	h := newViewHarness(t, s)
	plan := h.planned("jobview03")
	paths := h.paths(plan)
	h.mode("rewrite")
	val, err := h.env.ExecuteActivity(h.a.Predict, StageRef{JobID: "jobview03", StageIndex: 0})
	if err != nil {
		t.Fatal(err)
	}
	var first PredictResult
	if err := val.Get(&first); err != nil {
		t.Fatal(err)
	}
	if first.Recheck != len(paths) {
		t.Fatalf("first round: %+v, want a recheck of %d files", first, len(paths))
	}
	h.compute("jobview03")
	p, err := h.predict("jobview03", 0)
	if err != nil {
		t.Fatal(err)
	}
	for i, v := range p.Values {
		if v != nil || p.Reasons[i] != ReasonProgramChangedFile {
			t.Errorf("row %d: value %v, reason %q; want none, %q", i, v, p.Reasons[i], ReasonProgramChangedFile)
		}
	}
	for _, path := range paths {
		if _, err := os.Stat(path); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("rewritten shared file %s still in the cache (%v)", filepath.Base(path), err)
		}
	}
	f, _ := embedding.FamilyByName(embedding.FamilyESM2LayerLastMean)
	if q, err := h.layout.Quarantined(f); err != nil || len(q) < len(paths) {
		t.Errorf("quarantined %v (%v), want at least %d files", q, err, len(paths))
	}
	evs, err := s.GPUPrecomputeEvents(context.Background(), "jobview03", 50)
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, ev := range evs {
		if ev.Reason == fmt.Sprintf("%s:%d", ReasonProgramChangedFiles, len(paths)) {
			found = true
			if strings.Contains(ev.Message, h.a.Config.MediaRoot) {
				t.Errorf("event names a server path: %q", ev.Message)
			}
		}
	}
	if !found {
		t.Errorf("no %s event in %+v", ReasonProgramChangedFiles, evs)
	}
	// The next plan finds the files missing and has them computed again.
	if _, err := h.env.ExecuteActivity(h.a.BuildPlan, PlanInput{JobID: "jobview03", StageIndex: 0, PostCheck: true}); err != nil {
		t.Fatal(err)
	}
	dir, _ := h.a.stageDir("jobview03", 0)
	if _, err := os.Stat(filepath.Join(dir, "work.json")); err != nil {
		t.Errorf("the plan after the rewrite has no work for the set-aside files: %v", err)
	}
}

// Where no link can be made (another file system), the view copies the
// files: the program's deletions reach only its copies, and the values are
// the right ones.
func TestViewCopiesWhereNoLinkCanBeMade(t *testing.T) {
	old := viewLink
	viewLink = func(_, _ string) error { return &os.LinkError{Op: "symlink", Err: syscall.EXDEV} }
	t.Cleanup(func() { viewLink = old })
	s := testenv.OpenStore(t, store.SQLite)
	h := newViewHarness(t, s)
	plan := h.planned("jobview04")
	paths := h.paths(plan)
	want := h.want(paths)
	before := stats(t, paths)
	h.mode("delete")
	p, err := h.predict("jobview04", 0)
	if err != nil {
		t.Fatal(err)
	}
	wantValues(t, p, want...)
	if after := stats(t, paths); fmt.Sprint(after) != fmt.Sprint(before) {
		t.Errorf("shared files changed: before %v, after %v", before, after)
	}
	view, _ := h.a.stageViewDir("jobview04", 0)
	if _, err := os.Stat(view); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the view is left after the stage: %v", err)
	}
}

// Cleanup removes a view left by a worker that died while the program ran.
func TestCleanupRemovesALeftView(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	h := newViewHarness(t, s)
	h.planned("jobview05")
	view, _ := h.a.stageViewDir("jobview05", 0)
	link := filepath.Join(view, "sequence_info", "x.npy")
	if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(t.TempDir(), "shared.npy")
	if err := os.WriteFile(target, []byte("x"), 0o444); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(target, link); err != nil {
		t.Fatal(err)
	}
	if _, err := h.env.ExecuteActivity(h.a.Cleanup, StageRef{JobID: "jobview05", StageIndex: 0}); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(view); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("view left after Cleanup: %v", err)
	}
	if _, err := os.Stat(target); err != nil {
		t.Errorf("Cleanup removed the linked file: %v", err)
	}
}
