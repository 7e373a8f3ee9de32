package gpuworker

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
)

// SyntheticEmbedder writes one synthetic artefact.
type SyntheticEmbedder interface {
	WriteSynthetic(step, seqID, sequence, path string) error
}

// SyntheticRunner writes deterministic, correctly formatted stand-in
// artefacts without a GPU; every one is flagged synthetic. With Layout set
// (the default wiring) it is internal/embedding's synthetic embedder
// (ComputeStep: artefacts, cache manifests and method A's binding-site rows);
// otherwise Embedder (nil: LocalSynthetic) writes each missing output.
type SyntheticRunner struct {
	Layout   *embedding.Layout
	Embedder SyntheticEmbedder
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
	if r.Layout != nil && r.Delay > 0 {
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
	if r.Layout != nil {
		ids := make([]string, len(b.Items))
		seqs := make(map[string]string, len(b.Items))
		for i, it := range b.Items {
			ids[i] = it.SeqID
			seqs[it.SeqID] = it.Sequence
		}
		_, err := embedding.ComputeStep(ctx, r.Layout, b.StepKey, ids, seqs, nil)
		return err
	}
	emb := r.Embedder
	if emb == nil {
		emb = LocalSynthetic{}
	}
	for _, it := range b.Items {
		for _, p := range it.MissingOutputs {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := emb.WriteSynthetic(b.StepKey, it.SeqID, it.Sequence, p); err != nil {
				return err
			}
		}
	}
	return nil
}

// LocalSynthetic is the GPU host's own synthetic embedder: .npy files hold a
// float32 vector (per-residue steps: a length × dim matrix) drawn from a hash
// of the step, file name and sequence; .pt files hold a torch archive of
// {"synthetic": True, "key": …}.
type LocalSynthetic struct{}

// WriteSynthetic implements SyntheticEmbedder.
func (LocalSynthetic) WriteSynthetic(step, seqID, sequence, path string) error {
	key := step + "|" + filepath.Base(filepath.Dir(path)) + "|" + seqID + "|" + sequence
	if strings.HasSuffix(path, ".pt") {
		return writeAtomic(path, syntheticPT(key))
	}
	dim := 1024 // ProtT5
	switch {
	case strings.Contains(path, "esmc_"):
		dim = 1152
	case strings.Contains(path, "esm"):
		dim = 1280
	}
	rows := 0
	if step == "methodf_esm1v" || step == "methodi_prot_t5_residues" {
		rows = len(sequence)
	}
	return writeAtomic(path, syntheticNPY(key, rows, dim))
}
