package store

import (
	"context"
	"fmt"
	"time"
)

// RunningJobs are up to limit jobs in state Pending or Processing whose id
// sorts after after, in id order: the job reconciler walks them
// batch by batch with the last id of each as the next after.
func (s *Store) RunningJobs(ctx context.Context, after string, limit int) ([]Job, error) {
	var js []Job
	err := s.DB.WithContext(ctx).Where("status IN ? AND id > ?", []string{JobPending, JobProcessing}, after).
		Order("id").Limit(limit).Find(&js).Error
	if err != nil {
		return nil, fmt.Errorf("list running jobs: %w", err)
	}
	return js, nil
}

// ExpiringJobs are up to limit finished jobs (Completed or Failed) that
// ended before before and whose folder has not been removed yet, oldest
// first.
func (s *Store) ExpiringJobs(ctx context.Context, before time.Time, limit int) ([]Job, error) {
	var js []Job
	err := s.DB.WithContext(ctx).Where("status IN ? AND completed_at < ? AND expired_at IS NULL", []string{JobCompleted, JobFailed}, before.UTC()).
		Order("completed_at").Limit(limit).Find(&js).Error
	if err != nil {
		return nil, fmt.Errorf("list expiring jobs: %w", err)
	}
	return js, nil
}

// MarkExpired records that job id's folder was removed.
func (s *Store) MarkExpired(ctx context.Context, id string, now time.Time) error {
	if err := s.DB.WithContext(ctx).Model(&Job{}).Where("id = ? AND expired_at IS NULL", id).Update("expired_at", now.UTC()).Error; err != nil {
		return fmt.Errorf("mark job %s expired: %w", id, err)
	}
	return nil
}
