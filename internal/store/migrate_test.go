package store_test

import (
	"context"
	"errors"
	"io/fs"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/fstest"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// eachBareDialect runs fn on a fresh, unmigrated database of each dialect.
func eachBareDialect(t *testing.T, fn func(t *testing.T, s *store.Store)) {
	t.Helper()
	for _, d := range []store.Dialect{store.SQLite, store.Postgres} {
		t.Run(string(d), func(t *testing.T) {
			url := "sqlite:" + filepath.Join(t.TempDir(), "kinflow.db")
			if d == store.Postgres {
				url = testenv.PostgresURL(t)
			}
			s, err := store.Open(context.Background(), url)
			if err != nil {
				if d == store.Postgres {
					testenv.Unavailable(t, "Postgres: %v", err)
				}
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = s.Close() })
			fn(t, s)
		})
	}
}

// embeddedIDs are the ids of the migrations this binary holds for d, in order.
func embeddedIDs(t *testing.T, d store.Dialect) []string {
	t.Helper()
	entries, err := fs.ReadDir(store.MigrationFiles, path.Join("migrations", string(d)))
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, e := range entries {
		ids = append(ids, strings.TrimSuffix(e.Name(), ".sql"))
	}
	return ids
}

// release is the embedded migrations plus extra files (name → SQL) of d:
// the migrations of a newer release.
func release(t *testing.T, d store.Dialect, extra map[string]string) fs.FS {
	t.Helper()
	m := fstest.MapFS{}
	dir := path.Join("migrations", string(d))
	entries, err := fs.ReadDir(store.MigrationFiles, dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		b, err := fs.ReadFile(store.MigrationFiles, path.Join(dir, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		m[path.Join(dir, e.Name())] = &fstest.MapFile{Data: b}
	}
	for name, sql := range extra {
		m[path.Join(dir, name)] = &fstest.MapFile{Data: []byte(sql)}
	}
	return m
}

func oldestReader(t *testing.T, s *store.Store) string {
	t.Helper()
	var c store.SchemaCompat
	if err := s.DB.Take(&c, "id = 1").Error; err != nil {
		t.Fatal(err)
	}
	return c.OldestReader
}

// TestMigrateListsWhatItApplied: the first run on a new database applies,
// and lists in order, every migration; the second applies and lists none.
func TestMigrateListsWhatItApplied(t *testing.T) {
	eachBareDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		got, err := s.ApplyMigrations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if want := embeddedIDs(t, s.Dialect); !slices.Equal(got, want) || !slices.Contains(got, "0014_schema_compat") {
			t.Fatalf("first migrate applied %v, want %v", got, want)
		}
		if got, err := s.ApplyMigrations(ctx); err != nil || len(got) != 0 {
			t.Fatalf("second migrate: applied %v, %v; want none", got, err)
		}
		if r := oldestReader(t, s); r != "" {
			t.Fatalf("oldest_reader %q on a schema no breaking migration touched", r)
		}
	})
}

// TestMigrateToleratesNewerAdditiveMigrations: a migration recorded by a
// newer release that did not mark it breaking is no reason to refuse, nor
// one that follows a breaking migration this binary knows.
func TestMigrateToleratesNewerAdditiveMigrations(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		if err := s.DB.Exec("INSERT INTO migrations (id) VALUES ('9999_added_by_a_newer_release')").Error; err != nil {
			t.Fatal(err)
		}
		if got, err := s.ApplyMigrations(context.Background()); err != nil || len(got) != 0 {
			t.Fatalf("migrate with an unknown additive migration recorded: applied %v, %v", got, err)
		}
		if err := s.DB.Exec("UPDATE schema_compat SET oldest_reader = '0014_schema_compat' WHERE id = 1").Error; err != nil {
			t.Fatal(err)
		}
		if err := s.Migrate(context.Background()); err != nil {
			t.Fatalf("migrate when this binary knows oldest_reader: %v", err)
		}
	})
}

// TestMigrateRefusesSchemaNewerThanItCanRead: an unknown migration that is
// the schema's oldest_reader makes Migrate fail, with one line naming it.
func TestMigrateRefusesSchemaNewerThanItCanRead(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, s *store.Store) {
		const id = "9999_dropped_a_column"
		if err := s.DB.Exec("INSERT INTO migrations (id) VALUES (?)", id).Error; err != nil {
			t.Fatal(err)
		}
		if err := s.DB.Exec("UPDATE schema_compat SET oldest_reader = ? WHERE id = 1", id).Error; err != nil {
			t.Fatal(err)
		}
		applied, err := s.ApplyMigrations(context.Background())
		var tooNew *store.SchemaTooNewError
		if !errors.As(err, &tooNew) || tooNew.Migration != id || applied != nil {
			t.Fatalf("migrate on a schema too new: applied %v, error %v", applied, err)
		}
		want := "database schema is newer than this kinflow: migration 9999_dropped_a_column needs a newer binary (run the release that applied it, or newer)"
		if err.Error() != want {
			t.Fatalf("error %q, want %q", err, want)
		}
	})
}

// TestBreakingMigrationSetsOldestReader plays three releases: a newer one
// applies a migration marked `-- breaks-older-binaries` in its header and
// an additive one after it (whose marker-like line after its first
// statement is no header); this release, which knows neither, is refused;
// a release between them, which knows the breaking one only, runs.
func TestBreakingMigrationSetsOldestReader(t *testing.T) {
	eachBareDialect(t, func(t *testing.T, s *store.Store) {
		ctx := context.Background()
		breaking := map[string]string{
			"0900_test_breaking.sql": "-- Renames a column older binaries read.\n-- breaks-older-binaries\n\nCREATE TABLE test_breaking (id INTEGER);\n",
		}
		newest := map[string]string{
			"0900_test_breaking.sql": breaking["0900_test_breaking.sql"],
			"0901_test_additive.sql": "-- Adds a table.\nCREATE TABLE test_additive (id INTEGER);\n-- breaks-older-binaries\n",
		}
		store.SetMigrationSource(s, release(t, s.Dialect, newest))
		applied, err := s.ApplyMigrations(ctx)
		if err != nil {
			t.Fatal(err)
		}
		if n := len(applied); n < 2 || applied[n-2] != "0900_test_breaking" || applied[n-1] != "0901_test_additive" {
			t.Fatalf("the newer release applied %v", applied)
		}
		if r := oldestReader(t, s); r != "0900_test_breaking" {
			t.Fatalf("oldest_reader %q, want the breaking migration", r)
		}
		store.SetMigrationSource(s, nil)
		var tooNew *store.SchemaTooNewError
		if err := s.Migrate(ctx); !errors.As(err, &tooNew) || tooNew.Migration != "0900_test_breaking" {
			t.Fatalf("this release on the newer schema: %v", err)
		}
		store.SetMigrationSource(s, release(t, s.Dialect, breaking))
		if got, err := s.ApplyMigrations(ctx); err != nil || len(got) != 0 {
			t.Fatalf("a release that knows the breaking migration: applied %v, %v", got, err)
		}
	})
}

// TestBreakingMarkerNeedsSchemaCompat: a migration marked breaking that
// would run before schema_compat exists is refused before anything runs.
func TestBreakingMarkerNeedsSchemaCompat(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	store.SetMigrationSource(s, release(t, s.Dialect, map[string]string{
		"0005a_marked_too_early.sql": "-- breaks-older-binaries\nCREATE TABLE too_early (id INTEGER);\n",
	}))
	if err := s.Migrate(context.Background()); err == nil || !strings.Contains(err.Error(), "comes before 0014_schema_compat") {
		t.Fatalf("migrate: %v", err)
	}
}

// TestConcurrentMigratesReportEachMigrationOnce: roles starting at once
// against one new Postgres database take turns under the advisory lock, so
// between them every migration is reported applied exactly once.
func TestConcurrentMigratesReportEachMigrationOnce(t *testing.T) {
	url := testenv.PostgresURL(t)
	const runners = 4
	results := make(chan []string, runners)
	errs := make(chan error, runners)
	for range runners {
		go func() {
			s, err := store.Open(context.Background(), url)
			if err != nil {
				errs <- err
				return
			}
			defer s.Close()
			applied, err := s.ApplyMigrations(context.Background())
			if err != nil {
				errs <- err
				return
			}
			results <- applied
		}()
	}
	var all []string
	for range runners {
		select {
		case err := <-errs:
			t.Fatal(err)
		case a := <-results:
			if len(a) != 0 && len(all) != 0 {
				t.Fatalf("two runners applied migrations: %v and %v", all, a)
			}
			all = append(all, a...)
		}
	}
	if want := embeddedIDs(t, store.Postgres); !slices.Equal(all, want) {
		t.Fatalf("applied between them %v, want %v", all, want)
	}
}
