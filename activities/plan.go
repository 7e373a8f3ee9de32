package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
)

// BuildPlan plans the stage's embedding artefacts (docs/embedding.md, "Plans"): it maps
// the valid sequences to seq ids, lists what the cache holds, and writes the
// full plan and the sparse GPU work to the stage's folder. A post-check
// (PostCheck) re-plans the same seq ids and records how many files appeared.
func (a *Activities) BuildPlan(ctx context.Context, in PlanInput) (PlanSummary, error) {
	sr, err := a.loadStageRows(in.JobID, in.StageIndex)
	if err != nil {
		return PlanSummary{}, err
	}
	d, ok := a.Catalogue.Get(sr.MethodKey)
	if !ok {
		return PlanSummary{}, temporal.NewNonRetryableApplicationError("Invalid method selection: "+sr.MethodKey, ErrUnknownMethod, nil)
	}
	// The first plan walks the units once for the sequences to plan and the
	// stage's counts; a plan that returns before its stage's UPDATE below
	// records the counts on their own. A post-check re-plans the first
	// plan's seq ids and needs neither (unless that plan's file is gone).
	var seqs []string
	var counts StageCounts
	if !in.PostCheck {
		seqs = sentSeqs(sr)
		counts = stageCounts(sr, seqs)
	}
	countsAlone := func(sum PlanSummary) (PlanSummary, error) {
		if in.PostCheck {
			return sum, nil
		}
		return sum, a.recordStageCounts(ctx, in, counts)
	}
	if d.Profile == methods.ProfileNone {
		return countsAlone(PlanSummary{NoPlan: true})
	}
	dir, err := a.stageDir(in.JobID, in.StageIndex)
	if err != nil {
		return PlanSummary{}, err
	}
	planFile := filepath.Join(dir, jobfiles.PlanFile)

	var plan *embedding.Plan
	var first embedding.Plan
	realOnly := a.planRealOnly(ctx, in.PostCheck)
	havePrev := fsutil.ReadJSON(planFile, &first) == nil
	if in.PostCheck && havePrev {
		plan, err = a.Layout.BuildPlan(ctx, embedding.PlanRequest{
			MethodKey: first.MethodKey, Target: methods.Target(first.Target), Profile: first.Profile,
			SeqIDs: first.SeqIDs, SeqIDToSeq: first.SeqIDToSeq, RealOnly: realOnly, Verify: true,
		})
	} else {
		// One entry per distinct sequence sent (sentSeqs): every candidate
		// gets its seq id.
		if in.PostCheck { // its first plan's file is gone: plan afresh
			seqs = sentSeqs(sr)
		}
		if len(seqs) == 0 {
			return countsAlone(PlanSummary{NoSequences: true, Profile: d.Profile})
		}
		plan, err = embedding.PlanSequencesWith(ctx, a.Layout, a.Store, d, methods.Target(sr.Target), seqs, embedding.PlanOptions{RealOnly: realOnly, Verify: true})
	}
	if errors.Is(err, embedding.ErrNoCacheProfile) {
		return countsAlone(PlanSummary{NoPlan: true})
	}
	if err != nil {
		return PlanSummary{}, temporal.NewApplicationErrorWithCause("plan_failed: "+err.Error(), ErrPlan, err)
	}

	if plan.Integrity != nil && len(plan.Integrity.Bad) > 0 {
		if err := a.reportQuarantined(ctx, in, plan.Integrity); err != nil {
			return PlanSummary{}, err
		}
	}
	sum := PlanSummary{Profile: plan.Profile, Total: plan.Total, Cached: plan.CachedAlready, Need: plan.NeedComputation,
		Complete: plan.Complete(), PlanFile: planFile}
	work := plan.StepWork()
	for _, sp := range plan.StepPlans {
		if n := len(sp.MissingSeqIDs); n > 0 {
			sum.Steps = append(sum.Steps, StepCount{StepKey: sp.StepKey, Count: n})
		}
	}
	if !in.PostCheck || !havePrev {
		if err := fsutil.WriteJSONAtomic(planFile, plan); err != nil {
			return PlanSummary{}, err
		}
		if err := a.claimEphemeral(ctx, in, d, plan); err != nil {
			return PlanSummary{}, err
		}
		// Mark the cached files used, for the cache budget's LRU order; a
		// file evicted since it was counted fails the plan, which is
		// retried and counts it missing (internal/cacheadmin/gc.go).
		if err := plan.TouchCached(); err != nil {
			return PlanSummary{}, err
		}
	}
	if len(work) > 0 {
		sum.WorkFile = filepath.Join(dir, "work.json")
		w := embedjob.Work{MethodKey: d.Key, Target: sr.Target, Profile: plan.Profile, StepWork: work, SeqIDToSeq: plan.WorkSeqIDToSeq()}
		if err := fsutil.WriteJSONAtomic(sum.WorkFile, w); err != nil {
			return PlanSummary{}, err
		}
	}

	now := time.Now().UTC()
	a.Log.Info("embedding plan", "job_id", in.JobID, "stage", in.StageIndex, "method", d.Key, "target", sr.Target, "step", "plan",
		"post_check", in.PostCheck, "total", plan.Total, "cached", plan.CachedAlready, "need", plan.NeedComputation, "steps", len(sum.Steps))
	if !in.PostCheck || !havePrev {
		a.recordCacheLookup(plan)
		state := "done"
		if !sum.Complete {
			state = "running"
		}
		cols := map[string]any{
			"embedding_total": plan.Total, "embedding_cached": plan.CachedAlready, "embedding_need": plan.NeedComputation,
			"embedding_computed": 0, "embedding_state": state, "embedding_updated_at": now,
		}
		if !in.PostCheck {
			maps.Copy(cols, stageCountCols(counts))
		}
		err = a.Store.UpdateStage(ctx, in.JobID, in.StageIndex, cols)
	} else {
		err = a.Store.SetEmbeddingComputed(ctx, in.JobID, in.StageIndex, first.NeedComputation-plan.NeedComputation, now)
	}
	return sum, err
}

// claimEphemeral records the stage's claim on the ephemeral artefacts its
// method consumes, so that another job's Cleanup never deletes them first.
func (a *Activities) claimEphemeral(ctx context.Context, in PlanInput, d *methods.Descriptor, plan *embedding.Plan) error {
	paths := a.ephemeralPaths(d, plan)
	return a.Store.ClaimArtefacts(ctx, in.JobID, in.StageIndex, paths)
}

// ephemeralPaths lists the plan's expected files that belong to one of the
// method's ephemeral families.
func (a *Activities) ephemeralPaths(d *methods.Descriptor, plan *embedding.Plan) []string {
	var dirs []string
	for _, name := range d.EphemeralFamilies {
		if f, ok := embedding.FamilyByName(name); ok {
			dirs = append(dirs, a.Layout.FamilyDir(f)+string(filepath.Separator))
		}
	}
	if len(dirs) == 0 {
		return nil
	}
	var out []string
	for _, sid := range plan.SeqIDs {
		for _, p := range plan.ExpectedPathsBySeq[sid] {
			for _, dir := range dirs {
				if strings.HasPrefix(p, dir) {
					out = append(out, p)
				}
			}
		}
	}
	return out
}

// recordCacheLookup counts a first plan's hits and misses per family (the
// folder under sequence_info/) in the metrics.
func (a *Activities) recordCacheLookup(plan *embedding.Plan) {
	if a.Metrics == nil {
		return
	}
	root := a.Layout.SequenceInfo()
	count := func(bySeq map[string][]string) map[string]int {
		out := map[string]int{}
		for _, paths := range bySeq {
			for _, p := range paths {
				out[filepath.Dir(p)]++
			}
		}
		return out
	}
	expected, missing := count(plan.ExpectedPathsBySeq), count(plan.MissingPathsBySeq)
	for dir, n := range expected {
		family, err := filepath.Rel(root, dir)
		if err != nil {
			family = dir
		}
		a.Metrics.CacheLookup(filepath.ToSlash(family), n-missing[dir], missing[dir])
	}
}

// ReasonCacheFilesQuarantined is the gpuPrecompute event reason (kinflow's
// own; attempted, usedGpu, completed and failed all false) of a plan whose
// integrity check set cached files aside: `cache_files_quarantined:<n>`,
// the message naming them. The files are counted as missing, so the stage
// computes them again and the job goes on.
const ReasonCacheFilesQuarantined = "cache_files_quarantined"

// reportQuarantined records the bad cached files a plan set aside: a job
// event (the job's status shows it) and a warning in the log.
func (a *Activities) reportQuarantined(ctx context.Context, in PlanInput, in2 *embedding.Integrity) error {
	msg := in2.Summary(5)
	a.Log.Warn("cached files set aside", "job_id", in.JobID, "stage", in.StageIndex, "step", "plan", "files", len(in2.Bad), "detail", msg)
	st, err := a.Store.Stage(ctx, in.JobID, in.StageIndex)
	if err != nil {
		return err
	}
	_, err = a.Store.AddEvent(ctx, &store.JobEvent{
		JobID: in.JobID, StageIndex: in.StageIndex, Kind: store.EventGPUPrecompute,
		MethodKey: st.MethodKey, Target: st.Target,
		Reason: fmt.Sprintf("%s:%d", ReasonCacheFilesQuarantined, len(in2.Bad)), Message: msg, CreatedAt: time.Now().UTC(),
	}, keepEvents)
	return err
}
