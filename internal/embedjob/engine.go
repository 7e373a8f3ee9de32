package embedjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"
	"strings"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/lease"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// BatchJob is one batch of one step handed to a BatchRunner.
type BatchJob struct {
	JobID   string
	StepKey string
	// Index numbers the batches of a step run (1, 2, …; halves of a split
	// batch get new numbers).
	Index int
	// Items are the batch's sequences; each has at least one missing output.
	Items []SeqItem
	// Log is the job's step log (may be nil).
	Log *JobLog
	// Share is whose work the batch is (the Device's turns go by share).
	Share Share
	// Folders maps the folder of each of the batch's outputs (relative to
	// sequence_info/, slash-separated) to its family's name, so that a step
	// program knows each path's family under the host's folder naming
	// without building a folder itself (the manifest's "folders").
	Folders map[string]string
}

// BatchRunner runs one batch: it writes the batch's missing outputs.
type BatchRunner interface {
	// Name is "command" or "synthetic" (shown in /health and logs).
	Name() string
	// RunBatch runs b. An error wrapping ErrOutOfMemory means the batch did
	// not fit the GPU: the caller splits it and tries again.
	RunBatch(ctx context.Context, b BatchJob) error
	// Synthetic reports whether the runner is the synthetic executor. Its
	// files count as present for it; a real runner treats synthetic files
	// as missing and replaces them (internal/provenance).
	Synthetic() bool
}

// ErrOutOfMemory marks a batch that failed for lack of GPU memory.
var ErrOutOfMemory = errors.New("out of memory")

// MissingFile is one expected output that is absent after a step, and why.
type MissingFile struct {
	SeqID  string
	Path   string
	Reason string
}

// StepOutcome is what running one step produced.
type StepOutcome struct {
	// Requested is the number of sequences given; Skipped those whose files
	// all existed before the step.
	Requested, Skipped int
	// Existing counts the files already present; Written the files this run
	// wrote.
	Existing, Written int
	// Missing lists every expected file absent afterwards, sorted by seq id
	// then path.
	Missing []MissingFile
	// Batches counts the batches run, split halves included.
	Batches int
	// Failure is the first failure a retry may cure (a crashed program);
	// nil when every batch ran to completion, even if files are missing.
	Failure error
}

// Engine runs steps: it skips what exists, truncates long sequences, packs
// batches under the token budget, splits a batch that runs out of memory and
// checks every output afterwards. Its Runner does the work.
type Engine struct {
	Runner   BatchRunner
	Settings *Settings
	Log      *slog.Logger
	// Leases, when set, make concurrent runs compute each artefact once
	// (dedupe.go); nil computes every missing file.
	Leases *lease.Leases
	// Device, when set, is the GPU's turn-taking (device.go): at most
	// KINFLOW_GPU_SLOTS batches on it at once, first come first served, and
	// batches of one step that wait together run as one (many small jobs
	// share the device batch by batch). nil: every batch runs at once (the
	// CPU worker's local steps, bounded by its activity slots).
	Device *Device
	// Layout names the cache folders (KINFLOW_CACHE_FOLDERS): it maps each
	// output's folder to its family. nil: the kinflow naming.
	Layout *embedding.Layout
}

// layout is the engine's Layout, or a bare one of the kinflow naming.
func (e *Engine) layout() *embedding.Layout {
	if e.Layout != nil {
		return e.Layout
	}
	return &embedding.Layout{}
}

// batchFolders maps the folders of items' outputs to their families' names
// (BatchJob.Folders); a folder of no family under the naming is left out.
func (e *Engine) batchFolders(items []SeqItem) map[string]string {
	l := e.layout()
	out := map[string]string{}
	for _, it := range items {
		for _, p := range it.Outputs {
			d := filepath.Dir(p)
			if f, ok := l.FamilyOfDir(d); ok {
				out[l.Folder(f)] = f.Name
			}
		}
	}
	return out
}

// batchSender is a BatchRunner that can send a batch ahead of the outcomes
// of earlier ones (a resident server's line, KINFLOW_STEP_SERVER_AHEAD):
// SendBatch returns once the batch is handed over, and the channel receives
// its outcome once (what RunBatch would return).
type batchSender interface {
	SendBatch(ctx context.Context, b BatchJob) (<-chan error, error)
}

// send is the runner's way to hand a batch over: SendBatch, or RunBatch to
// its end.
func (e *Engine) send(ctx context.Context, b BatchJob) (<-chan error, error) {
	if s, ok := e.Runner.(batchSender); ok {
		return s.SendBatch(ctx, b)
	}
	return settled(e.Runner.RunBatch(ctx, b)), nil
}

// ahead is how many batches one step run keeps in flight: the resident
// servers' window for a runner that sends ahead, else 1.
func (e *Engine) ahead() int {
	if _, ok := e.Runner.(batchSender); !ok {
		return 1
	}
	if e.Settings == nil || e.Settings.Pool.Ahead <= 0 {
		return stepserver.DefaultAhead
	}
	return e.Settings.Pool.Ahead
}

// batchLimiter is a BatchRunner whose batches are not bound by GPU memory
// and that sets its own batch size.
type batchLimiter interface {
	BatchLimits() (tokens, seqs int)
}

// StepRequest is one step to run.
type StepRequest struct {
	JobID   string
	StepKey string
	// Seqs are the step's sequences with their expected outputs (Sequence
	// untruncated; Outputs filled).
	Seqs []SeqItem
	// Log is the job's step log (may be nil).
	Log *JobLog
	// Share is whose work the step is: the fairness key and weight its
	// activity inherited from its job.
	Share Share
	// Progress is called with the number of expected files present, after
	// the initial scan and after every batch (may be nil).
	Progress func(filesDone, filesTotal int)
}

// limits are the token budget and sequence cap of one batch of step.
func (e *Engine) limits(step string) (budget, maxSeqs int) {
	if bl, ok := e.Runner.(batchLimiter); ok {
		return bl.BatchLimits()
	}
	return e.Settings.TokenBudget(step), e.Settings.MaxBatchSeqs
}

// RunStep runs one step to the end (or until ctx is done, when it returns
// ctx's error with what it has done so far). The run's stages are the
// methods of stepRun (steprun.go).
func (e *Engine) RunStep(ctx context.Context, req StepRequest) (StepOutcome, error) {
	r := &stepRun{e: e, ctx: ctx, req: req, missing: map[string]MissingFile{}}
	r.out.Requested = len(req.Seqs)
	if err := r.scan(); err != nil {
		return r.out, err
	}
	if refused, err := r.admit(); refused || err != nil {
		return r.out, err
	}
	r.report()
	if err := r.computeAll(); err != nil {
		return r.out, err
	}
	r.settle()
	return r.out, nil
}

// MissingOutputs lists the outputs that are absent or malformed.
func MissingOutputs(paths []string) []string {
	var out []string
	for _, p := range paths {
		if embedding.CheckFile(p) != nil {
			out = append(out, p)
		}
	}
	return out
}

// FormatMissing renders missing files as "seq_id: path" lines (the form of
// StepResult.Missing).
func FormatMissing(ms []MissingFile) []string {
	out := make([]string, 0, len(ms))
	for _, m := range ms {
		out = append(out, m.SeqID+": "+m.Path)
	}
	return out
}

// describeMissing is a one-paragraph account of missing files for errors and
// logs, at most limit entries.
func describeMissing(ms []MissingFile, limit int) string {
	var b strings.Builder
	for i, m := range ms {
		if i == limit {
			fmt.Fprintf(&b, "; and %d more", len(ms)-limit)
			break
		}
		if i > 0 {
			b.WriteString("; ")
		}
		fmt.Fprintf(&b, "%s: %s (%s)", m.SeqID, m.Path, m.Reason)
	}
	return b.String()
}
