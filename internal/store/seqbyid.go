package store

import (
	"context"
	"fmt"
)

// SequencesByID returns the sequence of each id the seq map holds (ids it
// does not hold are absent from the map), for operator tools that recompute
// cached artefacts (`kinflow cache verify`).
func (s *Store) SequencesByID(ctx context.Context, ids []string) (map[string]string, error) {
	out := make(map[string]string, len(ids))
	for from := 0; from < len(ids); from += seqChunk {
		var rows []Sequence
		if err := s.Unprepared(ctx).Where("id IN ?", ids[from:min(from+seqChunk, len(ids))]).Find(&rows).Error; err != nil {
			return nil, fmt.Errorf("look up sequences by id: %w", err)
		}
		for _, r := range rows {
			out[r.ID] = r.Seq
		}
	}
	return out, nil
}
