package embedjob

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// TestChangedWeightsRefuseTheFamily: a host whose weights file differs by one
// byte from the one that made a family refuses to write into it, with one
// line naming the family, both fingerprints and the commands that fix it.
func TestChangedWeightsRefuseTheFamily(t *testing.T) {
	f := newFixture(t, 1000)
	weights := filepath.Join(t.TempDir(), "esm1b.pt")
	if err := os.WriteFile(weights, []byte("weights of the first model"), 0o644); err != nil {
		t.Fatal(err)
	}
	host := func() *Engine {
		f.settings.Servers = map[string][]string{testStep: {os.Args[0], "--serve", "weights=" + weights}}
		pool := stepserver.NewPool(stepserver.Options{Max: 1})
		t.Cleanup(pool.Close)
		e := f.engine()
		e.Runner = &CommandRunner{Settings: f.settings, MediaRoot: f.media, Pool: pool}
		return e
	}
	items := f.items(t, 30, 40)
	out, err := host().RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: items[:1]})
	if err != nil || out.Failure != nil || out.Written != 1 {
		t.Fatalf("first host: %+v %v", out, err)
	}
	dir := filepath.Dir(f.path("s00"))
	rec, err := provenance.ReadRecorded(dir)
	if err != nil || rec == nil || rec.Fingerprint.Model != "fake" || rec.AllSynthetic() {
		t.Fatalf("record %+v %v", rec, err)
	}

	// One byte changed: a second host (fresh server) refuses the family.
	b, _ := os.ReadFile(weights)
	b[0] ^= 1
	if err := os.WriteFile(weights, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err = host().RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: items[1:]})
	if err != nil {
		t.Fatal(err)
	}
	var ce *ConfigError
	if !errors.As(out.Failure, &ce) || out.Written != 0 || len(out.Missing) != 1 {
		t.Fatalf("want a refusal, got %+v", out)
	}
	msg := ce.Error()
	for _, want := range []string{"esm1b_methodd", rec.ID, "kinflow cache purge --family esm1b_methodd", "adopt"} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") || strings.Contains(msg, f.media) {
		t.Errorf("want one line without server paths: %q", msg)
	}
	if _, err := os.Stat(f.path("s01")); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the refused host wrote %s", f.path("s01"))
	}
}

// TestRealProgramReplacesSyntheticFiles: synthetic files are never refused:
// a real one-shot program treats them as missing, rewrites them, and the
// manifest no longer flags them.
func TestRealProgramReplacesSyntheticFiles(t *testing.T) {
	f := newFixture(t, 1000)
	weights := filepath.Join(t.TempDir(), "esm1b.pt")
	if err := os.WriteFile(weights, []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.settings.Commands[testStep] = append(f.settings.Commands[testStep], "weights="+weights)
	f.settings.Fingerprints = map[string][]string{testStep: {os.Args[0], "weights=" + weights}}
	items := f.items(t, 30, 40)
	ids := []string{"s00", "s01"}
	seqs := map[string]string{"s00": items[0].Sequence, "s01": items[1].Sequence}
	if _, err := embedding.ComputeStep(context.Background(), f.layout.L, testStep, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(f.path("s00"))
	if rec, _ := provenance.ReadRecorded(dir); !rec.AllSynthetic() {
		t.Fatalf("synthetic record: %+v", rec)
	}
	out := f.run(t, items)
	if out.Failure != nil || out.Written != 2 || out.Skipped != 0 {
		t.Fatalf("real program over synthetic files: %+v", out)
	}
	rec, _ := provenance.ReadRecorded(dir)
	if rec.AllSynthetic() || !rec.SyntheticFiles || rec.Fingerprint.Model != "fake" {
		t.Fatalf("record after the real writer: %+v", rec)
	}
	for sid, e := range embedding.ReadManifest(dir) {
		if e.Synthetic {
			t.Errorf("%s still flagged synthetic", sid)
		}
	}
	// The files are the real program's (zeros), not the synthetic ones (random values).
	fh, err := os.Open(f.path("s00"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	tn, err := embedding.DecodeNPY(fh)
	if err != nil || len(tn.Data) != 1280 || slices.ContainsFunc(tn.Data, func(x float32) bool { return x != 0 }) {
		t.Fatalf("rewritten file: %v %v", err, tn.Shape)
	}
	// A second run has nothing to do.
	if out := f.run(t, items); out.Written != 0 || out.Skipped != 2 {
		t.Fatalf("rerun: %+v", out)
	}
}

// TestOneShotProgramIdentifiedByItsFiles: a one-shot program without a
// fingerprint command is identified by the files its command line names; a
// checkpoint changed by one byte is refused.
func TestOneShotProgramIdentifiedByItsFiles(t *testing.T) {
	f := newFixture(t, 1000)
	ckpt := filepath.Join(t.TempDir(), "model.ckpt")
	if err := os.WriteFile(ckpt, []byte("checkpoint"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.settings.Commands[testStep] = append(f.settings.Commands[testStep], ckpt)
	items := f.items(t, 30, 40)
	if out := f.run(t, items[:1]); out.Failure != nil || out.Written != 1 {
		t.Fatalf("first run: %+v", out)
	}
	rec, _ := provenance.ReadRecorded(filepath.Dir(f.path("s00")))
	if rec == nil || rec.Fingerprint.Model != "unreported" || rec.Fingerprint.Weights["model.ckpt/model.ckpt"] == "" {
		t.Fatalf("record %+v", rec)
	}
	if err := os.WriteFile(ckpt, []byte("checkpoinT"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A distinct mtime whatever the file system's clock granularity (sums
	// are remembered by path, size and mtime).
	later := time.Now().Add(2 * time.Second)
	if err := os.Chtimes(ckpt, later, later); err != nil {
		t.Fatal(err)
	}
	out := f.run(t, items[1:])
	var ce *ConfigError
	if !errors.As(out.Failure, &ce) || out.Written != 0 || !strings.Contains(ce.Error(), rec.ID) {
		t.Fatalf("changed checkpoint: %+v", out)
	}
}

// TestRestartedServerIsCheckedAgain: a resident server that restarts in the
// middle of a step with other weights is refused before its next batch,
// whether its ready line carries a fingerprint ("weights=" argument) or not
// (then it is admitted under its command line's files).
func TestRestartedServerIsCheckedAgain(t *testing.T) {
	for _, tc := range []struct {
		name   string
		weight func(path string) string
	}{
		{"fingerprint in the ready line", func(p string) string { return "weights=" + p }},
		{"no fingerprint: the command line's files", func(p string) string { return p }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, 1000)
			weights := filepath.Join(t.TempDir(), "esm1b.pt")
			if err := os.WriteFile(weights, []byte("weights"), 0o644); err != nil {
				t.Fatal(err)
			}
			f.settings.Servers = map[string][]string{testStep: {os.Args[0], "--serve", tc.weight(weights), "crash", "mutate=" + weights}}
			f.settings.MaxBatchSeqs = 1
			pool := stepserver.NewPool(stepserver.Options{Max: 1})
			t.Cleanup(pool.Close)
			e := f.engine()
			e.Runner = &CommandRunner{Settings: f.settings, MediaRoot: f.media, Pool: pool}
			out, err := e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: f.items(t, 40, 30)})
			if err != nil {
				t.Fatal(err)
			}
			var ce *ConfigError
			if !errors.As(out.Failure, &ce) || !strings.Contains(ce.Error(), "refusing to mix") || out.Written != 1 {
				t.Fatalf("want the first batch written and the second refused: %+v", out)
			}
			if _, err := os.Stat(f.path("s01")); !errors.Is(err, os.ErrNotExist) {
				t.Fatal("the restarted server wrote with other weights")
			}
		})
	}
}

// TestTakeoverFlagsUnlistedSyntheticFiles: a synthetic writer killed between
// renaming a file and merging its manifest entry leaves a file that only the
// family's all-synthetic record calls synthetic. When a real writer takes
// the family over, that file is flagged per file, so a later real run
// replaces it instead of presenting it as the real model's.
func TestTakeoverFlagsUnlistedSyntheticFiles(t *testing.T) {
	f := newFixture(t, 1000)
	weights := filepath.Join(t.TempDir(), "esm1b.pt")
	if err := os.WriteFile(weights, []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.settings.Commands[testStep] = append(f.settings.Commands[testStep], "weights="+weights)
	f.settings.Fingerprints = map[string][]string{testStep: {os.Args[0], "weights=" + weights}}
	items := f.items(t, 30, 40)
	ids := []string{"s00", "s01"}
	seqs := map[string]string{"s00": items[0].Sequence, "s01": items[1].Sequence}
	if _, err := embedding.ComputeStep(context.Background(), f.layout.L, testStep, ids, seqs, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(f.path("s00"))
	// The crash: s01's file is in place, its manifest entry never merged.
	if err := embedding.MergeManifest(dir, nil, []string{"s01"}); err != nil {
		t.Fatal(err)
	}
	if out := f.run(t, items[:1]); out.Failure != nil || out.Written != 1 {
		t.Fatalf("real writer over s00: %+v", out)
	}
	if rec, _ := provenance.ReadRecorded(dir); rec.AllSynthetic() || !rec.SyntheticFiles {
		t.Fatalf("record after the takeover: %+v", rec)
	}
	if e, ok := embedding.ReadManifest(dir)["s01"]; !ok || !e.Synthetic {
		t.Fatalf("s01 not flagged synthetic after the takeover: %+v", e)
	}
	out := f.run(t, items[1:])
	if out.Failure != nil || out.Written != 1 || out.Skipped != 0 {
		t.Fatalf("the unlisted synthetic file was taken as real: %+v", out)
	}
}

// TestFirstRealWriterOverOldSyntheticFiles: a media root from before records
// holds synthetic files flagged only in the manifest. The first real writer
// records the family (unverified) and still has readers read the manifest:
// the synthetic files it did not replace stay synthetic, never the model's.
func TestFirstRealWriterOverOldSyntheticFiles(t *testing.T) {
	f := newFixture(t, 1000)
	weights := filepath.Join(t.TempDir(), "esm1b.pt")
	if err := os.WriteFile(weights, []byte("w"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.settings.Commands[testStep] = append(f.settings.Commands[testStep], "weights="+weights)
	f.settings.Fingerprints = map[string][]string{testStep: {os.Args[0], "weights=" + weights}}
	items := f.items(t, 30, 40)
	seqs := map[string]string{"s00": items[0].Sequence, "s01": items[1].Sequence}
	if _, err := embedding.ComputeStep(context.Background(), f.layout.L, testStep, []string{"s00", "s01"}, seqs, nil); err != nil {
		t.Fatal(err)
	}
	dir := filepath.Dir(f.path("s00"))
	if err := os.Remove(filepath.Join(dir, provenance.RecordName)); err != nil { // an old media root
		t.Fatal(err)
	}
	if out := f.run(t, items[:1]); out.Failure != nil || out.Written != 1 {
		t.Fatalf("first real writer: %+v", out)
	}
	if rec, _ := provenance.ReadRecorded(dir); rec == nil || rec.AllSynthetic() || !rec.SyntheticFiles {
		t.Fatalf("record: %+v", rec)
	}
	out := f.run(t, items[1:])
	if out.Failure != nil || out.Written != 1 || out.Skipped != 0 {
		t.Fatalf("the old synthetic file was taken as real: %+v", out)
	}
}

// TestProgramClaimingSyntheticIsRefused: a configured step program whose
// fingerprint says synthetic is not taken at its word (only kinflow's own
// synthetic executor is synthetic): the step is refused before any write,
// and the family gets no record.
func TestProgramClaimingSyntheticIsRefused(t *testing.T) {
	f := newFixture(t, 1000)
	weights := filepath.Join(t.TempDir(), "esm1b.pt")
	if err := os.WriteFile(weights, []byte("weights"), 0o644); err != nil {
		t.Fatal(err)
	}
	f.settings.Servers = map[string][]string{testStep: {os.Args[0], "--serve", "weights=" + weights, "claim-synthetic"}}
	pool := stepserver.NewPool(stepserver.Options{Max: 1})
	t.Cleanup(pool.Close)
	e := f.engine()
	e.Runner = &CommandRunner{Settings: f.settings, MediaRoot: f.media, Pool: pool}
	out, err := e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: f.items(t, 30)})
	var ce *ConfigError
	if err != nil || !errors.As(out.Failure, &ce) || !strings.Contains(ce.Error(), "reports a synthetic fingerprint") || out.Written != 0 {
		t.Fatalf("want a refusal, got %+v %v", out, err)
	}
	if rec, _ := provenance.ReadRecorded(filepath.Dir(f.path("s00"))); rec != nil {
		t.Fatalf("a refused program recorded %+v", rec)
	}
	if _, err := os.Stat(f.path("s00")); !os.IsNotExist(err) {
		t.Fatalf("a refused program wrote a file: %v", err)
	}
}
