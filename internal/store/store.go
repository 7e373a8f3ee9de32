// Package store is kinflow's application database: GORM on SQLite (the
// embedded default, pure Go) or Postgres, with versioned migrations.
package store

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/libtnb/sqlite"
	"gorm.io/driver/postgres"
	"gorm.io/gorm"
	"gorm.io/gorm/logger"
	sqlitedriver "modernc.org/sqlite"
	sqlite3 "modernc.org/sqlite/lib"
)

// Dialect names the database behind a Store.
type Dialect string

// The supported dialects.
const (
	SQLite   Dialect = "sqlite"
	Postgres Dialect = "postgres"
)

// Store wraps the GORM handle with kinflow's queries.
type Store struct {
	DB      *gorm.DB
	Dialect Dialect
	// changes announces this process's writes to jobs (OnJobChange); nil
	// on a Store made around a transaction.
	changes *changeFeed
	// url is the database URL: ListenJobChanges' own connection on
	// Postgres, and OpenAnother's.
	url string
	// procs marks this process as having the SQLite file open
	// (writers_unix.go); nil on Postgres.
	procs *procsMark
	// migrationFS replaces the embedded migrations (nil: those), for tests
	// that play a newer or older release.
	migrationFS fs.FS
}

// sqliteBusyTimeout is SQLite's busy_timeout and the write gate's wait.
const sqliteBusyTimeout = 60 * time.Second

// Open connects to databaseURL (sqlite:PATH or postgres://…). It does not
// migrate; call Migrate.
func Open(ctx context.Context, databaseURL string) (*Store, error) {
	cfg := &gorm.Config{
		Logger:                 logger.Discard,
		SkipDefaultTransaction: true,
		// GORM's prepared-statement cache is on for SQLite only (below).
		NowFunc:        func() time.Time { return time.Now().UTC() },
		TranslateError: true,
	}
	var (
		db      *gorm.DB
		err     error
		dialect Dialect
		procs   *procsMark
	)
	switch {
	case strings.HasPrefix(databaseURL, "sqlite:"):
		dialect = SQLite
		path := strings.TrimPrefix(databaseURL, "sqlite:")
		if path != ":memory:" && !strings.HasPrefix(path, "file:") {
			if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
				return nil, fmt.Errorf("create database folder: %w", err)
			}
			procs = markOpen(path)
		}
		// WAL lets readers run beside the one writer; busy_timeout makes a
		// second writer wait for the lock instead of failing at once (60 s:
		// SQLite's busy handler polls, and under a burst of 200 submits on
		// a loaded 2-core machine a writer waited past 10 s, which became
		// a 500; Postgres is the database for such load);
		// _txlock=immediate takes the write lock at BEGIN, so two
		// read-then-write transactions cannot deadlock on the upgrade.
		dsn := path + "?_pragma=journal_mode(WAL)&_pragma=busy_timeout(60000)&_pragma=foreign_keys(1)&_pragma=synchronous(NORMAL)&_txlock=immediate"
		// Prepared statements save SQLite a compile per query (the status
		// route runs four per request): modernc.org/sqlite v1.62 keeps a
		// statement compiled between uses (libtnb/sqlite is its GORM
		// dialect); the glebarez driver used before compiled every
		// statement again on each use, 11 % of kinflow's CPU under a burst
		// of small jobs (docs/BENCHMARKS.md). GORM's cache can deadlock
		// when transactions hold every pooled connection
		// (go-gorm/gorm#7465, see Postgres below); here the write gate lets
		// one transaction at a time hold a connection, so a query that
		// prepares a statement always finds one of the other seven.
		cfg.PrepareStmt = true
		db, err = openSQLite(ctx, dsn, cfg)
		if err == nil {
			// One writer of this process at a time, in line (gate.go).
			g := newWriteGate(db.ConnPool, sqliteBusyTimeout)
			db.ConnPool, db.Statement.ConnPool = g, g
		}
	case strings.HasPrefix(databaseURL, "postgres://"), strings.HasPrefix(databaseURL, "postgresql://"):
		dialect = Postgres
		// No GORM prepared-statement cache: pgx already prepares each
		// statement on first use on a connection and keeps it (its
		// default QueryExecModeCacheStatement), so GORM's cache saved
		// nothing but could stop the process for ever (go-gorm/gorm#7465):
		// a query outside a transaction claims a new statement's
		// preparation and waits for a pooled connection, while
		// transactions holding every connection wait for that statement.
		// A fresh api met it under the production topology's burst of
		// submits: 100 requests hung for good, with no CPU and no log
		// (docs/BENCHMARKS.md, "A burst that hung for good").
		db, err = gorm.Open(postgres.Open(databaseURL), cfg)
	default:
		return nil, fmt.Errorf("unsupported database URL %q: want sqlite:PATH or postgres://…", redact(databaseURL))
	}
	if err != nil {
		procs.close()
		return nil, fmt.Errorf("open %s database: %w", dialect, err)
	}
	sqlDB, err := db.DB()
	if err != nil {
		procs.close()
		return nil, fmt.Errorf("open %s database: %w", dialect, err)
	}
	if dialect == SQLite {
		// One SQLite file has one writer at a time; a small pool keeps
		// readers concurrent without piling writers onto the busy lock.
		// Every connection stays open: with database/sql's default of two
		// idle ones, a burst closed and reopened the other six again and
		// again, and each opening re-ran the pragmas, re-read the schema
		// and re-prepared GORM's cached statements (with the parsing of
		// statements, 13–18 % of kinflow's CPU in a burst of small jobs:
		// docs/BENCHMARKS.md, "The profile").
		sqlDB.SetMaxOpenConns(8)
		sqlDB.SetMaxIdleConns(8)
	} else {
		// A pool of about four connections per core: more only makes the
		// server's backends contend for the same cores (on 2 cores, 32
		// connections gave the status route 3,800 req/s and a 63 ms p99;
		// 8 gave 5,700 req/s and 16 ms). Capped well below Postgres's
		// default max_connections of 100, which every role shares.
		n := min(max(4*runtime.NumCPU(), 4), 32)
		sqlDB.SetMaxOpenConns(n)
		sqlDB.SetMaxIdleConns(n)
	}
	sqlDB.SetConnMaxIdleTime(5 * time.Minute)
	s := &Store{DB: db, Dialect: dialect, changes: &changeFeed{}, procs: procs}
	s.url = databaseURL
	if err := registerChangeCallbacks(db, s.changes); err != nil {
		_ = s.Close()
		return nil, fmt.Errorf("open %s database: %w", dialect, err)
	}
	pctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	if err := s.Ping(pctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// openSQLite opens the SQLite database of dsn. Roles started together on a
// new file (kinflow's roles on one host, the e2e stacks) all switch it to
// WAL at once, and that switch can answer SQLITE_BUSY at once rather than
// wait out busy_timeout: six processes opening a new file together, 60
// times over, lost one open so in the 22nd round (TestOpenFreshSQLiteAtOnce;
// a CI run lost an api this way). A busy open is tried again, for up to
// sqliteBusyTimeout.
func openSQLite(ctx context.Context, dsn string, cfg *gorm.Config) (*gorm.DB, error) {
	deadline := time.Now().Add(sqliteBusyTimeout)
	wait := 10 * time.Millisecond
	for {
		db, err := gorm.Open(sqlite.Open(dsn), cfg)
		if err == nil || !isSQLiteBusy(err) || time.Now().After(deadline) {
			return db, err
		}
		select {
		case <-ctx.Done():
			return nil, err
		case <-time.After(wait):
		}
		wait = min(2*wait, 500*time.Millisecond)
	}
}

// isSQLiteBusy reports whether err is SQLite's "database is locked"
// (SQLITE_BUSY, or one of its extended codes).
func isSQLiteBusy(err error) bool {
	var se *sqlitedriver.Error
	return errors.As(err, &se) && se.Code()&0xff == sqlite3.SQLITE_BUSY
}

// OpenAnother opens a second Store on the same database, as another
// process would (tests: writes this Store's change feed does not hear of).
func (s *Store) OpenAnother(ctx context.Context) (*Store, error) {
	if s.url == "" {
		return nil, errors.New("open another store: this store has no URL")
	}
	return Open(ctx, s.url)
}

// Unprepared is the store's database for queries whose text varies with
// their arguments (an IN list of as many placeholders as keys): they skip
// GORM's prepared-statement cache (SQLite's; Postgres has none, see Open),
// which such texts would fill with one statement per list length. On
// SQLite the cache sits under the write gate, which stays: the query takes
// its turn like any other write.
func (s *Store) Unprepared(ctx context.Context) *gorm.DB {
	db := s.DB.Session(&gorm.Session{Context: ctx})
	switch p := db.Statement.ConnPool.(type) {
	case *gorm.PreparedStmtDB:
		db.Statement.ConnPool = p.ConnPool
	case *writeGate:
		if pp, ok := p.ConnPool.(*gorm.PreparedStmtDB); ok {
			db.Statement.ConnPool = &writeGate{ConnPool: pp.ConnPool, sem: p.sem, wait: p.wait}
		}
	}
	db.Config.PrepareStmt = false
	return db
}

// Ping checks that the database answers.
func (s *Store) Ping(ctx context.Context) error {
	sqlDB, err := s.DB.DB()
	if err != nil {
		return err
	}
	if err := sqlDB.PingContext(ctx); err != nil {
		return fmt.Errorf("ping %s database: %w", s.Dialect, err)
	}
	return nil
}

// Close releases the connection pool.
func (s *Store) Close() error {
	s.procs.close()
	s.procs = nil
	sqlDB, err := s.DB.DB()
	if err != nil {
		return err
	}
	return sqlDB.Close()
}

// ErrNotFound is returned when a looked-up row does not exist.
var ErrNotFound = errors.New("not found")

// ErrConflict is returned when a row would break a uniqueness rule.
var ErrConflict = errors.New("conflict")

func redact(u string) string {
	if i := strings.Index(u, "@"); i > 0 {
		if j := strings.Index(u, "://"); j > 0 && j < i {
			return u[:j+3] + "…" + u[i:]
		}
	}
	return u
}
