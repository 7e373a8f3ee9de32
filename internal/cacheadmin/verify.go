package cacheadmin

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"math"
	mrand "math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// The numerical bounds of a verify: the step programs' own yardstick
// (steps/README.md: every faster mode is proved within these against the
// fp32 reference), so a file within them is one the configured program
// could have written, and a drifted or poisoned file is not.
const (
	// MinCosinePooled is the least cosine similarity between a cached and
	// a recomputed pooled vector.
	MinCosinePooled = 0.9999
	// MinCosineRow is the least cosine similarity of every per-residue row.
	MinCosineRow = 0.999
	// MaxNormDiffPooled and MaxNormDiffRow bound the relative difference of
	// the vectors' lengths: a cosine alone accepts a scaled vector (a sum
	// where the family holds means, a file multiplied by a constant).
	MaxNormDiffPooled = 0.01
	MaxNormDiffRow    = 0.05
)

// DefaultSample is how many files verify and adopt recompute by default.
const DefaultSample = 20

// Verifier recomputes a sample of a family's files with the configured step
// executor and compares them with the cached ones.
type Verifier struct {
	// Layout is the media root's.
	Layout *embedding.Layout
	// Settings are the GPU host's (KINFLOW_GPU_ENV_FILE); Executor is
	// "synthetic" or "command" (KINFLOW_STEP_EXECUTOR).
	Settings *embedjob.Settings
	Executor string
	// Sequences looks sequences up by seq id (the seq map).
	Sequences func(ctx context.Context, ids []string) (map[string]string, error)
	// Seed picks the sample (0: random).
	Seed uint64
	// Log receives one line per file checked (may be nil).
	Log func(format string, args ...any)
}

// VerifyResult is what Verify found.
type VerifyResult struct {
	Family string
	// Step is the step that writes the family.
	Step string
	// Checked files were recomputed and compared; Failed of them differ.
	Checked, Failed int
	// Failures holds one line per failed file.
	Failures []string
	// NoSequence counts sampled ids the seq map does not know (skipped).
	NoSequence int
	// Fingerprint is the configured step program's, for the family.
	Fingerprint provenance.Fingerprint
	// Integrity is the check of every file against its record (each one
	// hashed); its bad files were set aside, as a plan would; the files
	// without a record are listed in Integrity.Unrecorded (a verify
	// fails on them).
	Integrity embedding.Integrity
	// Adopted counts the files without a record that an adopt checked and
	// recorded.
	Adopted int
}

func (v *Verifier) logf(format string, args ...any) {
	if v.Log != nil {
		v.Log(format, args...)
	}
}

// Verify recomputes up to sample of family's real (non-synthetic) files and
// compares them within MinCosinePooled / MinCosineRow; a non-finite value,
// a shape that differs or an unreadable file fails too.
func (v *Verifier) Verify(ctx context.Context, family string, sample int) (VerifyResult, error) {
	return v.verify(ctx, family, sample)
}

// verify is Verify. Files without an integrity record are left in place and
// listed (res.Integrity.Unrecorded): a verify reports them as a failure, an
// adopt checks and records them once its sample passed.
func (v *Verifier) verify(ctx context.Context, family string, sample int) (VerifyResult, error) {
	family = v.familyName(family)
	res := VerifyResult{Family: family}
	if sample < 1 {
		return res, errors.New("the sample must hold at least one file")
	}
	f, err := FamilyByName(v.Layout, family)
	if err != nil {
		return res, err
	}
	if res.Step, err = v.stepFor(family); err != nil {
		return res, err
	}
	dir := v.Layout.FamilyDir(f)
	if res.Integrity, err = checkAll(v.Layout, f, true); err != nil {
		return res, err
	}
	for _, b := range res.Integrity.Bad {
		v.logf("BAD %s/%s: %s (set aside as %s)", family, b.SeqID, b.Reason, b.Quarantined)
	}
	for _, sid := range res.Integrity.Unrecorded {
		v.logf("UNRECORDED %s/%s: no integrity record", family, sid)
	}
	have, err := artefacts(dir, f.Suffix())
	if err != nil {
		return res, err
	}
	rec, err := provenance.ReadRecorded(dir)
	if err != nil {
		return res, err
	}
	synth := syntheticIDs(dir, rec, have)
	var cands []string
	for sid := range have {
		if !synth[sid] {
			cands = append(cands, sid)
		}
	}
	if len(cands) == 0 {
		return res, fmt.Errorf("family %s holds no real file to verify", family)
	}
	sort.Strings(cands)
	seed := v.Seed
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	r := mrand.New(mrand.NewPCG(seed, 0x6b696e666c6f77))
	r.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
	seqs := map[string]string{}
	var ids []string
	for from := 0; from < len(cands) && len(ids) < sample; from += sample {
		chunk := cands[from:min(from+sample, len(cands))]
		got, err := v.Sequences(ctx, chunk)
		if err != nil {
			return res, err
		}
		for _, sid := range chunk {
			if s, ok := got[sid]; ok && len(ids) < sample {
				seqs[sid] = s
				ids = append(ids, sid)
			} else if !ok {
				res.NoSequence++
			}
		}
	}
	if len(ids) == 0 {
		return res, fmt.Errorf("none of the sampled files of %s has a sequence in the seq map", family)
	}
	sort.Strings(ids)

	scratch, err := os.MkdirTemp(v.Settings.ScratchDir, "kinflow-verify-")
	if err != nil && v.Settings.ScratchDir != "" {
		if mkErr := os.MkdirAll(v.Settings.ScratchDir, 0o755); mkErr == nil {
			scratch, err = os.MkdirTemp(v.Settings.ScratchDir, "kinflow-verify-")
		}
	}
	if err != nil {
		return res, fmt.Errorf("scratch folder: %w", err)
	}
	defer os.RemoveAll(scratch)
	sl, err := embedding.NewLayout(filepath.Join(scratch, "media"), "", v.Layout.MethodECheckpointRoot, v.Layout.BindingSiteDir)
	if err == nil {
		sl.Folders = v.Layout.Folders
	}
	if err != nil {
		return res, err
	}
	// Method A's weighted vectors read the binding-site table: the
	// recomputation reads the media root's rows.
	if err := os.MkdirAll(sl.MediaRoot, 0o755); err != nil {
		return res, err
	}
	if _, err := os.Stat(filepath.Dir(v.Layout.BindingSiteTable())); err == nil {
		if err := copyFile(v.Layout.BindingSiteTable(), sl.BindingSiteTable()); err != nil && !errors.Is(err, os.ErrNotExist) {
			return res, err
		}
	}
	if res.Fingerprint, err = v.recompute(ctx, sl, res.Step, ids, seqs); err != nil {
		return res, err
	}
	res.Fingerprint = res.Fingerprint.ForFamily(family)
	for _, sid := range ids {
		cached := filepath.Join(dir, sid+f.Suffix())
		fresh := filepath.Join(sl.FamilyDir(f), sid+f.Suffix())
		res.Checked++
		if err := CompareFiles(cached, fresh, f.PerResidue); err != nil {
			res.Failed++
			line := fmt.Sprintf("%s: %v", sid, err)
			res.Failures = append(res.Failures, line)
			v.logf("MISMATCH %s/%s", family, line)
			continue
		}
		v.logf("ok %s/%s%s", family, sid, f.Suffix())
	}
	return res, nil
}

// familyName is the name of the family given by name or by its folder
// under the layout's naming (`esm1b_turnup` with the reference naming);
// anything else as it is, for FamilyByName's error.
func (v *Verifier) familyName(name string) string {
	if f, err := FamilyByName(v.Layout, name); err == nil {
		return f.Name
	}
	return name
}

// stepFor picks the step that recomputes family: with the command
// executor, the first step writing it that has a program on this host (a
// family written by two steps needs only one of them); otherwise the first.
func (v *Verifier) stepFor(family string) (string, error) {
	steps, err := StepsOf(v.Layout, family)
	if err != nil {
		return "", err
	}
	if v.Executor != "command" {
		return steps[0], nil
	}
	for _, k := range steps {
		_, srv := v.Settings.Servers[k]
		_, cmd := v.Settings.Commands[k]
		if srv || cmd {
			return k, nil
		}
	}
	return "", fmt.Errorf("no program on this host for any step that writes %s (%s): configure one of them in the GPU host's env file", family, strings.Join(steps, ", "))
}

// checkAll hashes every file of f against its record and sets the bad
// ones aside (embedding.Layout.CheckFamily with HashAll); keepUnrecorded
// leaves the files without a record in place, listed.
func checkAll(l *embedding.Layout, f embedding.Family, keepUnrecorded bool) (embedding.Integrity, error) {
	have, err := artefacts(l.FamilyDir(f), f.Suffix())
	if err != nil {
		return embedding.Integrity{}, err
	}
	sids := slices.Sorted(maps.Keys(have))
	present := make([]bool, len(sids))
	for i := range present {
		present[i] = true
	}
	return l.CheckFamily(f, sids, present, nil, embedding.CheckOptions{HashAll: true, KeepUnrecorded: keepUnrecorded})
}

// RepairResult is what Repair did.
type RepairResult struct {
	Family string
	Step   string
	// Integrity is the check of every file (as Verify's).
	Integrity embedding.Integrity
	// Recomputed counts the set-aside files written again; NoSequence the
	// ones whose sequence the seq map does not know.
	Recomputed, NoSequence int
	// Failures names the files the step program did not write.
	Failures []string
}

// Repair hashes every file of family against its record, sets the bad ones
// aside and recomputes every set-aside file that has no replacement yet
// (this run's and earlier ones') with the configured step executor, into
// the media root's cache.
func (v *Verifier) Repair(ctx context.Context, family string) (RepairResult, error) {
	family = v.familyName(family)
	res := RepairResult{Family: family}
	f, err := FamilyByName(v.Layout, family)
	if err != nil {
		return res, err
	}
	if res.Step, err = v.stepFor(family); err != nil {
		return res, err
	}
	if res.Integrity, err = checkAll(v.Layout, f, false); err != nil {
		return res, err
	}
	for _, b := range res.Integrity.Bad {
		v.logf("BAD %s/%s: %s (set aside as %s)", family, b.SeqID, b.Reason, b.Quarantined)
	}
	names, err := v.Layout.Quarantined(f)
	if err != nil {
		return res, err
	}
	want := map[string]bool{}
	for _, n := range names {
		sid := embedding.QuarantinedSeqID(f, n)
		if sid == "" {
			continue
		}
		if _, err := os.Stat(filepath.Join(v.Layout.FamilyDir(f), sid+f.Suffix())); errors.Is(err, os.ErrNotExist) {
			want[sid] = true
		}
	}
	if len(want) == 0 {
		return res, nil
	}
	ids := slices.Sorted(maps.Keys(want))
	seqs, err := v.Sequences(ctx, ids)
	if err != nil {
		return res, err
	}
	var todo []string
	for _, sid := range ids {
		if _, ok := seqs[sid]; ok {
			todo = append(todo, sid)
		} else {
			res.NoSequence++
		}
	}
	if len(todo) == 0 {
		return res, nil
	}
	if _, err := v.recompute(ctx, v.Layout, res.Step, todo, seqs); err != nil {
		return res, err
	}
	for _, sid := range todo {
		if _, err := os.Stat(filepath.Join(v.Layout.FamilyDir(f), sid+f.Suffix())); err == nil {
			res.Recomputed++
			v.logf("recomputed %s/%s%s", family, sid, f.Suffix())
		} else {
			res.Failures = append(res.Failures, sid)
		}
	}
	return res, nil
}

// recompute writes ids' files of step under the scratch layout sl with the
// configured executor and returns its fingerprint.
func (v *Verifier) recompute(ctx context.Context, sl *embedding.Layout, step string, ids []string, seqs map[string]string) (provenance.Fingerprint, error) {
	if v.Executor != "command" {
		if _, err := embedding.ComputeStep(ctx, sl, step, ids, seqs, nil); err != nil {
			return provenance.Fingerprint{}, err
		}
		return provenance.Synthetic(step), nil
	}
	po := v.Settings.Pool
	po.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	pool := stepserver.NewPool(po)
	defer pool.Close()
	runner := &embedjob.CommandRunner{Settings: v.Settings, MediaRoot: sl.MediaRoot, Pool: pool}
	eng := &embedjob.Engine{Runner: runner, Settings: v.Settings, Log: po.Log, Layout: sl}
	el := embedjob.EmbeddingLayout{L: sl}
	items := make([]embedjob.SeqItem, 0, len(ids))
	for _, sid := range ids {
		outs, err := el.ExpectedPaths(step, sid)
		if err != nil {
			return provenance.Fingerprint{}, err
		}
		items = append(items, embedjob.SeqItem{SeqID: sid, Sequence: seqs[sid], Outputs: outs})
	}
	var b [8]byte
	_, _ = rand.Read(b[:])
	out, err := eng.RunStep(ctx, embedjob.StepRequest{JobID: "verify-" + hex.EncodeToString(b[:]), StepKey: step, Seqs: items})
	if err != nil {
		return provenance.Fingerprint{}, err
	}
	if out.Failure != nil {
		return provenance.Fingerprint{}, fmt.Errorf("the configured step program failed: %w", out.Failure)
	}
	if len(out.Missing) > 0 {
		return provenance.Fingerprint{}, fmt.Errorf("the configured step program did not write %d file(s)", len(out.Missing))
	}
	return runner.Fingerprint(ctx, step, nil)
}

// readTensor reads an .npy or a one-tensor .pt artefact.
func readTensor(path string) (embedding.Tensor, error) {
	if strings.HasSuffix(path, ".pt") {
		b, err := os.ReadFile(path)
		if err != nil {
			return embedding.Tensor{}, err
		}
		return embedding.DecodePT(b)
	}
	f, err := os.Open(path)
	if err != nil {
		return embedding.Tensor{}, err
	}
	defer f.Close()
	return embedding.DecodeNPY(f)
}

// CompareFiles compares a cached artefact with a recomputed one: same
// shape, every value finite, cosine similarity at least MinCosinePooled
// (pooled vectors) or MinCosineRow for every row (per-residue matrices).
func CompareFiles(cached, fresh string, perResidue bool) error {
	a, err := readTensor(cached)
	if err != nil {
		return fmt.Errorf("cached file unreadable: %v", err)
	}
	b, err := readTensor(fresh)
	if err != nil {
		return fmt.Errorf("recomputed file unreadable: %v", err)
	}
	if fmt.Sprint(a.Shape) != fmt.Sprint(b.Shape) {
		return fmt.Errorf("shape %v, recomputed %v", a.Shape, b.Shape)
	}
	for i, x := range a.Data {
		if math.IsNaN(float64(x)) || math.IsInf(float64(x), 0) {
			return fmt.Errorf("non-finite value at %d", i)
		}
	}
	rows, width := 1, len(a.Data)
	bound, normBound := MinCosinePooled, MaxNormDiffPooled
	if perResidue && len(a.Shape) == 2 {
		rows, width, bound, normBound = a.Shape[0], a.Shape[1], MinCosineRow, MaxNormDiffRow
	}
	for r := 0; r < rows; r++ {
		x, y := a.Data[r*width:(r+1)*width], b.Data[r*width:(r+1)*width]
		where := ""
		if rows > 1 {
			where = fmt.Sprintf("row %d: ", r)
		}
		if c := cosine(x, y); c < bound {
			return fmt.Errorf("%scosine %.6f < %g", where, c, bound)
		}
		if d := normDiff(x, y); d > normBound {
			return fmt.Errorf("%slength differs by %.4f > %g (relative)", where, d, normBound)
		}
	}
	return nil
}

// normDiff is |‖x‖ − ‖y‖| / max(‖x‖, ‖y‖) (0 when both are zero).
func normDiff(x, y []float32) float64 {
	var nx, ny float64
	for i := range x {
		nx += float64(x[i]) * float64(x[i])
		ny += float64(y[i]) * float64(y[i])
	}
	nx, ny = math.Sqrt(nx), math.Sqrt(ny)
	if m := math.Max(nx, ny); m > 0 {
		return math.Abs(nx-ny) / m
	}
	return 0
}

// cosine is the cosine similarity of x and y (1 when both are zero).
func cosine(x, y []float32) float64 {
	var dot, nx, ny float64
	for i := range x {
		dot += float64(x[i]) * float64(y[i])
		nx += float64(x[i]) * float64(x[i])
		ny += float64(y[i]) * float64(y[i])
	}
	if nx == 0 && ny == 0 {
		return 1
	}
	if nx == 0 || ny == 0 {
		return 0
	}
	return dot / math.Sqrt(nx*ny)
}

func copyFile(src, dst string) error {
	b, err := os.ReadFile(src)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return err
	}
	return os.WriteFile(dst, b, 0o644)
}

// Adopt verifies a sample of family's files and, only when every checked
// file passes, records the configured fingerprint for the family and an
// integrity record of every file that had none (after a shape and
// finite-value check; a bad one is set aside): files of unknown origin (the
// reference deployment's, a foreign writer's, those left after a damaged
// manifest) or of another fingerprint are then used as this model's. This
// is the only way a file without a record is ever taken. It returns the
// verify's result.
func (v *Verifier) Adopt(ctx context.Context, family string, sample int) (VerifyResult, error) {
	family = v.familyName(family)
	res, err := v.verify(ctx, family, sample)
	if err != nil {
		return res, err
	}
	if res.Failed > 0 {
		return res, fmt.Errorf("%d of %d sampled files of %s differ from the configured step program's: not adopted", res.Failed, res.Checked, family)
	}
	f, _ := FamilyByName(v.Layout, family)
	dir := v.Layout.FamilyDir(f)
	if ids := res.Integrity.Unrecorded; len(ids) > 0 {
		present := make([]bool, len(ids))
		for i := range present {
			present[i] = true
		}
		in, err := v.Layout.CheckFamily(f, ids, present, nil, embedding.CheckOptions{AdoptUnrecorded: true})
		if err != nil {
			return res, err
		}
		for _, b := range in.Bad {
			v.logf("BAD %s/%s: %s (set aside as %s)", family, b.SeqID, b.Reason, b.Quarantined)
		}
		res.Adopted = in.Recorded
		res.Integrity.Bad = append(res.Integrity.Bad, in.Bad...)
		res.Integrity.Unrecorded = nil
	}
	unlock, have, rec, err := lockedFamily(dir, f.Suffix())
	if err != nil {
		return res, err
	}
	defer unlock()
	now := time.Now().UTC()
	// SyntheticFiles stays set when the old record allowed synthetic
	// writers (a synthetic record, or its flag): one admitted before the
	// adopt may still add files, flagged only in the manifest.
	nrec := &provenance.Recorded{Fingerprint: res.Fingerprint, RecordedAt: now, Adopted: &now,
		SyntheticFiles: len(syntheticIDs(dir, rec, have)) > 0 || (rec != nil && (rec.SyntheticFiles || rec.AllSynthetic()))}
	return res, provenance.Write(dir, nrec)
}
