package store_test

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestIdempotencyKeyIsEnforcedByTheDatabase: concurrent submits with one
// Idempotency-Key straight against the store (no process-level lock) make
// one job and one charge; the rest get it as a Replay.
func TestIdempotencyKeyIsEnforcedByTheDatabase(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		const n = 6 // below the pool size, so that every one holds a transaction at once
		now := time.Date(2026, 3, 4, 12, 0, 0, 0, time.UTC)
		day := store.QuotaDay(now)
		idem := store.Idempotency{KeyHash: store.HashKey("k"), RequestHash: "r"}
		var (
			wg      sync.WaitGroup
			mu      sync.Mutex
			created int
			replays = map[string]int{}
		)
		for i := range n {
			wg.Add(1)
			go func() {
				defer wg.Done()
				id := fmt.Sprintf("job%02d", i)
				j := &store.Job{ID: id, KeyID: 7, RequestedRows: 10, SubmittedAt: now, Targets: []string{}, Methods: map[string]string{}}
				res, err := s.ChargeAndCreateJobOnce(t.Context(), j, nil, day, 1000, idem, now)
				mu.Lock()
				defer mu.Unlock()
				switch {
				case err != nil:
					t.Errorf("submit %s: %v", id, err)
				case res.Replay != nil:
					replays[res.Replay.ID]++
				case res.Admitted:
					created++
				}
			}()
		}
		wg.Wait()
		used, _ := s.QuotaUsed(t.Context(), 7, day)
		var jobs int64
		s.DB.Model(&store.Job{}).Count(&jobs)
		if created != 1 || jobs != 1 || used != 10 || len(replays) != 1 {
			t.Fatalf("created %d, %d jobs, used %d, replays %v", created, jobs, used, replays)
		}
		// A different request with the key: Mismatch, nothing written.
		j := &store.Job{ID: "other", KeyID: 7, RequestedRows: 10, SubmittedAt: now, Targets: []string{}, Methods: map[string]string{}}
		res, err := s.ChargeAndCreateJobOnce(t.Context(), j, nil, day, 1000, store.Idempotency{KeyHash: idem.KeyHash, RequestHash: "other"}, now)
		if err != nil || !res.Mismatch || res.Admitted {
			t.Fatalf("mismatch: %+v %v", res, err)
		}
		// A refused charge leaves no claim behind.
		j = &store.Job{ID: "big", KeyID: 7, RequestedRows: 5000, SubmittedAt: now, Targets: []string{}, Methods: map[string]string{}}
		res, err = s.ChargeAndCreateJobOnce(t.Context(), j, nil, day, 1000, store.Idempotency{KeyHash: store.HashKey("k2"), RequestHash: "r"}, now)
		if err != nil || res.Admitted || res.Used != 10 {
			t.Fatalf("over limit: %+v %v", res, err)
		}
		var claims int64
		s.DB.Model(&store.IdempotencyKey{}).Count(&claims)
		if claims != 1 {
			t.Fatalf("%d claims, want 1", claims)
		}
		if err := s.DB.Where("id = ?", "big").Take(&store.Job{}).Error; err == nil {
			t.Fatal("the refused job was written")
		}
	})
}
