package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// This file holds the queries of the job worker: it moves a job through its
// states and records its stages and events as it goes, so the API answers
// from the database alone.

// Job returns job id, or ErrNotFound.
func (s *Store) Job(ctx context.Context, id string) (*Job, error) {
	var j Job
	err := s.DB.WithContext(ctx).Where("id = ?", id).Take(&j).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load job %s: %w", id, err)
	}
	return &j, nil
}

// StartJob moves a Pending (or still Submitting: its workflow started
// before the API marked it queued) job to Processing and resets its counters and
// stages (a re-run after a crash starts the stages afresh; cached artefacts
// make the repeat cheap). It keeps the first start time.
func (s *Store) StartJob(ctx context.Context, id string, now time.Time) error {
	return s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		res := tx.Model(&Job{}).Where("id = ? AND status IN ?", id, []string{JobSubmitting, JobPending, JobProcessing}).
			Updates(map[string]any{
				"status": JobProcessing, "started_at": gorm.Expr("COALESCE(started_at, ?)", now),
				"total_molecules": 0, "molecules_processed": 0, "invalid_rows": 0, "total_predictions": 0, "predictions_made": 0,
			})
		if res.Error != nil {
			return fmt.Errorf("start job %s: %w", id, res.Error)
		}
		if err := tx.Where("job_id = ? AND kind = ?", id, EventGPUPrecompute).Delete(&JobEvent{}).Error; err != nil {
			return fmt.Errorf("clear events of job %s: %w", id, err)
		}
		return tx.Model(&JobStage{}).Where("job_id = ?", id).Updates(map[string]any{
			"status": "pending", "started_at": nil, "completed_at": nil, "message": "",
			"molecules_total": 0, "molecules_processed": 0, "invalid_rows": 0, "predictions_total": 0, "predictions_made": 0,
			"embedding_enabled": true, "embedding_state": "pending", "embedding_total": 0, "embedding_cached": 0,
			"embedding_need": 0, "embedding_computed": 0, "embedding_updated_at": nil,
		}).Error
	})
}

// Stage returns stage index of job jobID, or ErrNotFound.
func (s *Store) Stage(ctx context.Context, jobID string, index int) (*JobStage, error) {
	var st JobStage
	err := s.DB.WithContext(ctx).Where("job_id = ? AND stage_index = ?", jobID, index).Take(&st).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("load stage %d of job %s: %w", index, jobID, err)
	}
	return &st, nil
}

// UpdateStage sets the given columns of one stage.
func (s *Store) UpdateStage(ctx context.Context, jobID string, index int, cols map[string]any) error {
	err := s.DB.WithContext(ctx).Model(&JobStage{}).Where("job_id = ? AND stage_index = ?", jobID, index).Updates(cols).Error
	if err != nil {
		return fmt.Errorf("update stage %d of job %s: %w", index, jobID, err)
	}
	return nil
}

// UpdateJob sets the given columns of one job.
func (s *Store) UpdateJob(ctx context.Context, jobID string, cols map[string]any) error {
	if err := s.DB.WithContext(ctx).Model(&Job{}).Where("id = ?", jobID).Updates(cols).Error; err != nil {
		return fmt.Errorf("update job %s: %w", jobID, err)
	}
	return nil
}

// SetEmbeddingComputed raises a stage's computed-file count; it never lowers
// it, so a late or repeated tracker write cannot move progress backwards.
func (s *Store) SetEmbeddingComputed(ctx context.Context, jobID string, index, computed int, now time.Time) error {
	err := s.DB.WithContext(ctx).Model(&JobStage{}).
		Where("job_id = ? AND stage_index = ? AND embedding_computed < ?", jobID, index, computed).
		Updates(map[string]any{"embedding_computed": computed, "embedding_updated_at": now}).Error
	if err != nil {
		return fmt.Errorf("update progress of stage %d of job %s: %w", index, jobID, err)
	}
	return nil
}

// Progress is one stage's embedding count for SetEmbeddingComputedMany.
type Progress struct {
	JobID    string
	Stage    int
	Computed int
}

// SetEmbeddingComputedMany stores many stages' counts in one transaction
// (each only raises its stage's count, as SetEmbeddingComputed does): the
// progress trackers of one worker write together, one transaction per
// interval instead of one per tracker, which is what keeps a single-writer
// database (SQLite) responsive with a hundred jobs embedding at once.
func (s *Store) SetEmbeddingComputedMany(ctx context.Context, ps []Progress, now time.Time) error {
	if len(ps) == 0 {
		return nil
	}
	return s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		for _, p := range ps {
			if err := tx.Model(&JobStage{}).
				Where("job_id = ? AND stage_index = ? AND embedding_computed < ?", p.JobID, p.Stage, p.Computed).
				Updates(map[string]any{"embedding_computed": p.Computed, "embedding_updated_at": now}).Error; err != nil {
				return fmt.Errorf("update progress of stage %d of job %s: %w", p.Stage, p.JobID, err)
			}
		}
		return nil
	})
}

// AddEvent records one job event, once per non-empty Key; stored reports
// whether this call stored it. Events of a job are kept to the newest
// keep per kind (the contract keeps the last 20 gpuPrecompute events).
//
// Two statements: the insert, which the unique index on (job_id, event_key)
// turns into nothing for a key already stored (migration 0012), and the
// trim, which deletes nothing until a kind passes keep. On Postgres each is
// its own transaction (a trim that deletes nothing writes nothing to
// commit); on SQLite, where every writing statement takes the one writer's
// turn, both share one. When a separate trim fails the event is stored all
// the same (stored is true with the error): a retry of the caller finds it
// stored, and the next event of its kind trims.
func (s *Store) AddEvent(ctx context.Context, ev *JobEvent, keep int) (stored bool, err error) {
	db := s.DB.WithContext(ctx)
	if s.Dialect == SQLite {
		err = db.Transaction(func(tx *gorm.DB) error {
			stored, err = addEvent(tx, ev, keep)
			return err
		})
		return stored && err == nil, err
	}
	return addEvent(db, ev, keep)
}

// addEvent is AddEvent's two statements on db.
func addEvent(db *gorm.DB, ev *JobEvent, keep int) (bool, error) {
	res := db.Clauses(clause.OnConflict{DoNothing: true}).Create(ev)
	if res.Error != nil {
		return false, fmt.Errorf("record event of job %s: %w", ev.JobID, res.Error)
	}
	if res.RowsAffected == 0 {
		// Recorded again by a retried workflow task: already stored.
		return false, nil
	}
	if keep > 0 {
		// job_id first: the change notice names the job (changedJobIDs).
		old := db.Model(&JobEvent{}).Select("id").Where("job_id = ? AND kind = ?", ev.JobID, ev.Kind).Order("id DESC").Offset(keep)
		if err := db.Where("job_id = ? AND id IN (?)", ev.JobID, old).Delete(&JobEvent{}).Error; err != nil {
			return true, fmt.Errorf("trim events of job %s: %w", ev.JobID, err)
		}
	}
	return true, nil
}

// Refund is what a finished job gives back to its key's quota: Rows in
// all, of which Cached rows got every prediction from the prediction cache
// (the rest got no prediction).
type Refund struct {
	Rows   int
	Cached int
}

// FinishJob records a job's end: status, message, refund and completion time,
// once. It answers false when the job had already finished (a retried
// Finalize refunds nothing twice).
func (s *Store) FinishJob(ctx context.Context, jobID, status, message string, refund Refund, synthetic bool, outputPath string, now time.Time) (bool, error) {
	var first bool
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		var j Job
		if err := tx.Clauses(lockingClause(s.Dialect)...).Where("id = ?", jobID).Take(&j).Error; err != nil {
			return fmt.Errorf("load job %s: %w", jobID, err)
		}
		if j.Status == JobCompleted || j.Status == JobFailed {
			return nil
		}
		first = true
		// Rows credited at submit (the cache held them) were never
		// charged: the refund gives back only what was charged beyond
		// them, and the job reports at least them as refunded.
		quotaRefund := 0
		if j.QuotaCreditRows > 0 {
			refund.Rows = min(j.RequestedRows, max(refund.Rows, j.QuotaCreditRows))
			quotaRefund = refund.Rows - j.QuotaCreditRows
		} else {
			quotaRefund = refund.Rows
		}
		cols := map[string]any{"status": status, "error_message": message, "completed_at": now,
			"refunded_rows": refund.Rows, "refunded_cached_rows": refund.Cached, "synthetic": synthetic, "output_path": outputPath}
		if j.StartedAt == nil {
			cols["started_at"] = now
		}
		if err := tx.Model(&Job{}).Where("id = ?", jobID).Updates(cols).Error; err != nil {
			return fmt.Errorf("finish job %s: %w", jobID, err)
		}
		if quotaRefund > 0 {
			// The refund goes to the day the rows were charged to.
			return (&Store{DB: tx, Dialect: s.Dialect}).RefundQuota(ctx, j.KeyID, QuotaDay(j.SubmittedAt), int64(quotaRefund))
		}
		return nil
	})
	return first, err
}

// lockingClause locks the selected row on Postgres; SQLite's immediate
// transactions already serialise writers.
func lockingClause(d Dialect) []clause.Expression {
	if d == Postgres {
		return []clause.Expression{clause.Locking{Strength: "UPDATE"}}
	}
	return nil
}
