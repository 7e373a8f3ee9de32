package store

import (
	"context"
	"fmt"
)

// RunningJobs are up to limit jobs in state Pending or Processing whose id
// sorts after after, in id order: the job reconciler (issue 33) walks them
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
