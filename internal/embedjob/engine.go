package embedjob

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/lease"
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
}

// BatchRunner runs one batch: it writes the batch's missing outputs.
type BatchRunner interface {
	// Name is "command" or "synthetic" (shown in /health and logs).
	Name() string
	// RunBatch runs b. An error wrapping ErrOutOfMemory means the batch did
	// not fit the GPU: the caller splits it and tries again.
	RunBatch(ctx context.Context, b BatchJob) error
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
// ctx's error with what it has done so far).
func (e *Engine) RunStep(ctx context.Context, req StepRequest) (StepOutcome, error) {
	var out StepOutcome
	out.Requested = len(req.Seqs)
	maxRes := e.Settings.MaxResidues[req.StepKey]
	var todo []SeqItem
	total := 0
	// A real step program treats synthetic files as missing and replaces
	// them (internal/provenance); the synthetic one counts them as present.
	var synth map[string]bool
	if _, isSynthetic := e.Runner.(*syntheticServerRunner); !isSynthetic {
		var err error
		if synth, err = syntheticOutputs(req.Seqs); err != nil {
			return out, err
		}
	}
	for _, it := range req.Seqs {
		total += len(it.Outputs)
		it.MissingOutputs = MissingOutputs(it.Outputs)
		for _, p := range it.Outputs {
			if synth[p] && !slices.Contains(it.MissingOutputs, p) {
				it.MissingOutputs = append(it.MissingOutputs, p)
			}
		}
		out.Existing += len(it.Outputs) - len(it.MissingOutputs)
		if len(it.MissingOutputs) == 0 {
			out.Skipped++
			continue
		}
		it.OriginalLength = len(it.Sequence)
		if t := TruncateLong(it.Sequence, maxRes); t != it.Sequence {
			it.Sequence, it.Truncated = t, true
			req.Log.Printf("TRUNCATE job_id=%s step=%s seq_id=%s length=%d to=%d rule=first500+last500", req.JobID, req.StepKey, it.SeqID, it.OriginalLength, len(t))
		}
		todo = append(todo, it)
	}
	// The check before every write: a family made by another model is
	// refused (one line naming it, both fingerprints and the fix).
	admitted, err := e.admit(ctx, req, todo, synth)
	if err != nil {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		out.Failure = err
		for _, it := range todo {
			for _, p := range it.MissingOutputs {
				out.Missing = append(out.Missing, MissingFile{SeqID: it.SeqID, Path: p, Reason: "not written: " + err.Error()})
			}
		}
		return out, nil
	}
	done := out.Existing
	report := func() {
		if req.Progress != nil {
			req.Progress(done, total)
		}
	}
	report()
	missing := map[string]MissingFile{}
	var run func(b []SeqItem) error
	run = func(b []SeqItem) error {
		// Recheck: after a split, or a retry, some items may be complete.
		var items []SeqItem
		for _, it := range b {
			it.MissingOutputs = MissingOutputs(it.Outputs)
			if len(it.MissingOutputs) > 0 {
				items = append(items, it)
			}
		}
		if len(items) == 0 {
			return nil
		}
		out.Batches++
		job := BatchJob{JobID: req.JobID, StepKey: req.StepKey, Index: out.Batches, Items: items, Log: req.Log}
		req.Log.Printf("BATCH_START job_id=%s step=%s batch=%d seq_count=%d tokens=%d", req.JobID, req.StepKey, job.Index, len(items), BatchCost(items))
		if err := e.recheck(ctx, req, admitted, items); err != nil {
			if ctx.Err() != nil {
				return ctx.Err()
			}
			for _, it := range items {
				for _, p := range it.MissingOutputs {
					missing[p] = MissingFile{SeqID: it.SeqID, Path: p, Reason: "not written: " + err.Error()}
				}
			}
			if out.Failure == nil {
				out.Failure = err
			}
			return nil
		}
		budget, maxSeqs := e.limits(req.StepKey)
		err := e.Device.Run(ctx, job, budget, maxSeqs, e.Runner.RunBatch)
		// Count what the batch wrote whatever its exit: a program that
		// crashes half-way keeps the files it committed.
		var absent []MissingFile
		var wrote []string
		wroteBy := map[string]string{}
		for _, it := range items {
			for _, p := range it.MissingOutputs {
				if cerr := embedding.CheckFile(p); cerr == nil {
					wrote = append(wrote, p)
					wroteBy[p] = it.SeqID
				} else {
					reason := "not written by the step program"
					if !errors.Is(cerr, os.ErrNotExist) {
						// A malformed file would be counted as cached by every
						// planner: remove it so that it is computed again.
						_ = os.Remove(p)
						reason = "malformed output removed: " + cerr.Error()
					}
					absent = append(absent, MissingFile{SeqID: it.SeqID, Path: p, Reason: reason})
				}
			}
		}
		// Every file written gets its integrity record (size, time,
		// SHA-256) in its family's manifest, whoever wrote it: a one-shot
		// reference program records none. A file of the wrong width or
		// with non-finite values goes, like a malformed one.
		badContent, rerr := embedding.RecordWritten(wrote)
		if rerr != nil && ctx.Err() == nil {
			req.Log.Printf("RECORD_FAILED job_id=%s step=%s batch=%d error=%v", req.JobID, req.StepKey, job.Index, rerr)
		}
		for _, p := range wrote {
			if why, isBad := badContent[p]; isBad {
				_ = os.Remove(p)
				absent = append(absent, MissingFile{SeqID: wroteBy[p], Path: p, Reason: "malformed output removed: " + why})
				continue
			}
			out.Written++
			done++
			delete(missing, p)
		}
		report()
		switch {
		case err == nil || len(absent) == 0:
			for _, m := range absent {
				missing[m.Path] = m
			}
			req.Log.Printf("BATCH_DONE job_id=%s step=%s batch=%d missing=%d", req.JobID, req.StepKey, job.Index, len(absent))
			return nil
		case ctx.Err() != nil:
			return ctx.Err()
		case errors.Is(err, ErrOutOfMemory) && len(items) > 1 && len(absent) > 0:
			// Halves keep the longest-first order, so the first half holds
			// the long sequences and the second the short ones.
			h := len(items) / 2
			req.Log.Printf("BATCH_OOM job_id=%s step=%s batch=%d seq_count=%d: split into %d + %d", req.JobID, req.StepKey, job.Index, len(items), h, len(items)-h)
			if err := run(items[:h]); err != nil {
				return err
			}
			return run(items[h:])
		case errors.Is(err, ErrOutOfMemory):
			req.Log.Printf("BATCH_OOM job_id=%s step=%s batch=%d seq_id=%s: a single sequence does not fit, not retried", req.JobID, req.StepKey, job.Index, items[0].SeqID)
			for _, m := range absent {
				m.Reason = fmt.Sprintf("out of memory on a single sequence of %d residues", len(items[0].Sequence))
				missing[m.Path] = m
			}
			return nil
		default:
			req.Log.Printf("BATCH_FAILED job_id=%s step=%s batch=%d error=%v", req.JobID, req.StepKey, job.Index, err)
			for _, m := range absent {
				m.Reason = "step program failed: " + err.Error()
				missing[m.Path] = m
			}
			if out.Failure == nil {
				out.Failure = err
			}
			return nil
		}
	}
	compute := func(items []SeqItem) error {
		budget, maxSeqs := e.limits(req.StepKey)
		for _, b := range PackBatches(items, budget, maxSeqs) {
			if err := ctx.Err(); err != nil {
				return err
			}
			if err := run(b); err != nil {
				return err
			}
		}
		return nil
	}
	if e.Leases == nil {
		if err := compute(todo); err != nil {
			return out, err
		}
	} else {
		held := newHeldLeases(e.Leases)
		defer held.release()
		mine, others, err := held.claim(req.StepKey, todo)
		if err != nil {
			return out, err
		}
		if len(others) > 0 {
			req.Log.Printf("LEASE_WAIT job_id=%s step=%s seq_count=%d (computed by another worker)", req.JobID, req.StepKey, len(others))
		}
		if err := compute(mine); err != nil {
			return out, err
		}
		err = held.await(ctx, req.StepKey, others, func(n int) {
			out.Existing += n
			done += n
			report()
		}, compute)
		if err != nil {
			return out, err
		}
	}
	for _, m := range missing {
		out.Missing = append(out.Missing, m)
	}
	sort.Slice(out.Missing, func(i, j int) bool {
		if out.Missing[i].SeqID != out.Missing[j].SeqID {
			return out.Missing[i].SeqID < out.Missing[j].SeqID
		}
		return out.Missing[i].Path < out.Missing[j].Path
	})
	return out, nil
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
