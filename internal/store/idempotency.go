package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// IdempotencyWindow is how long a submit's Idempotency-Key is remembered:
// the common convention (Stripe keeps keys 24 hours), long enough for any
// client's retries, short enough that the table stays small.
const IdempotencyWindow = 24 * time.Hour

// IdempotencyKey is one remembered Idempotency-Key of one API key: the hash
// of the header's value, the hash of the request it came with, and the job
// that request created.
type IdempotencyKey struct {
	KeyID       int64     `gorm:"primaryKey;autoIncrement:false"`
	KeyHash     string    `gorm:"primaryKey;size:64"`
	RequestHash string    `gorm:"size:64;not null"`
	JobID       string    `gorm:"size:40;not null;index"`
	CreatedAt   time.Time `gorm:"not null;index"`
}

// TableName implements gorm's Tabler.
func (IdempotencyKey) TableName() string { return "idempotency_keys" }

// Idempotency is a submit's Idempotency-Key: KeyHash is the SHA-256 of the
// header's value, RequestHash the SHA-256 of the request's meaningful
// content (input rows and options).
type Idempotency struct {
	KeyHash     string
	RequestHash string
}

// SubmitResult is what ChargeAndCreateJobOnce did.
type SubmitResult struct {
	// Admitted is true when the job was charged and created (Replay nil)
	// or an earlier submit with the same key was found (Replay set).
	Admitted bool
	// Used is the key's counter for the day: after the charge when
	// admitted, else its current value.
	Used int64
	// Replay is the job an earlier submit with the same Idempotency-Key and
	// the same request created; nothing was charged this time.
	Replay *Job
	// Mismatch is true when the Idempotency-Key was used for a different
	// request within the window; nothing was done.
	Mismatch bool
}

// errNotAdmitted rolls back a submit transaction whose charge was refused.
var errNotAdmitted = errors.New("not admitted")

// ChargeAndCreateJobOnce is ChargeAndCreateJob with an Idempotency-Key: in
// the same transaction it first claims (job.KeyID, idem.KeyHash) in
// idempotency_keys. The claim is a primary key, so of any number of
// concurrent submits with one key exactly one charges and creates a job;
// the others wait for it (Postgres: ON CONFLICT waits for the first
// inserter's commit; SQLite: one writer at a time) and get its job as a
// Replay, or Mismatch when their request differs. A claim older than
// IdempotencyWindow, or whose job no longer exists, is replaced.
func (s *Store) ChargeAndCreateJobOnce(ctx context.Context, job *Job, stages []JobStage, day string, limit int64, idem Idempotency, now time.Time) (SubmitResult, error) {
	var out SubmitResult
	job.Status = JobSubmitting
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		txs := &Store{DB: tx, Dialect: s.Dialect}
		claimed, err := txs.claimIdempotencyKey(ctx, job, idem, now)
		if err != nil {
			return err
		}
		if !claimed {
			var prev IdempotencyKey
			if err := tx.Where("key_id = ? AND key_hash = ?", job.KeyID, idem.KeyHash).Take(&prev).Error; err != nil {
				return fmt.Errorf("read idempotency key: %w", err)
			}
			if prev.RequestHash != idem.RequestHash {
				out.Mismatch = true
				return nil
			}
			var j Job
			err := tx.Where("id = ?", prev.JobID).Take(&j).Error
			switch {
			case err == nil:
				out.Admitted, out.Replay = true, &j
				out.Used, err = txs.QuotaUsed(ctx, job.KeyID, day)
				return err
			case !errors.Is(err, gorm.ErrRecordNotFound):
				return fmt.Errorf("read job %s: %w", prev.JobID, err)
			}
			// The job is gone: the key is free again.
			if err := tx.Where("key_id = ? AND key_hash = ?", job.KeyID, idem.KeyHash).Delete(&IdempotencyKey{}).Error; err != nil {
				return fmt.Errorf("release idempotency key: %w", err)
			}
			if claimed, err = txs.claimIdempotencyKey(ctx, job, idem, now); err != nil {
				return err
			}
			if !claimed {
				return fmt.Errorf("claim idempotency key: %w", ErrConflict)
			}
		}
		// The job first, the charge last: the charge locks the key's
		// counter until the commit (ReserveQuota).
		if err := txs.CreateJob(ctx, job, stages); err != nil {
			return err
		}
		ok, used, err := txs.ReserveQuota(ctx, job.KeyID, day, job.Charge(), limit)
		out.Used = used
		if err != nil {
			return err
		}
		if !ok {
			// Neither the job nor the claim may outlive a refused charge.
			return errNotAdmitted
		}
		out.Admitted = true
		return nil
	})
	if errors.Is(err, errNotAdmitted) {
		return SubmitResult{Used: out.Used}, nil
	}
	if err != nil {
		return SubmitResult{}, err
	}
	return out, nil
}

// claimIdempotencyKey drops an expired claim of the key and inserts job's;
// false when a live claim exists.
func (s *Store) claimIdempotencyKey(ctx context.Context, job *Job, idem Idempotency, now time.Time) (bool, error) {
	db := s.DB.WithContext(ctx)
	if err := db.Exec("DELETE FROM idempotency_keys WHERE key_id = ? AND key_hash = ? AND created_at < ?",
		job.KeyID, idem.KeyHash, now.Add(-IdempotencyWindow).UTC()).Error; err != nil {
		return false, fmt.Errorf("expire idempotency key: %w", err)
	}
	res := db.Exec("INSERT INTO idempotency_keys (key_id, key_hash, request_hash, job_id, created_at) VALUES (?, ?, ?, ?, ?) ON CONFLICT (key_id, key_hash) DO NOTHING",
		job.KeyID, idem.KeyHash, idem.RequestHash, job.ID, now.UTC())
	if res.Error != nil {
		return false, fmt.Errorf("claim idempotency key: %w", res.Error)
	}
	return res.RowsAffected == 1, nil
}

// ExpireIdempotencyKeys removes the claims older than IdempotencyWindow and
// returns how many.
func (s *Store) ExpireIdempotencyKeys(ctx context.Context, now time.Time) (int64, error) {
	res := s.DB.WithContext(ctx).Where("created_at < ?", now.Add(-IdempotencyWindow).UTC()).Delete(&IdempotencyKey{})
	if res.Error != nil {
		return 0, fmt.Errorf("expire idempotency keys: %w", res.Error)
	}
	return res.RowsAffected, nil
}
