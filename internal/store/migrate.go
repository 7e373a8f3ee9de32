package store

import (
	"context"
	"embed"
	"errors"
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

// breaksOlderBinaries is the header line of a migration that an older
// binary cannot run against (a column dropped or renamed, a meaning
// changed): applying it records its id as schema_compat.oldest_reader.
const breaksOlderBinaries = "-- breaks-older-binaries"

// compatMigration is the migration that creates schema_compat: a migration
// before it cannot be marked breaksOlderBinaries (there is no row to set).
const compatMigration = "0014_schema_compat"

// SchemaCompat is schema_compat's one row (id 1): the id of the oldest
// migration a binary must know to run on this schema ("" while no applied
// migration broke older binaries).
type SchemaCompat struct {
	ID           int    `gorm:"primaryKey"`
	OldestReader string `gorm:"column:oldest_reader;size:255;not null;default:''"`
	// WorkflowLevel is the newest workflow code level that has run here
	// (ClaimWorkflowLevel).
	WorkflowLevel int `gorm:"column:workflow_level;not null;default:0"`
}

// TableName implements gorm's Tabler.
func (SchemaCompat) TableName() string { return "schema_compat" }

// SchemaTooNewError is Migrate's refusal of a schema that a newer binary
// changed in a way this one cannot read: Migration is the breaking
// migration (schema_compat.oldest_reader) this binary does not know.
type SchemaTooNewError struct {
	Migration string
}

func (e *SchemaTooNewError) Error() string {
	return fmt.Sprintf("database schema is newer than this kinflow: migration %s needs a newer binary (run the release that applied it, or newer)", e.Migration)
}

// Migrate applies every migration not yet recorded (ApplyMigrations).
func (s *Store) Migrate(ctx context.Context) error {
	_, err := s.ApplyMigrations(ctx)
	return err
}

// ApplyMigrations applies every migration not yet recorded and returns the
// ids it applied, in order (none when the schema was up to date). It is
// safe to run from several processes at start: all pending migrations run
// in one transaction, and on Postgres under an advisory lock, so a second
// runner finds them recorded and applies (and reports) nothing.
//
// Before applying anything it refuses, with a *SchemaTooNewError, a
// database whose recorded migrations include ones this binary does not
// know, unless it knows schema_compat.oldest_reader: unknown migrations
// that only add are tolerated, so an older release can run on a newer,
// additively changed schema.
func (s *Store) ApplyMigrations(ctx context.Context) ([]string, error) {
	ms, err := s.migrations()
	if err != nil {
		return nil, err
	}
	if s.Dialect == Postgres {
		// Several roles may start at once against one Postgres: a session
		// advisory lock on a dedicated connection serialises their migrations.
		sqlDB, err := s.DB.DB()
		if err != nil {
			return nil, err
		}
		conn, err := sqlDB.Conn(ctx)
		if err != nil {
			return nil, fmt.Errorf("migrate: %w", err)
		}
		defer conn.Close()
		if _, err := conn.ExecContext(ctx, "SELECT pg_advisory_lock($1)", migrationLockID); err != nil {
			return nil, fmt.Errorf("migrate: take lock: %w", err)
		}
		defer func() {
			_, _ = conn.ExecContext(context.WithoutCancel(ctx), "SELECT pg_advisory_unlock($1)", migrationLockID)
		}()
	}
	if err := s.checkCompat(ctx, ms); err != nil {
		return nil, err
	}
	// Each migration's func runs inside gormigrate's one transaction only
	// when it is not recorded yet: what it appends is what this run
	// applied, valid once the transaction committed.
	var applied []string
	for _, m := range ms {
		run := m.Migrate
		id := m.ID
		m.Migrate = func(tx *gorm.DB) error {
			if err := run(tx); err != nil {
				return err
			}
			applied = append(applied, id)
			return nil
		}
	}
	opts := *gormigrate.DefaultOptions
	opts.UseTransaction = true
	m := gormigrate.New(s.DB.WithContext(ctx), &opts, ms)
	if err := m.Migrate(); err != nil {
		return nil, fmt.Errorf("migrate %s database: %w", s.Dialect, err)
	}
	return applied, nil
}

// checkCompat refuses a schema with recorded migrations unknown to ms whose
// oldest_reader ms does not hold either (see ApplyMigrations).
func (s *Store) checkCompat(ctx context.Context, ms []*gormigrate.Migration) error {
	db := s.DB.WithContext(ctx)
	if !db.Migrator().HasTable(gormigrate.DefaultOptions.TableName) {
		return nil // a new database
	}
	var recorded []string
	if err := db.Table(gormigrate.DefaultOptions.TableName).Pluck(gormigrate.DefaultOptions.IDColumnName, &recorded).Error; err != nil {
		return fmt.Errorf("migrate: read recorded migrations: %w", err)
	}
	known := make(map[string]bool, len(ms))
	for _, m := range ms {
		known[m.ID] = true
	}
	unknown := false
	for _, id := range recorded {
		unknown = unknown || !known[id]
	}
	if !unknown || !db.Migrator().HasTable(&SchemaCompat{}) {
		return nil
	}
	var c SchemaCompat
	err := db.Take(&c, "id = ?", 1).Error
	if errors.Is(err, gorm.ErrRecordNotFound) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("migrate: read schema_compat: %w", err)
	}
	if c.OldestReader != "" && !known[c.OldestReader] {
		return &SchemaTooNewError{Migration: c.OldestReader}
	}
	return nil
}

// migrationSource is where migrations are read from: the embedded files,
// or a test's (SetMigrationSource).
func (s *Store) migrationSource() fs.FS {
	if s.migrationFS != nil {
		return s.migrationFS
	}
	return migrationFiles
}

func (s *Store) migrations() ([]*gormigrate.Migration, error) {
	src := s.migrationSource()
	dir := path.Join("migrations", string(s.Dialect))
	entries, err := fs.ReadDir(src, dir)
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
		body, err := fs.ReadFile(src, path.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("read migration %s: %w", name, err)
		}
		sql := string(body)
		id := strings.TrimSuffix(name, ".sql")
		breaking := breaksOlder(sql)
		if breaking && id <= compatMigration {
			return nil, fmt.Errorf("migration %s is marked %q but comes before %s, which creates the table that records it", name, breaksOlderBinaries, compatMigration)
		}
		out = append(out, &gormigrate.Migration{
			ID: id,
			Migrate: func(tx *gorm.DB) error {
				for _, stmt := range splitStatements(sql) {
					if err := tx.Exec(stmt).Error; err != nil {
						return fmt.Errorf("%s: %w", name, err)
					}
				}
				if !breaking {
					return nil
				}
				res := tx.Exec("UPDATE schema_compat SET oldest_reader = ? WHERE id = 1", id)
				if res.Error != nil {
					return fmt.Errorf("%s: record it in schema_compat: %w", name, res.Error)
				}
				if res.RowsAffected != 1 {
					return fmt.Errorf("%s: schema_compat has no row to record it in", name)
				}
				return nil
			},
		})
	}
	return out, nil
}

// breaksOlder reports whether the migration's header (its comment lines
// before the first statement) holds the line breaksOlderBinaries.
func breaksOlder(sql string) bool {
	for _, line := range strings.Split(sql, "\n") {
		t := strings.TrimSpace(line)
		switch {
		case t == breaksOlderBinaries:
			return true
		case t == "" || strings.HasPrefix(t, "--"):
			continue
		default:
			return false
		}
	}
	return false
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
