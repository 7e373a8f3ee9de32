package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestQuotaReserveAndRefund(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		const day = "2026-03-04"
		ok, used, err := s.ReserveQuota(ctx, 7, day, 8, 10)
		if err != nil || !ok || used != 8 {
			t.Fatalf("reserve 8: %v %d %v", ok, used, err)
		}
		ok, used, err = s.ReserveQuota(ctx, 7, day, 3, 10)
		if err != nil || ok || used != 8 {
			t.Fatalf("reserve 3 over the limit: %v %d %v", ok, used, err)
		}
		if ok, _, _ := s.ReserveQuota(ctx, 8, day, 10, 10); !ok {
			t.Fatal("another key has its own counter")
		}
		if err := s.RefundQuota(ctx, 7, day, 5); err != nil {
			t.Fatal(err)
		}
		if u, _ := s.QuotaUsed(ctx, 7, day); u != 3 {
			t.Fatalf("after refund of 5: %d", u)
		}
		if err := s.RefundQuota(ctx, 7, day, 50); err != nil {
			t.Fatal(err)
		}
		if u, _ := s.QuotaUsed(ctx, 7, day); u != 0 {
			t.Fatalf("refund floors at 0: %d", u)
		}
		// A refund on a day without a row leaves it missing.
		if err := s.RefundQuota(ctx, 7, "2026-03-05", 5); err != nil {
			t.Fatal(err)
		}
		var n int64
		s.DB.Model(&store.QuotaUsage{}).Where("day = ?", "2026-03-05").Count(&n)
		if n != 0 {
			t.Fatal("refund created a row")
		}
	})
}

func TestQuotaDayAndReset(t *testing.T) {
	at := time.Date(2026, 3, 4, 23, 59, 59, 900e6, time.FixedZone("x", 3600))
	if store.QuotaDay(at) != "2026-03-04" || store.SecondsToReset(at) != 3600 {
		t.Fatalf("%s %d", store.QuotaDay(at), store.SecondsToReset(at))
	}
	if got := store.SecondsToReset(time.Date(2026, 3, 4, 0, 0, 0, 0, time.UTC)); got != 86400 {
		t.Fatalf("at midnight: %d", got)
	}
}

// TestChargeAndCreateJobOneKeyAtOnce: many submits of one key at once (a
// pipeline with one API key) are admitted exactly up to the limit; each
// admitted one is a job, a refused one leaves no job and no charge, and
// every answer's counter is one the key had.
func TestChargeAndCreateJobOneKeyAtOnce(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		const n, rows, limit = 20, 3, 30
		now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
		day := store.QuotaDay(now)
		var (
			wg       sync.WaitGroup
			mu       sync.Mutex
			admitted []string
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("onekey%02d", i)
				j := &store.Job{ID: id, KeyID: 9, RequestedRows: rows, SubmittedAt: now, Targets: []string{}, Methods: map[string]string{}}
				ok, used, err := s.ChargeAndCreateJob(t.Context(), j, []store.JobStage{{JobID: id, Target: "kcat", MethodKey: "B", Status: "pending"}}, day, limit)
				if err != nil {
					t.Errorf("submit %s: %v", id, err)
					return
				}
				if used < rows || used > limit || used%rows != 0 {
					t.Errorf("submit %s: counter %d", id, used)
				}
				if ok {
					mu.Lock()
					admitted = append(admitted, id)
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		var jobs, stages int64
		s.DB.Model(&store.Job{}).Where("key_id = ?", 9).Count(&jobs)
		s.DB.Model(&store.JobStage{}).Where("job_id LIKE ?", "onekey%").Count(&stages)
		used, _ := s.QuotaUsed(t.Context(), 9, day)
		if len(admitted) != limit/rows || jobs != limit/rows || stages != limit/rows || used != limit {
			t.Fatalf("admitted %d, %d jobs, %d stages, counter %d; want %d, %d, %d, %d", len(admitted), jobs, stages, used, limit/rows, limit/rows, limit/rows, limit)
		}
	})
}
