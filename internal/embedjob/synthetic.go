package embedjob

import (
	"context"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
)

// SyntheticRunner writes deterministic, correctly formatted stand-in
// artefacts without a GPU, through internal/embedding's synthetic embedder
// (ComputeStep: artefacts flagged synthetic in their cache manifests, and
// method A's binding-site rows).
type SyntheticRunner struct {
	Layout *embedding.Layout
	// Delay is spent per sequence before its files are written (a stand-in
	// for model time; 0 in normal use).
	Delay time.Duration
}

// Name implements BatchRunner.
func (r *SyntheticRunner) Name() string { return "synthetic" }

// BatchLimits implements batchLimiter: no GPU memory to respect, so batches
// are large (fewer manifest merges), yet small enough that a step reports
// progress and an interrupted one loses little.
func (r *SyntheticRunner) BatchLimits() (tokens, seqs int) { return 1 << 30, 256 }

// RunBatch implements BatchRunner.
func (r *SyntheticRunner) RunBatch(ctx context.Context, b BatchJob) error {
	if r.Delay > 0 {
		// One sequence at a time, so files appear at the simulated pace.
		for _, it := range b.Items {
			select {
			case <-ctx.Done():
				return ctx.Err()
			case <-time.After(r.Delay):
			}
			if _, err := embedding.ComputeStep(ctx, r.Layout, b.StepKey, []string{it.SeqID}, map[string]string{it.SeqID: it.Sequence}, nil); err != nil {
				return err
			}
		}
		return nil
	}
	ids := make([]string, len(b.Items))
	seqs := make(map[string]string, len(b.Items))
	for i, it := range b.Items {
		ids[i] = it.SeqID
		seqs[it.SeqID] = it.Sequence
	}
	_, err := embedding.ComputeStep(ctx, r.Layout, b.StepKey, ids, seqs, nil)
	return err
}
