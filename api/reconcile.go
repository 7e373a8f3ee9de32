package api

import (
	"context"
	"errors"
	"os"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/store"
)

// A submit goes charge + job row (one transaction, state Submitting) →
// input file (atomic) → workflow start (id prediction:<jobId>, a second
// start refused) → Pending. A crash between two steps leaves a Submitting
// job; the reconciler below finishes it: input present → start the
// workflow (an "already started" answer counts as started) and mark it
// Pending; input absent → refund the charge and remove the job and its
// folder. Several API processes may reconcile at once: every transition is
// conditional on the state, and the refund happens in the same transaction
// as the job's removal, so it happens once.

// DefaultSubmitReconcileAfter is the default age of a Submitting job before
// the reconciler takes it over (KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS). A
// live submit spends milliseconds to seconds between the charge and the
// queue (writing at most a 128 MiB input, one Temporal RPC); two minutes
// leaves a wide margin so that the reconciler never races a live request.
const DefaultSubmitReconcileAfter = 2 * time.Minute

// submitReconcileBatch is the most stale submits handled per pass: a pass
// stays short, and the next pass takes the rest.
const submitReconcileBatch = 100

// SubmitReconcileEvery is how often the api process looks for stale
// submits; a crashed submit is settled within SubmitReconcileAfter plus this
// (plus the time until an api process runs again).
func SubmitReconcileEvery(after time.Duration) time.Duration {
	return min(max(after/4, time.Second), 30*time.Second)
}

func (s *Server) submitReconcileAfter() time.Duration {
	if s.deps.Config != nil && s.deps.Config.SubmitReconcileAfter > 0 {
		return s.deps.Config.SubmitReconcileAfter
	}
	return DefaultSubmitReconcileAfter
}

// ReconcileSubmits settles the submits that have been Submitting for longer
// than KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS; it returns how many it queued
// and how many it undid. A job whose workflow cannot be started now (Temporal
// down) stays Submitting for the next pass.
func (s *Server) ReconcileSubmits(ctx context.Context) (queued, undone int, err error) {
	jobs, err := s.deps.Store.StaleSubmits(ctx, s.now().Add(-s.submitReconcileAfter()), submitReconcileBatch)
	if err != nil {
		return 0, 0, err
	}
	for _, j := range jobs {
		log := s.log.With("job_id", j.ID, "rows", j.RequestedRows)
		if _, statErr := os.Stat(s.mediaPath(j.InputPath)); statErr == nil {
			if err := s.startJob(ctx, j.ID); err != nil && !alreadyStarted(err) {
				log.Warn("submit.reconcile_start_failed", "error", err)
				continue
			}
			if _, err := s.deps.Store.MarkQueued(ctx, j.ID); err != nil {
				log.Warn("submit.reconcile_mark_failed", "error", err)
				continue
			}
			log.Info("submit.reconciled_queued")
			queued++
			continue
		}
		if merr := s.mediaAway(true); merr != nil {
			// The input may be there, on a media root that is away:
			// settle it once the root is back.
			log.Warn("submit.reconcile_media_unavailable", "error", merr)
			continue
		}
		ok, err := s.deps.Store.AbandonSubmit(ctx, j.ID, "", true, s.now())
		if err != nil {
			log.Warn("submit.reconcile_undo_failed", "error", err)
			continue
		}
		if !ok {
			// Not Submitting any more: a slow live submit queued it after
			// our look at its input, or another reconciler undid it (and
			// cleans up itself). Its folder is not ours to remove.
			continue
		}
		// The folder may hold a temporary file of the cut-off write.
		if rmErr := os.RemoveAll(s.mediaPath(jobfiles.DirRel(j.ID))); rmErr != nil {
			log.Warn("submit.reconcile_cleanup_failed", "error", rmErr)
		}
		log.Info("submit.reconciled_refunded")
		undone++
	}
	return queued, undone, nil
}

// RunStatusListener relays the database's job-change notices to the status
// cache until ctx ends (Postgres; on SQLite it returns at once), so that
// changes written by worker processes reach waiting requests at once.
func (s *Server) RunStatusListener(ctx context.Context) {
	if s.deps.Store != nil {
		s.deps.Store.ListenJobChanges(ctx, s.log)
	}
}

// RunSubmitReconciler runs ReconcileSubmits (and removes expired
// Idempotency-Keys) at once and then every SubmitReconcileEvery until ctx
// ends.
func (s *Server) RunSubmitReconciler(ctx context.Context) {
	// Jobs whose workflow closed without their row saying so (reconcile_jobs.go).
	go s.RunJobReconciler(ctx)
	// Finished jobs' folders past KINFLOW_JOB_RETENTION_DAYS (retention.go).
	go s.RunRetention(ctx)
	// The embedding cache's size and budget (cachegc.go).
	go s.RunCacheGC(ctx)
	t := time.NewTicker(SubmitReconcileEvery(s.submitReconcileAfter()))
	defer t.Stop()
	for {
		if _, _, err := s.ReconcileSubmits(ctx); err != nil && ctx.Err() == nil {
			s.log.Warn("submit.reconcile_failed", "error", err)
		}
		if _, err := s.deps.Store.ExpireIdempotencyKeys(ctx, s.now()); err != nil && ctx.Err() == nil {
			s.log.Warn("submit.expire_idempotency_keys_failed", "error", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// alreadyStarted reports whether err is Temporal's answer to a second start
// of the same workflow id: the first start went through.
func alreadyStarted(err error) bool {
	var as *serviceerror.WorkflowExecutionAlreadyStarted
	return errors.As(err, &as)
}

// crashPointEnv names a test-only variable: when it equals the name of a
// step of submit, the process kills itself with SIGKILL there, so that the
// e2e tests can crash a real api process at each step. Unset in production.
const crashPointEnv = "KINFLOW_TEST_CRASH_POINT"

var crashAt = sync.OnceValue(func() string { return os.Getenv(crashPointEnv) })

// crashPoint kills the process at the named step when crashPointEnv says so.
func crashPoint(name string) {
	if crashAt() == name {
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {} // SIGKILL is not delivered synchronously
	}
}

// jobStatusOnWire is a job's status as the API shows it: Submitting is an
// internal state and reads as Pending.
func jobStatusOnWire(st string) string {
	if st == store.JobSubmitting {
		return store.JobPending
	}
	return st
}
