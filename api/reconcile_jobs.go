package api

import (
	"context"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// The job reconciler: a job's row and its workflow must agree in the end, so
// that every job ends in a state its owner can see. A workflow closed without
// its row saying so — failed after its own failure path could not reach the
// database, terminated or cancelled from the Temporal UI or CLI, timed out —
// leaves its job Pending or Processing with its rows charged. Every
// JobReconcileEvery the api process looks at the next JobReconcileBatch
// running jobs (in id order, wrapping round), asks Temporal how the workflow
// of each one submitted at least JobReconcileMinAge ago stands, and marks
// those whose workflow has closed Failed with a reason, refunding their rows.
// store.FinishJob decides under a row lock in one transaction, so of several
// api processes (or a late Finalize) exactly one finishes and refunds the
// job.

// JobWorkflows reports how a job's workflow stands; the Temporal-backed
// JobStarter (workflows.Starter) implements it. A JobStarter that does not
// turns the job reconciler off.
type JobWorkflows interface {
	// JobWorkflowState answers "Running", "NotFound", or how the workflow
	// closed: "Completed", "Failed", "Canceled", "Terminated", "TimedOut",
	// "ContinuedAsNew".
	JobWorkflowState(ctx context.Context, jobID string) (string, error)
}

const (
	// JobReconcileEvery is the pause between two passes. With
	// JobReconcileBatch it checks 1,200 running jobs a minute (20 Temporal
	// reads a second at most): any stranded job among that many is found
	// within a minute.
	JobReconcileEvery = 5 * time.Second
	// JobReconcileBatch is the most jobs one pass checks.
	JobReconcileBatch = 100
	// JobReconcileMinAge is how long a job has been submitted before a
	// pass asks Temporal about it. Nearly every job ends well within it,
	// and asking about each one of a burst of small jobs (a describe
	// each, up to 20 a second) was a tenth of the Temporal server's
	// persistence requests for them; a job whose workflow closed early
	// is found a few seconds later instead.
	JobReconcileMinAge = 15 * time.Second
)

// jobCursor is where the next pass of the job reconciler starts.
type jobCursor struct {
	mu    sync.Mutex
	after string
}

var jobCursors sync.Map // *Server → *jobCursor

func (s *Server) jobCursor() *jobCursor {
	c, _ := jobCursors.LoadOrStore(s, &jobCursor{})
	return c.(*jobCursor)
}

// ReconcileJobs runs one pass of the job reconciler over at most batch
// running jobs and returns how many it marked Failed.
func (s *Server) ReconcileJobs(ctx context.Context, batch int) (int, error) {
	wf, ok := s.deps.Jobs.(JobWorkflows)
	if !ok {
		return 0, nil
	}
	cur := s.jobCursor()
	cur.mu.Lock()
	defer cur.mu.Unlock()
	jobs, err := s.deps.Store.RunningJobs(ctx, cur.after, batch)
	if err != nil {
		return 0, err
	}
	if len(jobs) < batch {
		cur.after = "" // the next pass starts again from the first
	} else {
		cur.after = jobs[len(jobs)-1].ID
	}
	failed := 0
	for _, j := range jobs {
		if s.now().Sub(j.SubmittedAt) < JobReconcileMinAge {
			continue
		}
		state, err := wf.JobWorkflowState(ctx, j.ID)
		if err != nil {
			if ctx.Err() != nil {
				return failed, ctx.Err()
			}
			// Temporal unreachable: nothing is known; the next pass asks again.
			s.log.Warn("job.reconcile_describe_failed", "job_id", j.ID, "error", err)
			return failed, nil
		}
		msg := closedWorkflowMessage(state)
		if msg == "" {
			continue
		}
		if state == "NotFound" && s.now().Sub(j.SubmittedAt) < s.submitReconcileAfter() {
			// A start that has not reached the workflow store yet: wait.
			continue
		}
		first, err := s.deps.Store.FinishJob(ctx, j.ID, store.JobFailed, msg, store.Refund{Rows: j.RequestedRows}, j.Synthetic, "", s.now().UTC())
		if err != nil {
			s.log.Warn("job.reconcile_finish_failed", "job_id", j.ID, "error", err)
			continue
		}
		if first {
			failed++
			s.log.Info("job.reconciled_failed", "job_id", j.ID, "workflow", state, "refunded", j.RequestedRows)
		}
	}
	return failed, nil
}

// closedWorkflowMessage is the job's message for a workflow in state, or ""
// when the workflow still runs. It names what happened without the
// workflow's own failure text (server paths, hosts).
func closedWorkflowMessage(state string) string {
	const tail = " Its rows were refunded; please submit it again."
	switch state {
	case "Running", "ContinuedAsNew":
		return ""
	case "Terminated":
		return "The job was stopped by an operator (its workflow was terminated)." + tail
	case "Canceled":
		return "The job was cancelled (its workflow was cancelled before it could record a result)." + tail
	case "TimedOut":
		return "The job ran past its time limit (its workflow timed out)." + tail
	case "NotFound":
		return "The job's workflow no longer exists." + tail
	case "Completed":
		// Finalize records the job before the workflow completes; this is
		// only reached by a row that lost that write.
		return "The job ended without recording its result." + tail
	default:
		return "The job failed and could not record why (its workflow " + strings.ToLower(state) + ")." + tail
	}
}

// RunJobReconciler runs ReconcileJobs every JobReconcileEvery until ctx
// ends (started by RunSubmitReconciler, so that every api process runs it).
func (s *Server) RunJobReconciler(ctx context.Context) {
	t := time.NewTicker(JobReconcileEvery)
	defer t.Stop()
	for {
		if _, err := s.ReconcileJobs(ctx, JobReconcileBatch); err != nil && ctx.Err() == nil {
			s.log.Warn("job.reconcile_failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
