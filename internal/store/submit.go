package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// JobSubmitting is the state of a job between the quota charge and the
// start of its workflow. It is internal: the API shows it as Pending, it is
// not counted in anyone's queuePosition, and a job left in it by a crash is
// finished by the submit reconciler (started, or refunded and removed).
const JobSubmitting = "Submitting"

// ChargeAndCreateJob reserves job.RequestedRows rows (less
// job.QuotaCreditRows, the rows the prediction cache already holds) on key
// job.KeyID's counter for day (within limit, ReserveQuota) and inserts job,
// in state Submitting, with its stages (CreateJob), in one transaction: after a crash either
// both exist or neither does. ok is false, and nothing is written, when the
// charge would pass limit; used is the counter after the charge when ok,
// else its current value.
func (s *Store) ChargeAndCreateJob(ctx context.Context, job *Job, stages []JobStage, day string, limit int64) (ok bool, used int64, err error) {
	job.Status = JobSubmitting
	err = s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		txs := &Store{DB: tx, Dialect: s.Dialect}
		// The job first, the charge last: the charge locks the key's
		// counter until the commit (ReserveQuota).
		if err := txs.CreateJob(ctx, job, stages); err != nil {
			return err
		}
		var err error
		if ok, used, err = txs.ReserveQuota(ctx, job.KeyID, day, job.Charge(), limit); err != nil {
			return err
		}
		if !ok {
			return errNotAdmitted
		}
		return nil
	})
	if errors.Is(err, errNotAdmitted) {
		return false, used, nil
	}
	if err != nil {
		return false, 0, err
	}
	return ok, used, nil
}

// Charge is what the submit of j took from the quota: its rows less
// those the prediction cache already held.
func (j *Job) Charge() int64 { return int64(max(0, j.RequestedRows-j.QuotaCreditRows)) }

// MarkQueued moves job id from Submitting to Pending once its workflow has
// started. It reports false when the job is no longer Submitting: already
// picked up by the worker (fine), or removed by the reconciler.
func (s *Store) MarkQueued(ctx context.Context, id string) (bool, error) {
	res := s.DB.WithContext(ctx).Model(&Job{}).Where("id = ? AND status = ?", id, JobSubmitting).Update("status", JobPending)
	if res.Error != nil {
		return false, fmt.Errorf("mark job %s queued: %w", id, res.Error)
	}
	return res.RowsAffected == 1, nil
}

// AbandonSubmit undoes the submit of job id if it is still Submitting: its
// charge (RequestedRows on the quota day of SubmittedAt) is refunded in the
// same transaction. With remove the job and its stages are deleted (nothing
// is left of a submit the caller never heard back from); otherwise the job
// is kept as Failed with msg and the refund recorded. It reports whether it
// did anything, so that of two racing callers exactly one refunds. Either
// way the job's Idempotency-Key is released, so that a retry submits anew.
func (s *Store) AbandonSubmit(ctx context.Context, id, msg string, remove bool, now time.Time) (bool, error) {
	done := false
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var j Job
		err := tx.Where("id = ? AND status = ?", id, JobSubmitting).Take(&j).Error
		if errors.Is(err, gorm.ErrRecordNotFound) {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read job %s: %w", id, err)
		}
		var res *gorm.DB
		if remove {
			if err := tx.Where("job_id = ?", id).Delete(&JobStage{}).Error; err != nil {
				return fmt.Errorf("delete stages of job %s: %w", id, err)
			}
			if err := tx.Where("job_id = ?", id).Delete(&JobEvent{}).Error; err != nil {
				return fmt.Errorf("delete events of job %s: %w", id, err)
			}
			res = tx.Where("id = ? AND status = ?", id, JobSubmitting).Delete(&Job{})
		} else {
			res = tx.Model(&Job{}).Where("id = ? AND status = ?", id, JobSubmitting).Updates(map[string]any{
				"status": JobFailed, "error_message": msg, "refunded_rows": j.RequestedRows, "completed_at": now.UTC()}) // net nothing
		}
		if res.Error != nil {
			return fmt.Errorf("abandon job %s: %w", id, res.Error)
		}
		if res.RowsAffected != 1 {
			return nil
		}
		// A refunded submit frees its Idempotency-Key: a retry submits anew.
		if err := tx.Where("job_id = ?", id).Delete(&IdempotencyKey{}).Error; err != nil {
			return fmt.Errorf("release idempotency key of job %s: %w", id, err)
		}
		if err := (&Store{DB: tx, Dialect: s.Dialect}).RefundQuota(ctx, j.KeyID, QuotaDay(j.SubmittedAt), j.Charge()); err != nil {
			return fmt.Errorf("job %s: %w", id, err)
		}
		done = true
		return nil
	})
	return done, err
}

// StaleSubmits are the jobs still Submitting that were submitted before
// before, oldest first, at most limit.
func (s *Store) StaleSubmits(ctx context.Context, before time.Time, limit int) ([]Job, error) {
	var js []Job
	err := s.DB.WithContext(ctx).Where("status = ? AND submitted_at < ?", JobSubmitting, before.UTC()).
		Order("submitted_at").Limit(limit).Find(&js).Error
	if err != nil {
		return nil, fmt.Errorf("list stale submits: %w", err)
	}
	return js, nil
}
