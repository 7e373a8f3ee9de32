package store

import (
	"context"
	"fmt"
)

// JobCountsByStatus counts jobs by status (the metrics' kinflow_jobs gauge).
// The status column is indexed, so this stays one index scan.
func (s *Store) JobCountsByStatus(ctx context.Context) (map[string]int64, error) {
	var rows []struct {
		Status string
		N      int64
	}
	if err := s.DB.WithContext(ctx).Model(&Job{}).Select("status, count(*) AS n").Group("status").Scan(&rows).Error; err != nil {
		return nil, fmt.Errorf("count jobs by status: %w", err)
	}
	out := make(map[string]int64, len(rows))
	for _, r := range rows {
		out[r.Status] = r.N
	}
	return out, nil
}

// KeyWork is one key's unfinished jobs of one status and class: what
// `kinflow key usage` and the per-key metrics show.
type KeyWork struct {
	KeyID    int64
	Status   string
	Priority string
	Jobs     int64
	Rows     int64
}

// UnfinishedWorkByKey sums the unfinished jobs (Pending, Processing) and
// their rows by key, status and class, largest keys first: one scan of the
// status index's unfinished part.
func (s *Store) UnfinishedWorkByKey(ctx context.Context) ([]KeyWork, error) {
	var out []KeyWork
	err := s.DB.WithContext(ctx).Model(&Job{}).
		Select("key_id, status, priority, count(*) AS jobs, coalesce(sum(requested_rows), 0) AS rows").
		Where("status IN ?", []string{JobPending, JobProcessing}).
		Group("key_id, status, priority").Order("rows DESC, key_id").Scan(&out).Error
	if err != nil {
		return nil, fmt.Errorf("sum unfinished work by key: %w", err)
	}
	return out, nil
}
