package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"gorm.io/gorm"
)

// Job statuses, spelled as on the wire.
const (
	JobPending    = "Pending"
	JobProcessing = "Processing"
	JobCompleted  = "Completed"
	JobFailed     = "Failed"
)

// EventGPUPrecompute is the JobEvent kind of a GPU-precompute record, served
// in the status's gpuPrecompute object.
const EventGPUPrecompute = "gpu_precompute"

// CreateJob inserts job and its stage rows in one transaction.
func (s *Store) CreateJob(ctx context.Context, job *Job, stages []JobStage) error {
	err := s.DB.WithContext(ctx).Transaction(func(tx *gorm.DB) error {
		if err := tx.Create(job).Error; err != nil {
			return err
		}
		if len(stages) > 0 {
			return tx.Create(&stages).Error
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("create job %s: %w", job.ID, err)
	}
	return nil
}

// JobOwnedBy is job id if key keyID submitted it; ErrNotFound otherwise, so
// that another key's job is indistinguishable from an unknown one.
func (s *Store) JobOwnedBy(ctx context.Context, id string, keyID int64) (*Job, error) {
	var j Job
	err := s.DB.WithContext(ctx).Where("id = ? AND key_id = ?", id, keyID).Take(&j).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil, ErrNotFound
	}
	if err != nil {
		return nil, fmt.Errorf("read job %s: %w", id, err)
	}
	return &j, nil
}

// JobStages are job id's stages in index order.
func (s *Store) JobStages(ctx context.Context, id string) ([]JobStage, error) {
	var st []JobStage
	if err := s.DB.WithContext(ctx).Where("job_id = ?", id).Order("stage_index").Find(&st).Error; err != nil {
		return nil, fmt.Errorf("read stages of job %s: %w", id, err)
	}
	return st, nil
}

// QueuePosition is 1 + the number of Pending jobs (any owner) submitted
// before submittedAt.
func (s *Store) QueuePosition(ctx context.Context, submittedAt time.Time) (int, error) {
	var n int64
	err := s.DB.WithContext(ctx).Model(&Job{}).Where("status = ? AND submitted_at < ?", JobPending, submittedAt.UTC()).Count(&n).Error
	if err != nil {
		return 0, fmt.Errorf("count queued jobs: %w", err)
	}
	return int(n) + 1, nil
}

// PendingSubmitTimes are the submit times of the first limit Pending jobs
// (any owner), oldest first, and whether they are all the Pending jobs: one
// read that answers every Pending job's QueuePosition.
func (s *Store) PendingSubmitTimes(ctx context.Context, limit int) ([]time.Time, bool, error) {
	var ts []time.Time
	err := s.DB.WithContext(ctx).Model(&Job{}).Where("status = ?", JobPending).
		Order("submitted_at").Limit(limit+1).Pluck("submitted_at", &ts).Error
	if err != nil {
		return nil, false, fmt.Errorf("read queued jobs: %w", err)
	}
	if len(ts) > limit {
		return ts[:limit], false, nil
	}
	return ts, true, nil
}

// GPUPrecomputeEvents are the last limit gpu_precompute events of job id,
// oldest first.
func (s *Store) GPUPrecomputeEvents(ctx context.Context, id string, limit int) ([]JobEvent, error) {
	var ev []JobEvent
	err := s.DB.WithContext(ctx).Where("job_id = ? AND kind = ?", id, EventGPUPrecompute).
		Order("created_at DESC, id DESC").Limit(limit).Find(&ev).Error
	if err != nil {
		return nil, fmt.Errorf("read GPU precompute events of job %s: %w", id, err)
	}
	reverse(ev)
	return ev, nil
}

// RecentGPUPrecomputeEvents are the last limit gpu_precompute events of all
// jobs, oldest first.
func (s *Store) RecentGPUPrecomputeEvents(ctx context.Context, limit int) ([]JobEvent, error) {
	var ev []JobEvent
	err := s.DB.WithContext(ctx).Where("kind = ?", EventGPUPrecompute).
		Order("created_at DESC, id DESC").Limit(limit).Find(&ev).Error
	if err != nil {
		return nil, fmt.Errorf("read recent GPU precompute events: %w", err)
	}
	reverse(ev)
	return ev, nil
}

func reverse[T any](s []T) {
	for i, j := 0, len(s)-1; i < j; i, j = i+1, j-1 {
		s[i], s[j] = s[j], s[i]
	}
}

// JobCursor is a position in a key's list of jobs, newest first: the list
// goes on with the jobs submitted before SubmittedAt, or at that instant
// with a smaller id.
type JobCursor struct {
	SubmittedAt time.Time
	ID          string
}

// JobsOf lists key keyID's jobs, newest first (submitted_at, then id,
// descending), at most limit, after cursor when given, and only those in
// statuses when given. The index on (key_id, submitted_at, id) serves it.
func (s *Store) JobsOf(ctx context.Context, keyID int64, statuses []string, after *JobCursor, limit int) ([]Job, error) {
	q := s.DB.WithContext(ctx).Where("key_id = ?", keyID)
	if len(statuses) > 0 {
		q = q.Where("status IN ?", statuses)
	}
	if after != nil {
		at := after.SubmittedAt.UTC()
		q = q.Where("(submitted_at < ? OR (submitted_at = ? AND id < ?))", at, at, after.ID)
	}
	var js []Job
	if err := q.Order("submitted_at DESC, id DESC").Limit(limit).Find(&js).Error; err != nil {
		return nil, fmt.Errorf("list jobs of key %d: %w", keyID, err)
	}
	return js, nil
}
