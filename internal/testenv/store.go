package testenv

import (
	"context"
	"path/filepath"
	"testing"

	"github.com/kinflow/kinflow/internal/store"
)

// OpenStore opens a fresh, migrated database of the given dialect for tb:
// a new SQLite file in tb's temp folder, or a new Postgres database.
func OpenStore(tb testing.TB, dialect store.Dialect) *store.Store {
	tb.Helper()
	var url string
	switch dialect {
	case store.SQLite:
		url = "sqlite:" + filepath.Join(tb.TempDir(), "kinflow.db")
	case store.Postgres:
		url = PostgresURL(tb)
	default:
		tb.Fatalf("unknown dialect %q", dialect)
	}
	s, err := store.Open(context.Background(), url)
	if err != nil {
		if dialect == store.Postgres {
			Unavailable(tb, "Postgres: %v", err)
		}
		tb.Fatalf("open store: %v", err)
	}
	tb.Cleanup(func() { _ = s.Close() })
	if err := s.Migrate(context.Background()); err != nil {
		tb.Fatalf("migrate: %v", err)
	}
	return s
}

// EachDialect runs fn as a subtest on a fresh SQLite and a fresh Postgres database.
func EachDialect(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	t.Helper()
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			fn(t, OpenStore(t, d))
		})
	}
}
