package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestJobCountsByStatus(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		got, err := s.JobCountsByStatus(ctx)
		if err != nil || len(got) != 0 {
			t.Fatalf("empty database: %v %v", got, err)
		}
		now := time.Now().UTC()
		for i, st := range []string{"Pending", "Pending", "Completed", "Failed", "Pending"} {
			job := &store.Job{ID: "job" + string(rune('a'+i)), Status: st, SubmittedAt: now}
			if err := s.DB.Create(job).Error; err != nil {
				t.Fatal(err)
			}
		}
		got, err = s.JobCountsByStatus(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if got["Pending"] != 3 || got["Completed"] != 1 || got["Failed"] != 1 || len(got) != 3 {
			t.Fatalf("counts %v", got)
		}
	})
}
