package store_test

import (
	"context"
	"sort"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// An ephemeral artefact is removed by the last job that releases it, never
// while another job's claim is alive.
func TestReleaseRemovesOnlyUnclaimedArtefacts(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		if err := s.ClaimArtefacts(ctx, "jobA", 0, []string{"/m/esm1v/a.npy", "/m/esm1v/shared.npy"}); err != nil {
			t.Fatal(err)
		}
		if err := s.ClaimArtefacts(ctx, "jobB", 1, []string{"/m/esm1v/shared.npy", "/m/esm1v/b.npy"}); err != nil {
			t.Fatal(err)
		}
		// Claiming twice is harmless.
		if err := s.ClaimArtefacts(ctx, "jobA", 0, []string{"/m/esm1v/a.npy"}); err != nil {
			t.Fatal(err)
		}
		var removed []string
		rm := func(p string) error { removed = append(removed, p); return nil }
		if n, err := s.ReleaseArtefacts(ctx, "jobA", 0, rm); err != nil || n != 1 {
			t.Fatalf("release A: %d %v", n, err)
		}
		if len(removed) != 1 || removed[0] != "/m/esm1v/a.npy" {
			t.Fatalf("release A removed %v, want only a.npy (shared.npy is still claimed by B)", removed)
		}
		removed = nil
		if _, err := s.ReleaseArtefacts(ctx, "jobB", 1, rm); err != nil {
			t.Fatal(err)
		}
		sort.Strings(removed)
		if len(removed) != 2 || removed[0] != "/m/esm1v/b.npy" || removed[1] != "/m/esm1v/shared.npy" {
			t.Fatalf("release B removed %v", removed)
		}
		// A second release (a retried Cleanup) removes nothing.
		if n, _ := s.ReleaseArtefacts(ctx, "jobB", 1, rm); n != 0 {
			t.Fatalf("second release removed %d", n)
		}
	})
}

// A stage that claimed nothing releases without the claims' database-wide
// lock: with the lock held by another session, its release still returns
// at once, while a stage with a claim waits for the lock (Postgres, the
// database that has the lock).
func TestReleaseWithoutClaimsTakesNoLock(t *testing.T) {
	s := testenv.OpenStore(t, store.Postgres)
	ctx := context.Background()
	if err := s.ClaimArtefacts(ctx, "jobC", 0, []string{"/m/esm1v/c.npy"}); err != nil {
		t.Fatal(err)
	}
	sqlDB, err := s.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	holder, err := sqlDB.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_lock($1)", store.ClaimsLockID); err != nil {
		t.Fatal(err)
	}
	rm := func(string) error { return nil }
	quick, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if n, err := s.ReleaseArtefacts(quick, "jobD", 0, rm); err != nil || n != 0 {
		t.Fatalf("a stage without claims: %d, %v (it waited for the lock)", n, err)
	}
	short, cancel2 := context.WithTimeout(ctx, 300*time.Millisecond)
	defer cancel2()
	if _, err := s.ReleaseArtefacts(short, "jobC", 0, rm); err == nil {
		t.Fatal("a stage with a claim released while another session held the claims' lock")
	}
	if _, err := holder.ExecContext(ctx, "SELECT pg_advisory_unlock($1)", store.ClaimsLockID); err != nil {
		t.Fatal(err)
	}
	if n, err := s.ReleaseArtefacts(ctx, "jobC", 0, rm); err != nil || n != 1 {
		t.Fatalf("after the lock: %d, %v", n, err)
	}
}
