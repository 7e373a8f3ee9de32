package cacheadmin

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/provenance"
)

// standInEnv, set in a child's environment, turns the test binary into a
// stand-in one-shot step program: an independent process that writes what
// the configured model writes (here: internal/embedding's deterministic
// artefact of each family and sequence), and answers the fingerprint
// question.
const standInEnv = "KINFLOW_TEST_STANDIN_STEP"

func TestMain(m *testing.M) {
	if os.Getenv(standInEnv) == "1" {
		os.Exit(standIn(os.Args[1:]))
	}
	os.Exit(m.Run())
}

func standIn(args []string) int {
	if os.Getenv(embedjob.EnvFingerprintOnly) == "1" {
		fmt.Println(`{"fingerprint": {"model": "stand-in", "weights": {"w.pt": "5eed"}, "precision": "fp32", "program": "stand-in", "program_version": "1"}}`)
		return 0
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var m embedjob.Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	for _, s := range m.Seqs {
		for _, p := range s.MissingOutputs {
			rel, _ := filepath.Rel(filepath.Join(m.MediaRoot, "sequence_info"), filepath.Dir(p))
			// The folder's family comes from the manifest (the host's
			// folder naming), as a step program must take it.
			name := filepath.ToSlash(rel)
			if n, ok := m.Folders[name]; ok {
				name = n
			}
			f, ok := embedding.FamilyByName(name)
			if !ok {
				fmt.Fprintln(os.Stderr, "unknown family", rel)
				return 1
			}
			body, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, s.Sequence))
			if err := fsutil.WriteFileAtomic(p, body, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
	}
	return 0
}

const famH = embedding.FamilyESM2LayerLastMean

type fixture struct {
	l    *embedding.Layout
	seqs map[string]string
	ids  []string
}

func newFixture(t *testing.T, n int) *fixture {
	t.Helper()
	l, err := embedding.NewLayout(filepath.Join(t.TempDir(), "media"), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	fx := &fixture{l: l, seqs: map[string]string{}}
	for i := 0; i < n; i++ {
		seq := "MKT" + strings.Repeat("ACDEFGHIKLMNPQRSTVWY"[i%20:i%20+1], 5+i)
		sid := embedding.BaseSeqID(seq)
		fx.seqs[sid] = seq
		fx.ids = append(fx.ids, sid)
	}
	return fx
}

// writeIndependently writes family's files as another writer would (the
// reference's workers): the model's values, no record, no manifest.
func (fx *fixture) writeIndependently(t *testing.T, family string, ids []string) {
	t.Helper()
	f, _ := embedding.FamilyByName(family)
	if err := os.MkdirAll(fx.l.FamilyDir(f), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sid := range ids {
		body, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, fx.seqs[sid]))
		if err := os.WriteFile(filepath.Join(fx.l.FamilyDir(f), sid+f.Suffix()), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// plant overwrites sid's file with another sequence's vector: well formed,
// right shape, wrong values.
func (fx *fixture) plant(t *testing.T, family, sid, other string) {
	t.Helper()
	f, _ := embedding.FamilyByName(family)
	body, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, fx.seqs[other]))
	if err := os.WriteFile(filepath.Join(fx.l.FamilyDir(f), sid+f.Suffix()), body, 0o644); err != nil {
		t.Fatal(err)
	}
}

func (fx *fixture) lookup(_ context.Context, ids []string) (map[string]string, error) {
	out := map[string]string{}
	for _, id := range ids {
		if s, ok := fx.seqs[id]; ok {
			out[id] = s
		}
	}
	return out, nil
}

// commandVerifier configures the stand-in as the step program of method H's
// step (one-shot, with a fingerprint command).
func (fx *fixture) commandVerifier(t *testing.T) *Verifier {
	step := "methodh_esm2_last_mean"
	st := &embedjob.Settings{
		Commands:     map[string][]string{step: {os.Args[0], "{manifest_file}"}},
		Servers:      map[string][]string{},
		Fingerprints: map[string][]string{step: {os.Args[0]}},
		ToksPerBatch: 100000, StepToksPerBatch: map[string]int{}, MaxResidues: map[string]int{},
		ScratchDir: filepath.Join(t.TempDir(), "scratch"),
		ProgramEnv: append(os.Environ(), standInEnv+"=1"),
	}
	return &Verifier{Layout: fx.l, Settings: st, Executor: "command", Sequences: fx.lookup, Seed: 1, Log: t.Logf}
}

// TestVerifyFindsAPlantedFile: a recomputed sample finds the one file whose
// values are another sequence's, with the configured (stand-in) program.
func TestVerifyFindsAPlantedFile(t *testing.T) {
	fx := newFixture(t, 5)
	fx.writeIndependently(t, famH, fx.ids)
	fx.plant(t, famH, fx.ids[2], fx.ids[3])
	v := fx.commandVerifier(t)
	res, err := v.Verify(context.Background(), famH, 5)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checked != 5 || res.Failed != 1 || !strings.HasPrefix(res.Failures[0], fx.ids[2]+": cosine") {
		t.Fatalf("verify: %+v", res)
	}
	// Adopt refuses a family that fails its verify, and records nothing.
	if _, err := v.Adopt(context.Background(), famH, 5); err == nil || !strings.Contains(err.Error(), "not adopted") {
		t.Fatalf("adopt of a poisoned family: %v", err)
	}
	f, _ := embedding.FamilyByName(famH)
	if rec, _ := provenance.ReadRecorded(fx.l.FamilyDir(f)); rec != nil {
		t.Fatalf("a refused adopt recorded %+v", rec)
	}
	// The synthetic executor as the configured program finds it too.
	v.Executor = "synthetic"
	if res, err := v.Verify(context.Background(), famH, 5); err != nil || res.Failed != 1 {
		t.Fatalf("synthetic executor: %+v %v", res, err)
	}
}

// TestAdoptAcceptsAnIndependentWriterOfTheSameModel: files of unknown
// origin made by another writer of the same model pass the verify and are
// taken under the configured fingerprint; status then says real.
func TestAdoptAcceptsAnIndependentWriterOfTheSameModel(t *testing.T) {
	fx := newFixture(t, 4)
	fx.writeIndependently(t, famH, fx.ids)
	st, err := Status(fx.l)
	if err != nil || len(st) != 1 || st[0].Origin() != "unverified" || st[0].Unverified != 4 {
		t.Fatalf("status before: %+v %v", st, err)
	}
	v := fx.commandVerifier(t)
	res, err := v.Adopt(context.Background(), famH, 3)
	if err != nil || res.Checked != 3 || res.Failed != 0 {
		t.Fatalf("adopt: %+v %v", res, err)
	}
	f, _ := embedding.FamilyByName(famH)
	rec, err := provenance.ReadRecorded(fx.l.FamilyDir(f))
	if err != nil || rec == nil || rec.Adopted == nil || rec.Fingerprint.Model != "stand-in" || rec.Unverified {
		t.Fatalf("record %+v %v", rec, err)
	}
	st, _ = Status(fx.l)
	if st[0].Origin() != "real" || st[0].Fingerprint != rec.ID || st[0].Bytes == 0 {
		t.Fatalf("status after: %+v", st)
	}
	// The same program now writes into the family without a refusal.
	if v, err := provenance.Admit(fx.l.FamilyDir(f), famH, rec.Fingerprint); err != nil || v != provenance.Equal {
		t.Fatalf("admit after adopt: %v %v", v, err)
	}
}

// TestPurge: --synthetic removes only the synthetic files of a mixed
// family; a full purge removes the rest, the manifest and the record.
func TestPurge(t *testing.T) {
	fx := newFixture(t, 4)
	ctx := context.Background()
	if _, err := embedding.ComputeStep(ctx, fx.l, "methodh_esm2_last_mean", fx.ids[:2], fx.seqs, nil); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	real := provenance.Fingerprint{Model: "esm2", Weights: map[string]string{"w": "1"}}
	if _, err := provenance.Admit(dir, famH, real); err != nil {
		t.Fatal(err)
	}
	fx.writeIndependently(t, famH, fx.ids[2:])
	st, _ := Status(fx.l)
	if st[0].Files != 4 || st[0].Synthetic != 2 || st[0].Origin() != "mixed" {
		t.Fatalf("status mixed: %+v", st)
	}
	res, err := Purge(fx.l, famH, true)
	if err != nil || res.Removed != 2 {
		t.Fatalf("purge --synthetic: %+v %v", res, err)
	}
	st, _ = Status(fx.l)
	if st[0].Files != 2 || st[0].Synthetic != 0 || st[0].Origin() != "real" {
		t.Fatalf("status after purge --synthetic: %+v", st)
	}
	res, err = Purge(fx.l, famH, false)
	if err != nil || res.Removed != 2 || !res.RecordRemoved {
		t.Fatalf("purge: %+v %v", res, err)
	}
	if st, _ := Status(fx.l); len(st) != 0 {
		t.Fatalf("status after purge: %+v", st)
	}
	if _, err := Purge(fx.l, "no/such", false); err == nil {
		t.Fatal("unknown family purged")
	}
}

// TestPurgeSyntheticKeepsThePerFileFlagRead: a synthetic writer admitted
// before `purge --synthetic` (its check saw the record's flag and took no
// lock) commits its file and manifest entry after the purge: the file is
// still seen as synthetic, never as the recorded real model's.
func TestPurgeSyntheticKeepsThePerFileFlagRead(t *testing.T) {
	fx := newFixture(t, 3)
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	real := provenance.Fingerprint{Model: "esm2", Weights: map[string]string{"w": "1"}}
	if _, err := provenance.Admit(dir, famH, real); err != nil {
		t.Fatal(err)
	}
	fx.writeIndependently(t, famH, fx.ids[:1])
	// The synthetic writer's check, before the purge.
	if _, err := provenance.Admit(dir, famH, provenance.Synthetic("methodh_esm2_last_mean")); err != nil {
		t.Fatal(err)
	}
	if _, err := Purge(fx.l, famH, true); err != nil {
		t.Fatal(err)
	}
	// ... and its write, after it.
	sid := fx.ids[1]
	fx.writeIndependently(t, famH, []string{sid})
	if err := embedding.MergeManifest(dir, []embedding.Commit{{SeqID: sid, Suffix: f.Suffix(), Bytes: 1, Synthetic: true}}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := Status(fx.l)
	if len(st) != 1 || st[0].Files != 2 || st[0].Synthetic != 1 {
		t.Fatalf("the late synthetic file is taken for a real one: %+v", st)
	}
	p, err := fx.l.BuildPlan(context.Background(), embedding.PlanRequest{MethodKey: "H", Profile: methods.ProfileMethodHESM2LastMean, Target: methods.Kcat, SeqIDs: []string{sid}, SeqIDToSeq: fx.seqs, RealOnly: true})
	if err != nil || p.SyntheticIgnored != 1 {
		t.Fatalf("a real plan counts the late synthetic file: %+v %v", p, err)
	}
}

// TestAdoptKeepsThePerFileFlagRead: a synthetic writer admitted before an
// adopt (the family then had a synthetic record) commits its file and
// manifest entry after it: the file is still seen as synthetic.
func TestAdoptKeepsThePerFileFlagRead(t *testing.T) {
	fx := newFixture(t, 5)
	fx.writeIndependently(t, famH, fx.ids[:4])
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	if _, err := provenance.Admit(dir, famH, provenance.Synthetic("methodh_esm2_last_mean")); err != nil {
		t.Fatal(err)
	}
	if _, err := fx.commandVerifier(t).Adopt(context.Background(), famH, 2); err != nil {
		t.Fatal(err)
	}
	sid := fx.ids[4]
	fx.writeIndependently(t, famH, []string{sid})
	if err := embedding.MergeManifest(dir, []embedding.Commit{{SeqID: sid, Suffix: f.Suffix(), Bytes: 1, Synthetic: true}}, nil); err != nil {
		t.Fatal(err)
	}
	st, _ := Status(fx.l)
	if len(st) != 1 || st[0].Files != 5 || st[0].Synthetic != 1 {
		t.Fatalf("the late synthetic file is taken for a real one: %+v", st)
	}
}

// TestVerifyFindsAScaledFile: a file whose vector points the right way but
// is twice as long (a sum stored where the family holds means) has a cosine
// of 1: its length gives it away.
func TestVerifyFindsAScaledFile(t *testing.T) {
	fx := newFixture(t, 3)
	fx.writeIndependently(t, famH, fx.ids)
	f, _ := embedding.FamilyByName(famH)
	path := filepath.Join(fx.l.FamilyDir(f), fx.ids[1]+f.Suffix())
	tn := embedding.SyntheticArtefact(f, fx.seqs[fx.ids[1]])
	for i := range tn.Data {
		tn.Data[i] *= 2
	}
	body, _ := embedding.EncodeArtefact(f.Format, tn)
	if err := os.WriteFile(path, body, 0o644); err != nil {
		t.Fatal(err)
	}
	res, err := fx.commandVerifier(t).Verify(context.Background(), famH, 3)
	if err != nil {
		t.Fatal(err)
	}
	if res.Checked != 3 || res.Failed != 1 || !strings.HasPrefix(res.Failures[0], fx.ids[1]+": length differs") {
		t.Fatalf("verify: %+v", res)
	}
}

// TestPurgeWaitsForTheFamilyLock: a purge does not run while a writer holds
// the family's record lock (its check-and-record), and runs once it is let go.
func TestPurgeWaitsForTheFamilyLock(t *testing.T) {
	fx := newFixture(t, 2)
	fx.writeIndependently(t, famH, fx.ids)
	f, _ := embedding.FamilyByName(famH)
	unlock, err := provenance.LockFamily(fx.l.FamilyDir(f))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan PurgeResult, 1)
	go func() {
		res, err := Purge(fx.l, famH, false)
		if err != nil {
			t.Error(err)
		}
		done <- res
	}()
	select {
	case res := <-done:
		t.Fatalf("purge ran under the writer's lock: %+v", res)
	case <-time.After(300 * time.Millisecond):
	}
	unlock()
	select {
	case res := <-done:
		if res.Removed != 2 {
			t.Fatalf("purge after the lock: %+v", res)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("purge never ran after the lock was let go")
	}
}

// TestAdoptRefusesAnUncheckedSample: files whose sequences the seq map does
// not know cannot be recomputed, so nothing was verified and nothing is adopted.
func TestAdoptRefusesAnUncheckedSample(t *testing.T) {
	fx := newFixture(t, 3)
	fx.writeIndependently(t, famH, fx.ids)
	fx.seqs = map[string]string{} // the seq map knows none of them
	res, err := fx.commandVerifier(t).Adopt(context.Background(), famH, 3)
	if err == nil || res.Checked != 0 {
		t.Fatalf("adopt of an unchecked sample: %+v %v", res, err)
	}
	f, _ := embedding.FamilyByName(famH)
	if rec, _ := provenance.ReadRecorded(fx.l.FamilyDir(f)); rec != nil {
		t.Fatalf("a record was written: %+v", rec)
	}
}

// TestStatusVerifyRepairOnAFamilyOfTwoSteps: status, verify and repair on
// prot_t5_last/mean_vecs, which methoda_t5_full and prot_t5_mean both
// write, on a host that has a program for prot_t5_mean only: verify hashes
// and records every file; a same-shape overwrite and a truncation show as
// mismatched in status; repair sets both aside (never deletes them) and
// recomputes them with the one configured program.
func TestStatusVerifyRepairOnAFamilyOfTwoSteps(t *testing.T) {
	const fam = embedding.FamilyProtT5LastMean
	fx := newFixture(t, 5)
	fx.writeIndependently(t, fam, fx.ids)
	v := fx.commandVerifier(t)
	step := "prot_t5_mean"
	v.Settings.Commands = map[string][]string{step: {os.Args[0], "{manifest_file}"}}
	v.Settings.Fingerprints = map[string][]string{step: {os.Args[0]}}
	status := func() FamilyStatus {
		t.Helper()
		st, err := Status(fx.l)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Family == fam {
				return s
			}
		}
		t.Fatalf("no status line for %s: %+v", fam, st)
		return FamilyStatus{}
	}
	if s := status(); s.Files != 5 || s.Unhashed != 5 || s.Mismatched != 0 || s.Quarantined != 0 {
		t.Fatalf("before verify: %+v", s)
	}
	// Files without a record: verify lists them (a failure for the
	// command), leaves them in place and records nothing.
	res, err := v.Verify(context.Background(), fam, 2)
	if err != nil {
		t.Fatal(err)
	}
	if res.Step != step || len(res.Integrity.Unrecorded) != 5 || res.Integrity.Recorded != 0 || len(res.Integrity.Bad) != 0 || res.Checked != 2 || res.Failed != 0 {
		t.Fatalf("verify: %+v", res)
	}
	if s := status(); s.Unhashed != 5 || s.Files != 5 {
		t.Fatalf("after verify: %+v", s)
	}
	// Only an adopt takes them: its sample passes, all five are recorded.
	if res, err = v.Adopt(context.Background(), fam, 2); err != nil || res.Adopted != 5 || len(res.Integrity.Unrecorded) != 0 {
		t.Fatalf("adopt: %+v %v", res, err)
	}
	if s := status(); s.Unhashed != 0 || s.Mismatched != 0 {
		t.Fatalf("after adopt: %+v", s)
	}
	fx.plant(t, fam, fx.ids[1], fx.ids[0])
	f, _ := embedding.FamilyByName(fam)
	if err := os.Truncate(filepath.Join(fx.l.FamilyDir(f), fx.ids[2]+f.Suffix()), 2112); err != nil {
		t.Fatal(err)
	}
	// A later mtime whatever the clock's granularity.
	later := time.Now().Add(time.Minute)
	_ = os.Chtimes(filepath.Join(fx.l.FamilyDir(f), fx.ids[1]+f.Suffix()), later, later)
	if s := status(); s.Mismatched != 2 {
		t.Fatalf("after the damage: %+v", s)
	}
	rep, err := v.Repair(context.Background(), fam)
	if err != nil {
		t.Fatal(err)
	}
	if rep.Step != step || len(rep.Integrity.Bad) != 2 || rep.Recomputed != 2 || len(rep.Failures) != 0 {
		t.Fatalf("repair: %+v", rep)
	}
	if s := status(); s.Files != 5 || s.Mismatched != 0 || s.Quarantined != 2 || s.Unhashed != 0 {
		t.Fatalf("after repair: %+v", s)
	}
	for _, sid := range fx.ids[1:3] {
		got, err := os.ReadFile(filepath.Join(fx.l.FamilyDir(f), sid+f.Suffix()))
		want, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, fx.seqs[sid]))
		if err != nil || string(got) != string(want) {
			t.Fatalf("%s not restored: %v", sid, err)
		}
	}
	// A second repair finds nothing to do.
	if rep, err := v.Repair(context.Background(), fam); err != nil || len(rep.Integrity.Bad) != 0 || rep.Recomputed != 0 {
		t.Fatalf("second repair: %+v %v", rep, err)
	}
	// No program for either step: a clear refusal naming both.
	v.Settings.Commands, v.Settings.Fingerprints = map[string][]string{}, map[string][]string{}
	if _, err := v.Verify(context.Background(), fam, 1); err == nil || !strings.Contains(err.Error(), "methoda_t5_full, prot_t5_mean") {
		t.Fatalf("no program: %v", err)
	}
}

// TestOldFormatRecordsAreNotMismatches: records an older kinflow wrote (a
// hash, size and mtime; no ctime_ns, no ino) of unchanged files count as
// old-format in Status, not as mismatched; one whose file was touched since
// stays mismatched. Verify hashes both, finds them whole and records them
// anew, after which neither count holds them.
func TestOldFormatRecordsAreNotMismatches(t *testing.T) {
	fx := newFixture(t, 3)
	fx.writeIndependently(t, famH, fx.ids)
	v := fx.commandVerifier(t)
	if _, err := v.Adopt(context.Background(), famH, 3); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	mpath := filepath.Join(dir, embedding.ManifestName)
	raw, err := os.ReadFile(mpath)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber() // nanosecond times do not fit a float64
	if err := dec.Decode(&m); err != nil {
		t.Fatal(err)
	}
	for _, sid := range fx.ids[:2] {
		e := m["entries"].(map[string]any)[sid].(map[string]any)
		delete(e, "ino")
		delete(e, "ctime_ns")
	}
	if raw, err = json.Marshal(m); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(mpath, raw, 0o644); err != nil {
		t.Fatal(err)
	}
	later := time.Now().Add(time.Minute)
	if err := os.Chtimes(filepath.Join(dir, fx.ids[1]+f.Suffix()), later, later); err != nil {
		t.Fatal(err)
	}
	status := func() FamilyStatus {
		t.Helper()
		st, err := Status(fx.l)
		if err != nil {
			t.Fatal(err)
		}
		for _, s := range st {
			if s.Family == famH {
				return s
			}
		}
		t.Fatalf("no status line for %s: %+v", famH, st)
		return FamilyStatus{}
	}
	if s := status(); s.OldFormat != 1 || s.Mismatched != 1 || s.Unhashed != 0 || s.Files != 3 {
		t.Fatalf("with one old-format record and one touched file: %+v", s)
	}
	res, err := v.Verify(context.Background(), famH, 1)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Integrity.Bad) != 0 || res.Integrity.Recorded != 2 {
		t.Fatalf("verify: %+v", res.Integrity)
	}
	if s := status(); s.OldFormat != 0 || s.Mismatched != 0 || s.Quarantined != 0 {
		t.Fatalf("after verify: %+v", s)
	}
	for _, sid := range fx.ids[:2] {
		if r := embedding.ReadFileRecords(dir)[sid]; r.OldFormat() || r.CtimeNs == 0 || r.Ino == 0 {
			t.Fatalf("record of %s after verify: %+v", sid, r)
		}
	}
}

// TestAdoptSignsRecordsWrittenBeforeTheKey: records written before the
// record key was set carry no code and, with the key, are not believed (a
// plan sets their files aside as unsigned); `kinflow cache adopt`, run once
// after setting the key, checks a recomputed sample and records every file
// whose bytes still match its record with a code: the next plan is a stat
// per file.
func TestAdoptSignsRecordsWrittenBeforeTheKey(t *testing.T) {
	fx := newFixture(t, 4)
	fx.writeIndependently(t, famH, fx.ids)
	v := fx.commandVerifier(t)
	if _, err := v.Adopt(context.Background(), famH, 2); err != nil {
		t.Fatal(err)
	}
	f, _ := embedding.FamilyByName(famH)
	dir := fx.l.FamilyDir(f)
	for sid, e := range embedding.ReadManifest(dir) {
		if e.MAC != "" || e.SHA256 == "" {
			t.Fatalf("%s recorded without a key: %+v", sid, e)
		}
	}
	embedding.SetRecordKey([]byte("a record key set after the cache was written"))
	t.Cleanup(func() { embedding.SetRecordKey(nil) })
	res, err := v.Adopt(context.Background(), famH, 2)
	if err != nil || res.Adopted != 4 {
		t.Fatalf("adopt with the key: %+v %v", res, err)
	}
	for sid, e := range embedding.ReadManifest(dir) {
		if e.MAC == "" {
			t.Fatalf("%s not recorded with a code: %+v", sid, e)
		}
	}
	p, err := fx.l.BuildPlan(context.Background(), embedding.PlanRequest{MethodKey: "H", Profile: methods.ProfileMethodHESM2LastMean,
		Target: methods.Kcat, SeqIDs: fx.ids, SeqIDToSeq: fx.seqs, Verify: true})
	if err != nil || !p.Complete() || p.Integrity.Hashed != 0 || len(p.Integrity.Bad) != 0 {
		t.Fatalf("plan after adopt: %+v %v", p.Integrity, err)
	}
}

// TestAdoptAReferenceNamedFolder: with KINFLOW_CACHE_FOLDERS=reference an
// operator's existing reference cache (sequence_info/esm1b_turnup/<id>.npy,
// no records) is adopted by family name or by its folder: the sample is
// recomputed into the scratch root's esm1b_turnup/, every file is recorded
// where it lies, and the kinflow folder stays untouched.
func TestAdoptAReferenceNamedFolder(t *testing.T) {
	fx := newFixture(t, 4)
	fx.l.Folders = embedding.FoldersReference
	f, _ := embedding.FamilyByName(embedding.FamilyESM1bMethodD)
	dir := filepath.Join(fx.l.MediaRoot, "sequence_info", "esm1b_turnup")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, sid := range fx.ids {
		body, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, fx.seqs[sid]))
		if err := os.WriteFile(filepath.Join(dir, sid+".npy"), body, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	v := fx.commandVerifier(t)
	step := "methodd_esm1b"
	v.Settings.Commands = map[string][]string{step: {os.Args[0], "{manifest_file}"}}
	v.Settings.Fingerprints = map[string][]string{step: {os.Args[0]}}
	if got, err := FamilyByName(fx.l, "esm1b_turnup"); err != nil || got.Name != embedding.FamilyESM1bMethodD {
		t.Fatalf("family by its reference folder: %+v %v", got, err)
	}
	res, err := v.Adopt(context.Background(), "esm1b_turnup", 2)
	if err != nil || res.Step != step || res.Checked != 2 || res.Failed != 0 || res.Adopted != 4 {
		t.Fatalf("adopt: %+v %v", res, err)
	}
	if recs := embedding.ReadFileRecords(dir); len(recs) != 4 {
		t.Fatalf("records under esm1b_turnup: %d", len(recs))
	}
	if rec, err := provenance.ReadRecorded(dir); err != nil || rec == nil || rec.Adopted == nil || rec.Fingerprint.Model != "stand-in" {
		t.Fatalf("provenance record: %+v %v", rec, err)
	}
	if _, err := os.Stat(filepath.Join(fx.l.MediaRoot, "sequence_info", embedding.FamilyESM1bMethodD)); !os.IsNotExist(err) {
		t.Fatalf("the kinflow folder was made: %v", err)
	}
	st, err := Status(fx.l)
	if err != nil || len(st) != 1 || st[0].Family != embedding.FamilyESM1bMethodD || st[0].Files != 4 || st[0].Origin() != "real" {
		t.Fatalf("status: %+v %v", st, err)
	}
}
