package embedjob

import (
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"sort"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// stepRun is one run of Engine.RunStep. Its methods are the run's stages in
// order: scan what exists, admit the runner's model to the families it will
// write, compute the missing files batch by batch (runBatch, verify what a
// batch wrote, settle what it left), and settle the step's outcome.
type stepRun struct {
	e   *Engine
	ctx context.Context
	req StepRequest
	out StepOutcome

	// synth holds the outputs that are synthetic files, which a real
	// runner replaces (nil for the synthetic runner).
	synth map[string]bool
	// todo are the sequences with a missing output, truncated.
	todo []SeqItem
	// admitted is the fingerprint admitted before the first write.
	admitted provenance.Fingerprint
	// done and total are the expected files present and expected.
	done, total int
	// missing are the files absent after their batch, by path; a later
	// batch that writes one removes it.
	missing map[string]MissingFile
}

// report calls the request's Progress with the files present.
func (r *stepRun) report() {
	if r.req.Progress != nil {
		r.req.Progress(r.done, r.total)
	}
}

// scan counts the files that exist and collects in todo the sequences with
// a missing output, truncating long ones.
func (r *stepRun) scan() error {
	req := r.req
	// A real step program treats synthetic files as missing and replaces
	// them (internal/provenance); the synthetic one counts them as present.
	if !r.e.Runner.Synthetic() {
		var err error
		if r.synth, err = syntheticOutputs(req.Seqs); err != nil {
			return err
		}
	}
	maxRes := r.e.Settings.MaxResidues[req.StepKey]
	for _, it := range req.Seqs {
		r.total += len(it.Outputs)
		it.MissingOutputs = MissingOutputs(it.Outputs)
		for _, p := range it.Outputs {
			if r.synth[p] && !slices.Contains(it.MissingOutputs, p) {
				it.MissingOutputs = append(it.MissingOutputs, p)
			}
		}
		r.out.Existing += len(it.Outputs) - len(it.MissingOutputs)
		if len(it.MissingOutputs) == 0 {
			r.out.Skipped++
			continue
		}
		it.OriginalLength = len(it.Sequence)
		if t := TruncateLong(it.Sequence, maxRes); t != it.Sequence {
			it.Sequence, it.Truncated = t, true
			req.Log.Printf("TRUNCATE job_id=%s step=%s seq_id=%s length=%d to=%d rule=first500+last500", req.JobID, req.StepKey, it.SeqID, it.OriginalLength, len(t))
		}
		r.todo = append(r.todo, it)
	}
	r.done = r.out.Existing
	return nil
}

// admit is the check before every write: a family made by another model is
// refused (one line naming it, both fingerprints and the fix). A refusal
// ends the run (refused true) with every missing file listed and the
// refusal as the outcome's Failure.
func (r *stepRun) admit() (refused bool, err error) {
	admitted, err := r.e.admit(r.ctx, r.req, r.todo, r.synth)
	if err == nil {
		r.admitted = admitted
		return false, nil
	}
	if r.ctx.Err() != nil {
		return true, r.ctx.Err()
	}
	r.out.Failure = err
	for _, it := range r.todo {
		for _, p := range it.MissingOutputs {
			r.out.Missing = append(r.out.Missing, MissingFile{SeqID: it.SeqID, Path: p, Reason: "not written: " + err.Error()})
		}
	}
	return true, nil
}

// computeAll computes todo: all of it without leases; with leases, the
// sequences this run claims, then those another worker holds once they
// appear (or are given up, when this run computes them).
func (r *stepRun) computeAll() error {
	if r.e.Leases == nil {
		return r.compute(r.todo)
	}
	held := newHeldLeases(r.e.Leases)
	defer held.release()
	mine, others, err := held.claim(r.req.StepKey, r.todo)
	if err != nil {
		return err
	}
	if len(others) > 0 {
		r.req.Log.Printf("LEASE_WAIT job_id=%s step=%s seq_count=%d (computed by another worker)", r.req.JobID, r.req.StepKey, len(others))
	}
	if err := r.compute(mine); err != nil {
		return err
	}
	return held.await(r.ctx, r.req.StepKey, others, func(n int) {
		r.out.Existing += n
		r.done += n
		r.report()
	}, r.compute)
}

// compute packs items into batches under the token budget and runs them,
// keeping up to the engine's ahead batches in flight (a resident server
// computes the next batch while this host checks the files of the one
// before) and settling them in the order they were sent.
func (r *stepRun) compute(items []SeqItem) error {
	budget, maxSeqs := r.e.limits(r.req.StepKey)
	ahead := r.e.ahead()
	var inFlight []*sentBatch
	var stop error
	for _, b := range PackBatches(items, budget, maxSeqs) {
		if stop = r.ctx.Err(); stop != nil {
			break
		}
		if sb := r.send(b, false); sb != nil {
			inFlight = append(inFlight, sb)
		}
		// Settle what is full or already answered, oldest first.
		for stop == nil && len(inFlight) > 0 && (len(inFlight) >= ahead || inFlight[0].answered()) {
			stop = r.finish(inFlight[0])
			inFlight = inFlight[1:]
		}
		if stop != nil {
			break
		}
	}
	// Every batch sent is waited for and its files checked, also when the
	// run stops (the pool ends the batches of a cancelled run at once).
	for _, sb := range inFlight {
		if err := r.finish(sb); stop == nil {
			stop = err
		}
	}
	return stop
}

// sentBatch is a batch handed to the runner whose outcome is still to be
// settled.
type sentBatch struct {
	job   BatchJob
	items []SeqItem
	done  <-chan error
	// retried marks a second try of an interrupted batch.
	retried bool
	got     bool
	err     error
}

// answered reports, without waiting, whether the outcome has come.
func (sb *sentBatch) answered() bool {
	if sb.got {
		return true
	}
	select {
	case sb.err = <-sb.done:
		sb.got = true
	default:
	}
	return sb.got
}

// outcome waits for the outcome.
func (sb *sentBatch) outcome() error {
	if !sb.got {
		sb.err, sb.got = <-sb.done, true
	}
	return sb.err
}

// runBatch runs one batch to its end (send, then finish): a split half, or
// the second try of an interrupted batch.
func (r *stepRun) runBatch(b []SeqItem, retried bool) error {
	sb := r.send(b, retried)
	if sb == nil {
		return nil
	}
	return r.finish(sb)
}

// send hands the items of b still missing an output to the runner, through
// the device's turn-taking. It returns nil when nothing is left to do or
// the batch was settled at once (its writer check failed).
func (r *stepRun) send(b []SeqItem, retried bool) *sentBatch {
	req := r.req
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
	r.out.Batches++
	job := BatchJob{JobID: req.JobID, StepKey: req.StepKey, Index: r.out.Batches, Items: items, Log: req.Log, Share: req.Share, Folders: r.e.batchFolders(items)}
	req.Log.Printf("BATCH_START job_id=%s step=%s batch=%d seq_count=%d tokens=%d share=%s", req.JobID, req.StepKey, job.Index, len(items), BatchCost(items), shareName(req.Share))
	if err := r.e.recheck(r.ctx, req, r.admitted, items); err != nil {
		if r.ctx.Err() != nil {
			return &sentBatch{job: job, items: items, done: settled(r.ctx.Err())}
		}
		for _, it := range items {
			for _, p := range it.MissingOutputs {
				r.missing[p] = MissingFile{SeqID: it.SeqID, Path: p, Reason: "not written: " + err.Error()}
			}
		}
		if r.out.Failure == nil {
			r.out.Failure = err
		}
		return nil
	}
	budget, maxSeqs := r.e.limits(req.StepKey)
	done, err := r.e.Device.Send(r.ctx, job, budget, maxSeqs, r.e.send)
	if err != nil {
		done = settled(err)
	}
	return &sentBatch{job: job, items: items, done: done, retried: retried}
}

// finish waits for a sent batch's outcome, verifies what it wrote and
// settles the rest (splitting it on out of memory). It returns an error
// only when the run must stop (ctx done).
func (r *stepRun) finish(sb *sentBatch) error {
	err := sb.outcome()
	absent := r.verify(sb.job, sb.items)
	r.report()
	return r.settleBatch(sb, err, absent)
}

// verify checks every file the batch was to write, whatever its exit (a
// program that crashes half-way keeps the files it committed): it records
// each written file's integrity and counts it, removes malformed ones, and
// returns the files still absent.
func (r *stepRun) verify(job BatchJob, items []SeqItem) []MissingFile {
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
	// Every file written gets its integrity record (size, time, SHA-256)
	// in its family's manifest, whoever wrote it: a one-shot reference
	// program records none. A file of the wrong width or with non-finite
	// values goes, like a malformed one.
	badContent, rerr := r.e.layout().RecordWritten(wrote)
	if rerr != nil && r.ctx.Err() == nil {
		r.req.Log.Printf("RECORD_FAILED job_id=%s step=%s batch=%d error=%v", r.req.JobID, r.req.StepKey, job.Index, rerr)
	}
	for _, p := range wrote {
		if why, isBad := badContent[p]; isBad {
			_ = os.Remove(p)
			absent = append(absent, MissingFile{SeqID: wroteBy[p], Path: p, Reason: "malformed output removed: " + why})
			continue
		}
		r.out.Written++
		r.done++
		delete(r.missing, p)
	}
	return absent
}

// settleBatch decides what a batch that ended with err and left absent
// files missing means: done, split in halves and run again (out of memory
// on several sequences), given up on (out of memory on one, or a failed
// program, which a retry may cure), or stopped (ctx done).
func (r *stepRun) settleBatch(sb *sentBatch, err error, absent []MissingFile) error {
	req, job, items := r.req, sb.job, sb.items
	var se *stepserver.ServerError
	switch {
	case err == nil || len(absent) == 0:
		for _, m := range absent {
			r.missing[m.Path] = m
		}
		req.Log.Printf("BATCH_DONE job_id=%s step=%s batch=%d missing=%d", req.JobID, req.StepKey, job.Index, len(absent))
		return nil
	case r.ctx.Err() != nil:
		return r.ctx.Err()
	case errors.Is(err, ErrOutOfMemory) && len(items) > 1 && len(absent) > 0:
		// Halves keep the longest-first order, so the first half holds the
		// long sequences and the second the short ones.
		h := len(items) / 2
		req.Log.Printf("BATCH_OOM job_id=%s step=%s batch=%d seq_count=%d: split into %d + %d", req.JobID, req.StepKey, job.Index, len(items), h, len(items)-h)
		if err := r.runBatch(items[:h], false); err != nil {
			return err
		}
		return r.runBatch(items[h:], false)
	case errors.Is(err, ErrOutOfMemory):
		req.Log.Printf("BATCH_OOM job_id=%s step=%s batch=%d seq_id=%s: a single sequence does not fit, not retried", req.JobID, req.StepKey, job.Index, items[0].SeqID)
		for _, m := range absent {
			m.Reason = fmt.Sprintf("out of memory on a single sequence of %d residues", len(items[0].Sequence))
			r.missing[m.Path] = m
		}
		return nil
	case errors.As(err, &se) && se.Interrupted && !sb.retried:
		// The server ended with other batches in flight beside this one:
		// it may have died of another, so this one gets one more try.
		req.Log.Printf("BATCH_RETRY job_id=%s step=%s batch=%d error=%v", req.JobID, req.StepKey, job.Index, err)
		return r.runBatch(items, true)
	default:
		req.Log.Printf("BATCH_FAILED job_id=%s step=%s batch=%d error=%v", req.JobID, req.StepKey, job.Index, err)
		for _, m := range absent {
			m.Reason = "step program failed: " + err.Error()
			r.missing[m.Path] = m
		}
		if r.out.Failure == nil {
			r.out.Failure = err
		}
		return nil
	}
}

// settle lists in the outcome every file still missing, sorted by seq id
// then path.
func (r *stepRun) settle() {
	for _, m := range r.missing {
		r.out.Missing = append(r.out.Missing, m)
	}
	sort.Slice(r.out.Missing, func(i, j int) bool {
		if r.out.Missing[i].SeqID != r.out.Missing[j].SeqID {
			return r.out.Missing[i].SeqID < r.out.Missing[j].SeqID
		}
		return r.out.Missing[i].Path < r.out.Missing[j].Path
	})
}

// shareName is how a step log names a batch's share.
func shareName(s Share) string {
	if s.Key == "" {
		return "-"
	}
	return fmt.Sprintf("%s/%g", s.Key, s.Weight)
}
