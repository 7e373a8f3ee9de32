package embedding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"

	"golang.org/x/sys/unix"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/provenance"
)

// StepPlan is the missing work of one GPU step.
type StepPlan struct {
	StepKey string `json:"step_key"`
	// MissingSeqIDs are the ids with any of the step's outputs missing, sorted.
	MissingSeqIDs []string `json:"missing_seq_ids"`
	// RequiredPathsBySeq holds, for each missing id, every file the step
	// makes for it (present ones included: the step's full output).
	RequiredPathsBySeq map[string][]string `json:"required_paths_by_seq"`
	// GPUEnabled mirrors the reference's field; always true.
	GPUEnabled bool `json:"gpu_enabled"`
}

// Plan is the embedding plan of one method and target over a set of
// sequences (docs/embedding.md, "Plans"). Counts are file-based, not
// sequence-based; one sequence can be complete for one step and missing for
// another; step work is sparse: only missing work is listed, and only it is
// sent to the GPU service.
type Plan struct {
	MethodKey string `json:"method_key"`
	Target    string `json:"target"`
	Profile   string `json:"profile"`
	// SeqIDs are the plan's ids, in input order, unique.
	SeqIDs     []string          `json:"seq_ids"`
	SeqIDToSeq map[string]string `json:"seq_id_to_seq"`
	// ExpectedPathsBySeq holds every expected file per id (absolute paths).
	ExpectedPathsBySeq map[string][]string `json:"expected_paths_by_seq"`
	// MissingPathsBySeq holds the expected files that do not exist, only
	// for the ids that miss at least one (sparse).
	MissingPathsBySeq map[string][]string `json:"missing_paths_by_seq"`
	// WatchDirs are the folders the expected files live in, sorted.
	WatchDirs []string   `json:"watch_dirs"`
	StepPlans []StepPlan `json:"step_plans"`
	// Total, CachedAlready and NeedComputation count files.
	Total           int `json:"total"`
	CachedAlready   int `json:"cached_already"`
	NeedComputation int `json:"need_computation"`
	// MissingBindingSites counts ids without a binding-site row (method A);
	// they are step work of methoda_t5_full even when all their files exist.
	MissingBindingSites int `json:"missing_binding_sites"`
	// Families maps each family of the plan to its recorded fingerprint id
	// (internal/provenance), or "unverified" when it holds files but no
	// record; families with neither are left out.
	Families map[string]string `json:"families,omitempty"`
	// Unverified lists the families whose present files are of unknown
	// origin (no record, or a record made over such files and not adopted).
	Unverified []string `json:"unverified,omitempty"`
	// SyntheticUsed says some file counted as cached is synthetic (only when
	// the request did not ask for real files only).
	SyntheticUsed bool `json:"synthetic_used,omitempty"`
	// SyntheticIgnored counts the synthetic files counted as missing because
	// the request asked for real files only.
	SyntheticIgnored int `json:"synthetic_ignored,omitempty"`
	// Integrity is what the integrity check found (only with
	// PlanRequest.Verify).
	Integrity *Integrity `json:"integrity,omitempty"`
}

// StepWork is the sparse `step_work` of the plan: step key → missing ids,
// only for steps with work: the GPU service is sent nothing else.
func (p *Plan) StepWork() map[string][]string {
	out := map[string][]string{}
	for _, sp := range p.StepPlans {
		if len(sp.MissingSeqIDs) > 0 {
			out[sp.StepKey] = sp.MissingSeqIDs
		}
	}
	return out
}

// Complete reports whether nothing is left to compute: no missing file and no
// step work (a method A id can miss only its binding-site row).
func (p *Plan) Complete() bool {
	if p.NeedComputation > 0 {
		return false
	}
	for _, sp := range p.StepPlans {
		if len(sp.MissingSeqIDs) > 0 {
			return false
		}
	}
	return true
}

// WorkSeqIDToSeq is seq_id_to_seq restricted to the ids that appear in some
// step's work, as sent to the GPU service.
func (p *Plan) WorkSeqIDToSeq() map[string]string {
	out := map[string]string{}
	for _, sp := range p.StepPlans {
		for _, sid := range sp.MissingSeqIDs {
			out[sid] = p.SeqIDToSeq[sid]
		}
	}
	return out
}

// PlanRequest is the input of BuildPlan: ids already mapped (and validated
// here), with their sequences.
type PlanRequest struct {
	MethodKey  string
	Target     methods.Target
	Profile    string
	SeqIDs     []string
	SeqIDToSeq map[string]string
	// RealOnly counts synthetic files as missing: the method runs on a
	// real engine or real step programs, which must never consume synthetic
	// stand-ins. The first real writer replaces them.
	RealOnly bool
	// Verify checks every present persistent file against its integrity
	// record before it counts as cached (CheckFamily): a bad file is set
	// aside and counted as missing. Plans that precede an engine's run set
	// it; `kinflow plan` does not.
	Verify bool
}

// BuildPlan builds the plan for req. A profile without shared cache (method
// J) returns ErrNoCacheProfile. Presence is one lookup per requested file
// (listPresent), never a listing of the folder, and the binding-site table
// is read once.
//
// The manifest is not consulted for presence: an artefact is present exactly
// when the lookup of `<sid><suffix>` finds a regular file. This never trusts
// a manifest entry whose file is gone (the reference's stale-manifest bug).
func (l *Layout) BuildPlan(ctx context.Context, req PlanRequest) (*Plan, error) {
	steps, err := l.ProfileSteps(req.Profile, req.Target)
	if err != nil {
		return nil, err
	}
	b := &planBuilder{l: l, req: req, steps: steps}
	if b.sids, b.index, err = planSeqIDs(req); err != nil {
		return nil, err
	}
	// Families in step order; each step owns a contiguous range.
	b.ranges = make([]famRange, len(steps))
	for si, s := range steps {
		b.ranges[si].from = len(b.fams)
		b.fams = append(b.fams, s.Families...)
		b.ranges[si].to = len(b.fams)
	}
	integrity, err := b.scanFamilies(ctx)
	if err != nil {
		return nil, err
	}
	if err := b.scanBindingSites(); err != nil {
		return nil, err
	}
	p := b.newPlan(integrity)
	stepMissing, err := b.fillSeqs(ctx, p)
	if err != nil {
		return nil, err
	}
	p.NeedComputation = p.Total - p.CachedAlready
	b.recordOrigins(p)
	for si, s := range steps {
		ids := stepMissing[si]
		sort.Strings(ids)
		sp := StepPlan{StepKey: s.Key, MissingSeqIDs: ids, RequiredPathsBySeq: make(map[string][]string, len(ids)), GPUEnabled: true}
		if sp.MissingSeqIDs == nil {
			sp.MissingSeqIDs = []string{}
		}
		r := b.ranges[si]
		for _, sid := range ids {
			sp.RequiredPathsBySeq[sid] = p.ExpectedPathsBySeq[sid][r.from:r.to:r.to]
		}
		p.StepPlans = append(p.StepPlans, sp)
	}
	seen := map[string]bool{}
	for _, d := range b.dirs {
		if !seen[d] {
			seen[d] = true
			p.WatchDirs = append(p.WatchDirs, d)
		}
	}
	sort.Strings(p.WatchDirs)
	return p, nil
}

// famRange is the families of one step: [from, to) of planBuilder.fams.
type famRange struct{ from, to int }

// planBuilder is the state of one BuildPlan: the request's distinct seq ids
// and, per family of its steps, its folder, which ids it holds and what it
// says of their origin.
type planBuilder struct {
	l       *Layout
	req     PlanRequest
	steps   []StepSpec
	sids    []string
	index   map[string]int
	fams    []Family
	ranges  []famRange
	dirs    []string
	present [][]bool
	origins []familyOrigin
	// hasBS says which ids the binding-site table holds; nil when no step
	// writes it.
	hasBS []bool
}

// planSeqIDs checks the request's seq ids and returns them without
// repeats, in first occurrence order, with each one's index.
func planSeqIDs(req PlanRequest) ([]string, map[string]int, error) {
	sids := make([]string, 0, len(req.SeqIDs))
	index := make(map[string]int, len(req.SeqIDs))
	for _, sid := range req.SeqIDs {
		if !ValidSeqID(sid) {
			return nil, nil, fmt.Errorf("plan: invalid seq id %q", sid)
		}
		if _, dup := index[sid]; dup {
			continue
		}
		if _, ok := req.SeqIDToSeq[sid]; !ok {
			return nil, nil, fmt.Errorf("plan: no sequence for seq id %q", sid)
		}
		index[sid] = len(sids)
		sids = append(sids, sid)
	}
	return sids, index, nil
}

// scanFamilies lists every family's folder once (presence and origin) and,
// when the request asks, checks the integrity of the persistent ones.
func (b *planBuilder) scanFamilies(ctx context.Context) (*Integrity, error) {
	n := len(b.sids)
	b.dirs = make([]string, len(b.fams))
	b.present = make([][]bool, len(b.fams))
	b.origins = make([]familyOrigin, len(b.fams))
	var integrity *Integrity
	// The stat each lookup found, for the integrity check of a persistent
	// family: each file is looked up once, its stat serving both presence
	// and the comparison with its record. Reused family after family (an
	// entry is read only where this family's lookup marked the file present).
	var seen []FileStat
	for fi, f := range b.fams {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		var err error
		b.dirs[fi] = b.l.FamilyDir(f)
		b.present[fi] = make([]bool, n)
		check := b.req.Verify && f.Persistent
		if check && seen == nil {
			seen = make([]FileStat, n)
		}
		var famSeen []FileStat
		if check {
			famSeen = seen
		}
		if b.origins[fi], err = presentWithOrigin(b.dirs[fi], f.Suffix(), b.index, b.present[fi], b.req.RealOnly, famSeen); err != nil {
			return nil, err
		}
		if check {
			if integrity == nil {
				integrity = &Integrity{}
			}
			got, err := b.l.checkFamily(f, b.sids, b.index, b.present[fi], famSeen, seqLenOf(b.sids, b.req.SeqIDToSeq), CheckOptions{})
			if err != nil {
				return nil, err
			}
			integrity.Add(got)
		}
	}
	return integrity, nil
}

// scanBindingSites reads the binding-site table once, when a step writes it.
func (b *planBuilder) scanBindingSites() error {
	for _, s := range b.steps {
		if s.BindingSites {
			b.hasBS = make([]bool, len(b.sids))
			return scanTable(b.l.BindingSiteTable(), func(id, _ []byte) {
				if i, ok := b.index[string(id)]; ok {
					b.hasBS[i] = true
				}
			})
		}
	}
	return nil
}

// newPlan is the plan before its per-sequence fields.
func (b *planBuilder) newPlan(integrity *Integrity) *Plan {
	n := len(b.sids)
	req := b.req
	p := &Plan{
		MethodKey:          req.MethodKey,
		Target:             string(req.Target),
		Profile:            req.Profile,
		SeqIDs:             b.sids,
		SeqIDToSeq:         map[string]string{},
		ExpectedPathsBySeq: make(map[string][]string, n),
		MissingPathsBySeq:  map[string][]string{},
		Total:              n * len(b.fams),
		Integrity:          integrity,
	}
	if len(req.SeqIDToSeq) == n {
		// The caller's map holds exactly the plan's ids: share it rather
		// than copy 100,000 entries. Plans are read-only.
		p.SeqIDToSeq = req.SeqIDToSeq
	} else {
		for _, sid := range b.sids {
			p.SeqIDToSeq[sid] = req.SeqIDToSeq[sid]
		}
	}
	return p
}

// fillSeqs sets each sequence's expected and missing paths and counts in p,
// and returns, per step, the ids it must compute.
func (b *planBuilder) fillSeqs(ctx context.Context, p *Plan) ([][]string, error) {
	fams, present, hasBS := b.fams, b.present, b.hasBS
	stepMissing := make([][]string, len(b.steps))
	for i, sid := range b.sids {
		if i%4096 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		paths := buildPaths(b.dirs, fams, sid)
		p.ExpectedPathsBySeq[sid] = paths
		nMissing := 0
		for fi := range fams {
			if !present[fi][i] {
				nMissing++
			}
		}
		p.CachedAlready += len(fams) - nMissing
		var missing []string
		switch nMissing {
		case 0:
		case len(fams):
			// All missing: share the expected slice, so a cold cache's
			// plan does not hold every path twice over.
			missing = paths
		default:
			missing = make([]string, 0, nMissing)
			for fi := range fams {
				if !present[fi][i] {
					missing = append(missing, paths[fi])
				}
			}
		}
		if missing != nil {
			p.MissingPathsBySeq[sid] = missing
		}
		if hasBS != nil && !hasBS[i] {
			p.MissingBindingSites++
		}
		for si, s := range b.steps {
			need := s.BindingSites && !hasBS[i]
			for fi := b.ranges[si].from; fi < b.ranges[si].to && !need; fi++ {
				need = !present[fi][i]
			}
			if need {
				stepMissing[si] = append(stepMissing[si], sid)
			}
		}
	}
	return stepMissing, nil
}

// recordOrigins records in p what the families said of their origin.
func (b *planBuilder) recordOrigins(p *Plan) {
	for fi, f := range b.fams {
		o := b.origins[fi]
		p.SyntheticUsed = p.SyntheticUsed || o.syntheticUsed
		p.SyntheticIgnored += o.syntheticIgnored
		id := o.id
		if id == "" && o.present > 0 {
			id = provenance.UnverifiedID
		}
		if id != "" {
			if p.Families == nil {
				p.Families = map[string]string{}
			}
			p.Families[f.Name] = id
		}
		if o.present > 0 && o.unverified && !slices.Contains(p.Unverified, f.Name) {
			p.Unverified = append(p.Unverified, f.Name)
		}
	}
}

// buildPaths returns sid's path in each family folder. All paths share one
// backing string, so a plan over 100,000 ids costs one allocation per id for
// its paths.
func buildPaths(dirs []string, fams []Family, sid string) []string {
	size := 0
	for fi, d := range dirs {
		size += len(d) + 1 + len(sid) + len(fams[fi].Suffix())
	}
	var b strings.Builder
	b.Grow(size)
	var endsBuf [32]int
	ends := endsBuf[:0]
	if len(dirs) > len(endsBuf) {
		ends = make([]int, 0, len(dirs))
	}
	ends = ends[:len(dirs)]
	for fi, d := range dirs {
		b.WriteString(d)
		b.WriteByte(filepath.Separator)
		b.WriteString(sid)
		b.WriteString(fams[fi].Suffix())
		ends[fi] = b.Len()
	}
	all := b.String()
	out := make([]string, len(dirs))
	start := 0
	for fi, e := range ends {
		out[fi] = all[start:e]
		start = e
	}
	return out
}

// familyOrigin is what a plan learnt of one family's provenance.
type familyOrigin struct {
	// id is the recorded fingerprint id ("" when none).
	id string
	// present counts the files counted as cached.
	present int
	// unverified: the present files are of unknown origin.
	unverified bool
	// syntheticUsed: some file counted as cached is synthetic.
	syntheticUsed bool
	// syntheticIgnored counts synthetic files counted as missing.
	syntheticIgnored int
}

// presentWithOrigin is listPresent with the family's provenance: it reads
// the family's fingerprint record (one small file) and, only when the record
// says the folder holds synthetic files beside others, its manifest (the
// per-file origin). With realOnly, synthetic files are not marked present;
// in a folder whose record says all its files are synthetic the files are
// looked up only to count them as ignored. So planning costs one extra
// small read per family, not per file. seen, when not nil, gets the stat
// of each file marked present (listPresent).
func presentWithOrigin(dir, suffix string, index map[string]int, present []bool, realOnly bool, seen []FileStat) (familyOrigin, error) {
	var o familyOrigin
	rec, err := provenance.ReadRecorded(dir)
	if err != nil {
		return o, err
	}
	allSynthetic := rec.AllSynthetic() && !rec.Unverified
	if realOnly && allSynthetic {
		// Every file is synthetic: nothing counts, and no lookup is needed
		// except to say how many were ignored.
		tmp := make([]bool, len(present))
		if err := listPresent(dir, suffix, index, tmp, nil); err != nil {
			return o, err
		}
		for _, b := range tmp {
			if b {
				o.syntheticIgnored++
			}
		}
		o.id = rec.ID
		return o, nil
	}
	if err := listPresent(dir, suffix, index, present, seen); err != nil {
		return o, err
	}
	if rec != nil {
		o.id = rec.ID
		o.unverified = rec.Unverified
	} else {
		o.unverified = true
	}
	// Mixed folders, and folders without a record (files of unknown origin,
	// or synthetic files from before records existed, which the manifest
	// flags), are read per file.
	mixed := rec == nil || rec.SyntheticFiles || (rec.AllSynthetic() && rec.Unverified)
	if mixed && (rec != nil || slices.Contains(present, true)) {
		for sid := range SyntheticInManifest(dir) {
			i, ok := index[sid]
			if !ok || !present[i] {
				continue
			}
			if realOnly {
				present[i] = false
				o.syntheticIgnored++
			} else {
				o.syntheticUsed = true
			}
		}
	}
	for _, b := range present {
		if b {
			o.present++
		}
	}
	if allSynthetic && o.present > 0 {
		o.syntheticUsed = true
	}
	return o, nil
}

// listPresent marks present[i] for every regular file `<sid><suffix>` in dir
// whose sid is index's key i and, when seen is not nil, sets seen[i] to
// that file's stat. Hidden names (temp files, locks) and manifest.json
// never match. A missing folder has nothing present.
//
// Each requested sid is looked up on its own: one fstatat relative to the
// folder, opened once, so the cost follows the job, not the folder. The
// folder is never listed: a cache folder holds every sequence ever
// embedded, and listing 300,000 names took a quarter of a second on a
// local disk for any job (BenchmarkPlanPresence300k); the reference
// deployment saw minutes on sshfs and NFS, where each batch of names is a
// round trip.
func listPresent(dir, suffix string, index map[string]int, present []bool, seen []FileStat) error {
	if len(index) == 0 {
		return nil
	}
	dfd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("open cache folder %s: %w", dir, err)
	}
	defer unix.Close(dfd)
	name := make([]byte, 0, 128)
	var st unix.Stat_t
	for sid, i := range index {
		if sid == "" || isTempName(sid) || strings.ContainsRune(sid, os.PathSeparator) {
			continue
		}
		name = append(append(append(name[:0], sid...), suffix...), 0)
		err := fstatatName(dfd, name, &st)
		switch {
		case err == nil:
			present[i] = st.Mode&unix.S_IFMT == unix.S_IFREG
			if seen != nil {
				seen[i] = statOf(&st)
			}
		case errors.Is(err, unix.ENOENT):
		default:
			return fmt.Errorf("look up %s in the cache: %w", sid+suffix, err)
		}
	}
	return nil
}

// SeqIDMapper maps sequences to seq ids, one per input, in order
// (implemented by *store.Store).
type SeqIDMapper interface {
	SeqIDs(ctx context.Context, seqs []string) ([]string, error)
}

// PlanSequences normalises seqs for the method's profile (NormaliseSequences),
// maps them to ids with mapper and builds the plan. Method J (no profile)
// returns ErrNoCacheProfile without mapping anything.
func PlanSequences(ctx context.Context, l *Layout, mapper SeqIDMapper, d *methods.Descriptor, t methods.Target, seqs []string) (*Plan, error) {
	return PlanSequencesWith(ctx, l, mapper, d, t, seqs, PlanOptions{})
}

// PlanOptions are PlanSequencesWith's options.
type PlanOptions struct {
	// RealOnly is PlanRequest.RealOnly.
	RealOnly bool
	// Verify is PlanRequest.Verify.
	Verify bool
}

// PlanSequencesWith is PlanSequences with options.
func PlanSequencesWith(ctx context.Context, l *Layout, mapper SeqIDMapper, d *methods.Descriptor, t methods.Target, seqs []string, o PlanOptions) (*Plan, error) {
	if d.Profile == methods.ProfileNone {
		return nil, ErrNoCacheProfile
	}
	norm := NormaliseSequences(d.Profile, seqs)
	ids, err := mapper.SeqIDs(ctx, norm)
	if err != nil {
		return nil, fmt.Errorf("map sequences: %w", err)
	}
	if len(ids) != len(norm) {
		return nil, fmt.Errorf("map sequences: %d ids for %d sequences", len(ids), len(norm))
	}
	m := make(map[string]string, len(ids))
	for i, id := range ids {
		m[id] = norm[i]
	}
	return l.BuildPlan(ctx, PlanRequest{MethodKey: d.Key, Target: t, Profile: d.Profile, SeqIDs: ids, SeqIDToSeq: m, RealOnly: o.RealOnly, Verify: o.Verify})
}
