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
