package activities

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/units"
)

// jobSequences is the job-wide sequence side of the expansion (long
// sequences and candidate lists): every row's candidates with the sequence each sends, and the
// row's sequence-level skip reason.
type jobSequences struct {
	cands         [][]units.Candidate
	sent          [][]string
	skip          []string
	candidateMode bool
}

// expandSequences applies the candidate rule and the long-sequence rule,
// one for the whole job (a row or candidate skipped for length is skipped in
// every stage). A cell without ';' is one candidate taken as it is (the
// older wire, byte for byte); a ';' cell is split and trimmed. In a job with
// candidate lists an empty cell is "Missing protein sequence"; in any other
// job it keeps the invalid-sequence skip reason (an empty cell never fails
// the job).
func expandSequences(table *input.Table, limit int, mode string) jobSequences {
	n := len(table.Rows)
	js := jobSequences{cands: make([][]units.Candidate, n), sent: make([][]string, n), skip: make([]string, n)}
	seqCol := table.Col(methods.ProteinSequenceColumn)
	cellOf := func(row input.Row) string {
		if seqCol < 0 {
			return ""
		}
		return row.Cells[seqCol]
	}
	for _, row := range table.Rows {
		if cell := cellOf(row); strings.Contains(cell, units.Separator) && len(units.Split(cell)) != 1 {
			js.candidateMode = true
			break
		}
	}
	for r, row := range table.Rows {
		cell := cellOf(row)
		if js.candidateMode && units.IsNullCell(cell) {
			// In a job with candidate lists an empty cell has no
			// candidate at all.
			js.skip[r] = units.MissingSequence
			continue
		}
		if !strings.Contains(cell, units.Separator) {
			out, reason := input.LongSequence(cell, limit, mode)
			if reason == "" && (out == "" || !input.ValidResidues(out)) {
				reason = input.ReasonInvalidProtein
			}
			js.cands[r] = []units.Candidate{{Sequence: cell, Skip: reason}}
			js.sent[r] = []string{out}
			js.skip[r] = reason
			continue
		}
		list := units.Split(cell)
		if len(list) == 0 {
			js.skip[r] = units.MissingSequence
			continue
		}
		cs := make([]units.Candidate, len(list))
		sent := make([]string, len(list))
		var reasons []string
		for k, seq := range list {
			out, reason := input.LongSequence(seq, limit, mode)
			if reason != "" {
				reason = units.CandidateTooLong
			} else if !input.ValidResidues(out) {
				reason = input.ReasonInvalidProtein
			}
			cs[k] = units.Candidate{Sequence: seq, Skip: reason}
			if reason == "" {
				sent[k] = out
			} else if !slices.Contains(reasons, reason) {
				reasons = append(reasons, reason)
			}
		}
		js.cands[r], js.sent[r] = cs, sent
		if len(reasons) > 0 && countSkipped(cs) == len(cs) {
			switch {
			case len(reasons) == 1 && reasons[0] == units.CandidateTooLong:
				js.skip[r] = input.SkipTooLong
			case len(reasons) == 1:
				js.skip[r] = reasons[0]
			default:
				js.skip[r] = input.ReasonInvalidProtein
			}
		}
	}
	return js
}

func countSkipped(cs []units.Candidate) int {
	n := 0
	for _, c := range cs {
		if c.Skip != "" {
			n++
		}
	}
	return n
}

// expandStage builds one stage's row shapes and prediction units
// (docs/api.md, "Substrate lists, candidate sequences and per-target
// results"): the method's input behaviour for the target decides whether
// a `Substrates` list is expanded per token (expanded_pair) or taken whole.
// Substrate checks follow the method's engine rule: per token when expanded,
// per row otherwise.
func (a *Activities) expandStage(ctx context.Context, table *input.Table, js jobSequences, d *methods.Descriptor, target string) (jobfiles.StageRows, int, error) {
	n := len(table.Rows)
	sr := jobfiles.StageRows{Target: target, MethodKey: d.Key, Shapes: make([]units.Row, n), CandidateMode: js.candidateMode}
	info := input.InfoOf(d)
	behavior := d.InputBehavior(methods.Target(target))
	// A table with both substrate columns is the older wire: `Substrate`
	// feeds the single-substrate methods.
	perSubstrate := behavior == methods.BehaviorExpandedPair && table.Has(input.ColSubstrates) && !table.Has(input.ColSubstrate)
	// Chemistry is checked only for rows with a sequence to predict.
	placeholder := make([]string, n)
	for r := range placeholder {
		if js.skip[r] == "" {
			placeholder[r] = "A"
		}
	}
	var rowReasons []string
	tokReasons := map[string]string{}
	tokens := make([][]string, n)
	subKwarg := ""
	if perSubstrate {
		for _, ck := range d.ColToKwarg {
			if ck.Column == input.ColSubstrate {
				subKwarg = ck.Kwarg
			}
		}
		sc := table.Col(input.ColSubstrates)
		var all []string
		seen := map[string]bool{}
		for r, row := range table.Rows {
			if js.skip[r] != "" {
				continue
			}
			tokens[r] = units.Split(row.Cells[sc])
			for _, tok := range tokens[r] {
				if !seen[tok] {
					seen[tok] = true
					all = append(all, tok)
				}
			}
		}
		verdicts, err := input.ValidateTokens(ctx, a.Chem, info, all)
		if err != nil {
			return jobfiles.StageRows{}, 0, err
		}
		for i, tok := range all {
			tokReasons[tok] = verdicts[i]
		}
	} else {
		var err error
		rowReasons, err = input.ValidateRows(ctx, a.Chem, info, table, placeholder)
		if err != nil {
			return jobfiles.StageRows{}, 0, err
		}
	}
	// colFor resolves a mapped column: a method reading `Substrate` takes
	// the `Substrates` cell whole when the table has that instead.
	colFor := func(name string) int {
		c := table.Col(name)
		if c < 0 && name == input.ColSubstrate {
			c = table.Col(input.ColSubstrates)
		}
		return c
	}
	valid := 0
	for r, row := range table.Rows {
		shape := units.Row{Candidates: js.cands[r], PerSubstrate: perSubstrate, Substrates: tokens[r]}
		if js.skip[r] != "" {
			shape.Skip, shape.SequenceSkip = js.skip[r], true
			sr.Shapes[r] = shape
			continue
		}
		if !perSubstrate && rowReasons[r] != "" {
			shape.Skip = rowReasons[r]
			sr.Shapes[r] = shape
			continue
		}
		kwargs := make(map[string]string, len(d.ColToKwarg))
		var whole, products []string
		for _, ck := range d.ColToKwarg {
			c := colFor(ck.Column)
			if c < 0 {
				continue
			}
			kwargs[ck.Kwarg] = row.Cells[c]
			switch {
			case ck.Column == input.ColProducts:
				products = units.Split(row.Cells[c])
			case behavior == methods.BehaviorExpandedPair:
				whole = []string{row.Cells[c]}
			default:
				whole = append(whole, units.Split(row.Cells[c])...)
			}
		}
		us := units.Expand(r, target, shape, js.sent[r], kwargs, subKwarg, whole, products)
		for i := range us {
			if perSubstrate {
				us[i].Skip = tokReasons[us[i].Substrates[0]]
			}
			if us[i].Skip == "" {
				valid++
			}
		}
		sr.Units = append(sr.Units, us...)
		sr.Shapes[r] = shape
	}
	return sr, valid, nil
}

// PrepareInput reads the job's stored input, applies the long-sequence rule
// and the per-row validation of every stage's method, writes the result to the
// job's work folder and moves the job to Processing. A job already finished
// is left alone (AlreadyDone).
func (a *Activities) PrepareInput(ctx context.Context, ref JobRef) (PreparedJob, error) {
	job, err := a.Store.Job(ctx, ref.JobID)
	if errors.Is(err, store.ErrNotFound) {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError("job "+ref.JobID+" not found", ErrJobNotFound, err)
	}
	if err != nil {
		return PreparedJob{}, err
	}
	if job.Status == store.JobCompleted || job.Status == store.JobFailed {
		return PreparedJob{AlreadyDone: true}, nil
	}
	if err := a.Store.StartJob(ctx, job.ID, time.Now().UTC()); err != nil {
		return PreparedJob{}, err
	}
	targets, chosen := job.Targets, job.Methods
	if len(targets) == 0 {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError("No prediction targets were provided.", ErrInvalidInput, nil)
	}

	dir, err := a.jobDir(job.ID)
	if err != nil {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidInput, err)
	}
	f, err := os.Open(filepath.Join(dir, jobfiles.InputFile))
	if err != nil {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError("The job's input file could not be read.", ErrInvalidInput, err)
	}
	table, err := input.ParseCSV(f, 0)
	f.Close()
	if err != nil {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError("The job's input file could not be read: "+input.CSVDetail(err), ErrInvalidInput, err)
	}

	// Resolve every stage's method first: an unknown key fails the job
	// before any work.
	descs := make([]*methods.Descriptor, len(targets))
	var maxLens []int
	for i, t := range targets {
		key := chosen[t]
		d, ok := a.Catalogue.Get(key)
		if !ok || !d.Supported(methods.Target(t)) {
			return PreparedJob{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("Invalid method selection: %q for target %q.", key, t), ErrUnknownMethod, nil)
		}
		descs[i] = d
		maxLens = append(maxLens, d.MaxSeqLen)
	}
	limit := input.EffectiveLimit(maxLens...)

	js := expandSequences(table, limit, job.HandleLongSequences)
	res := PreparedJob{Rows: len(table.Rows), DisableGPU: job.DisableGPUPrecompute, Policy: a.policy(), Notify: job.NotifyURL != ""}
	for i, t := range targets {
		d := descs[i]
		sr, valid, err := a.expandStage(ctx, table, js, d, t)
		if err != nil {
			return PreparedJob{}, err
		}
		sr.Index = i
		// Each stage's file is written as soon as it is built: a job with
		// substrate lists has tens of thousands of units per stage.
		sdir, err := a.stageDir(job.ID, i)
		if err != nil {
			return PreparedJob{}, err
		}
		sr.Inputs = units.ShareInputs(len(sr.Shapes), sr.Units)
		if err := fsutil.WriteJSONAtomic(filepath.Join(sdir, jobfiles.RowsFile), sr); err != nil {
			return PreparedJob{}, err
		}
		units.RestoreInputs(sr.Inputs, sr.Units)
		res.Stages = append(res.Stages, StageInfo{Index: i, Target: t, MethodKey: d.Key, Profile: d.Profile, GPUEligible: d.GPUEligible, ValidRows: valid})
		n := len(table.Rows)
		invalid := 0
		for _, sh := range sr.Shapes {
			if sh.Skip != "" {
				invalid++
			}
		}
		if err := a.Store.UpdateStage(ctx, job.ID, i, map[string]any{
			"molecules_total": n, "molecules_processed": n, "invalid_rows": invalid, "predictions_total": valid,
		}); err != nil {
			return PreparedJob{}, err
		}
	}
	if err := a.Store.UpdateJob(ctx, job.ID, map[string]any{"total_molecules": len(table.Rows), "molecules_processed": len(table.Rows),
		"synthetic": a.Config.PredictionEngine == "synthetic"}); err != nil {
		return PreparedJob{}, err
	}
	return res, nil
}

// policy is the part of the configuration the workflow decides with.
func (a *Activities) policy() Policy {
	return Policy{
		GPUConfigured:     a.Config.GPUEmbedServiceURL != "",
		FailClosed:        a.Config.GPUEmbedFailClosed,
		JobTimeoutSeconds: int(a.Config.GPUEmbedJobTimeout / time.Second),
		GPUTaskQueue:      a.Config.GPUTaskQueue,
		CPUTaskQueue:      a.Config.CPUTaskQueue,
		HeartbeatSeconds:  int(a.Config.HeartbeatTimeout / time.Second),
		ShardSeqs:         a.Config.StepShardSeqs,
		TrackTaskQueue:    config.TrackTaskQueue(a.Config.CPUTaskQueue),
		NoticeTaskQueue:   config.NoticeTaskQueue(a.Config.CPUTaskQueue),
		TrackMinFiles:     a.Config.TrackMinFiles,
		GPUSmallStepSeqs:  a.Config.GPUSmallStepSeqs,
		SmallJobRows:      a.Config.SmallJobRows,
		// The bookkeeping steps ride out a database or storage outage this long.
		OutageRideOutSeconds: int(a.Config.OutageRideOut / time.Second),
		CacheFolders:         a.Config.CacheFolders,
	}
}

// loadStageRows reads the rows PrepareInput wrote for one stage; a stage
// without them (one the job does not have) is a non-retryable error.
func (a *Activities) loadStageRows(jobID string, index int) (jobfiles.StageRows, error) {
	dir, err := a.stageDir(jobID, index)
	if err != nil {
		return jobfiles.StageRows{}, err
	}
	sr, err := jobfiles.ReadStageRows(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// Only PrepareInput writes it: retrying cannot help.
			return jobfiles.StageRows{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("stage %d of job %s has no prepared rows", index, jobID), ErrInvalidInput, err)
		}
		return jobfiles.StageRows{}, fmt.Errorf("read prepared rows of job %s stage %d: %w", jobID, index, err)
	}
	return sr, nil
}
