package store

import (
	"context"
	"embed"
	"fmt"
	"io/fs"
	"path"
	"sort"
	"strings"

	"github.com/go-gormigrate/gormigrate/v2"
	"gorm.io/gorm"
)

// Migrations are plain SQL, one folder per dialect, applied in file-name
// order and recorded by gormigrate in the `migrations` table. Plain SQL keeps
// every schema change explicit (partial indexes, types), and TestModelsMatchSchema
// checks that the GORM models agree with what the files create.
//
//go:embed migrations
var migrationFiles embed.FS

// migrationLockID is the Postgres advisory lock key of migrations ("kinflow" in ASCII).
const migrationLockID int64 = 0x6b696e666c6f77

// Migrate applies every migration not yet recorded. It is safe to run from
// several processes at start: each migration runs in one transaction and a
// second runner sees it recorded.
func (s *Store) Migrate(ctx context.Context) error {
	ms, err := s.migrations()
	if err != nil {
		return err
	}
	if s.Dialect == Postgres {
		// Several roles may start at once against one Postgres: a session
		// advisory lock on a dedicated connection serialises their migrations.
		sqlDB, err := s.DB.DB()
		if err != nil {
			return err
		}
		conn, err := sqlDB.Conn(ctx)
		if err != nil {
			return fmt.Errorf("migrate: %w", err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", migrationLockID); err != nil {
			return fmt.Errorf("migrate: take lock: %w", err)
		}
		defer func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockID)
		}()
	}
	opts := *gormigrate.DefaultOptions
	opts.UseTransaction = true
	m := gormigrate.New(s.DB.WithContext(ctx), &opts, ms)
	if err := m.Migrate(); err != nil {
		return fmt.Errorf("migrate %s database: %w", s.Dialect, err)
	}
	return nil
}

func (s *Store) migrations() ([]*gormigrate.Migration, error) {
	dir := path.Join("migrations", string(s.Dialect))
	entries, err := fs.ReadDir(migrationFiles, dir)
	if err != nil {
		return nil, fmt.Errorf("read migrations: %w", err)
	}
	sort.Slice(entries, func(i, j int) bool { return entries[i].Name() < entries[j].Name() })
	var out []*gormigrate.Migration
	for _, e := range entries {
		name := e.Name()
		if !strings.HasSuffix(name, ".sql") {
			continue
		}
		body, err := fs.ReadFile(migrationFiles, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		sql := string(body)
		out = append(out, &gormigrate.Migration{
			ID: strings.TrimSuffix(name, ".sql"),
			Migrate: func(tx *gorm.DB) error {
				for _, stmt := range splitStatements(sql) {
					if err := tx.Exec(stmt).Error; err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
				}
				return nil
			},
		})
	}
	return out, nil
}

// splitStatements splits a migration file on semicolons that end a line,
// dropping comment-only lines. Migration files keep one statement per
// terminated block, so no quoting rules are needed.
func splitStatements(sql string) []string {
	var (
		out []string
		cur strings.Builder
	)
	for _, line := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(line)
		if t == "" || strings.HasPrefix(t, "--") {
			continue
		}
		cur.WriteString(line)
		cur.WriteByte('\n')
		if strings.HasSuffix(t, ";") {
			out = append(out, strings.TrimSpace(cur.String()))
			cur.Reset()
		}
	}
	if s := strings.TrimSpace(cur.String()); s != "" {
		out = append(out, s)
	}
	return out
}
