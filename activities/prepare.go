package activities

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
)

// stageRows is MEDIA/jobs/<id>/work/stage-<i>/rows.json: every input row
// as the stage's method gets it and, for a skipped row, why. One file per
// stage, so BuildPlan and Predict read only their own stage's rows.
type stageRows struct {
	Index     int           `json:"index"`
	Target    string        `json:"target"`
	MethodKey string        `json:"method_key"`
	Rows      []preparedRow `json:"rows"`
}

// preparedRow is one input row as a stage sees it.
type preparedRow struct {
	// Seq is the sequence handed to the method (after long-sequence
	// handling); empty for a skipped row.
	Seq string `json:"seq,omitempty"`
	// Kwargs are the method's mapped input columns (col_to_kwarg).
	Kwargs map[string]string `json:"kwargs,omitempty"`
	// Reason is the skip reason; empty for a valid row.
	Reason string `json:"reason,omitempty"`
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
	var targets []string
	var chosen map[string]any
	if err := json.Unmarshal([]byte(job.Targets), &targets); err != nil || len(targets) == 0 {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError("No prediction targets were provided.", ErrInvalidInput, err)
	}
	if err := json.Unmarshal([]byte(job.Methods), &chosen); err != nil {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError("Invalid method selection: the stored methods are not an object.", ErrInvalidInput, err)
	}

	dir, err := a.jobDir(job.ID)
	if err != nil {
		return PreparedJob{}, temporal.NewNonRetryableApplicationError(err.Error(), ErrInvalidInput, err)
	}
	f, err := os.Open(filepath.Join(dir, "input.csv"))
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
		key, _ := chosen[t].(string)
		d, ok := a.Catalogue.Get(key)
		if !ok || !d.Supported(methods.Target(t)) {
			return PreparedJob{}, temporal.NewNonRetryableApplicationError(fmt.Sprintf("Invalid method selection: %q for target %q.", key, t), ErrUnknownMethod, nil)
		}
		descs[i] = d
		maxLens = append(maxLens, d.MaxSeqLen)
	}
	limit := input.EffectiveLimit(maxLens...)

	// The long-sequence rule is one for the whole job (§4.3): a row skipped
	// for length is skipped in every stage.
	seqCol := table.Col(methods.ProteinSequenceColumn)
	seqs := make([]string, len(table.Rows))
	longSkip := make([]string, len(table.Rows))
	for r, row := range table.Rows {
		if seqCol >= 0 {
			seqs[r], longSkip[r] = input.LongSequence(row.Cells[seqCol], limit, job.HandleLongSequences)
		}
	}
	var out []stageRows
	res := PreparedJob{Rows: len(table.Rows), DisableGPU: job.DisableGPUPrecompute, Policy: a.policy()}
	for i, t := range targets {
		d := descs[i]
		reasons, err := input.ValidateRows(ctx, a.Chem, input.InfoOf(d), table, seqs)
		if err != nil {
			return PreparedJob{}, err
		}
		sr := stageRows{Index: i, Target: t, MethodKey: d.Key, Rows: make([]preparedRow, len(table.Rows))}
		valid := 0
		for r, row := range table.Rows {
			pr := preparedRow{Reason: longSkip[r]}
			if pr.Reason == "" {
				pr.Reason = reasons[r]
			}
			if pr.Reason == "" {
				pr.Seq = seqs[r]
				pr.Kwargs = make(map[string]string, len(d.ColToKwarg))
				for _, ck := range d.ColToKwarg {
					if c := table.Col(ck.Column); c >= 0 {
						pr.Kwargs[ck.Kwarg] = row.Cells[c]
					}
				}
				valid++
			}
			sr.Rows[r] = pr
		}
		out = append(out, sr)
		res.Stages = append(res.Stages, StageInfo{Index: i, Target: t, MethodKey: d.Key, Profile: d.Profile, GPUEligible: d.GPUEligible, ValidRows: valid})
		n := len(table.Rows)
		if err := a.Store.UpdateStage(ctx, job.ID, i, map[string]any{
			"molecules_total": n, "molecules_processed": n, "invalid_rows": n - valid, "predictions_total": valid,
		}); err != nil {
			return PreparedJob{}, err
		}
	}
	for i, sr := range out {
		sdir, err := a.stageDir(job.ID, i)
		if err != nil {
			return PreparedJob{}, err
		}
		if err := fsutil.WriteJSONAtomic(filepath.Join(sdir, "rows.json"), sr); err != nil {
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
	}
}

// loadStageRows reads the rows PrepareInput wrote for one stage; a stage
// without them (one the job does not have) is a non-retryable error.
func (a *Activities) loadStageRows(jobID string, index int) (stageRows, error) {
	dir, err := a.stageDir(jobID, index)
	if err != nil {
		return stageRows{}, err
	}
	var sr stageRows
	if err := fsutil.ReadJSON(filepath.Join(dir, "rows.json"), &sr); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			// Only PrepareInput writes it: retrying cannot help.
			return stageRows{}, temporal.NewNonRetryableApplicationError(
				fmt.Sprintf("stage %d of job %s has no prepared rows", index, jobID), ErrInvalidInput, err)
		}
		return stageRows{}, fmt.Errorf("read prepared rows of job %s stage %d: %w", jobID, index, err)
	}
	return sr, nil
}
