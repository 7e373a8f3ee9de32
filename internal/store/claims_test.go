package store_test

import (
	"context"
	"sort"
	"testing"

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
