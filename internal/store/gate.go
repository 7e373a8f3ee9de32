package store

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"sync"
	"time"

	"gorm.io/gorm"
)

// writeGate lets one SQLite writer of this process at a time reach the
// database, first come first served, and every reader through at once
// (WAL). SQLite has one writer per file and its busy handler polls: under a
// burst of 200 submits and their workflows' bookkeeping, writers of one
// process on a pool of connections lost the race for the lock again and
// again, past any busy timeout (a submit took over a minute). In line they
// each wait for the writes ahead of them only. Writers of other processes on
// the same file (a second `kinflow worker`) still meet the busy timeout.
//
// A write is a transaction (BEGIN IMMEDIATE takes the lock) or a statement
// outside one that is not a SELECT or PRAGMA (GORM creates with INSERT …
// RETURNING through QueryContext). A place not had within wait fails like
// SQLITE_BUSY would: a transaction that itself writes outside itself gets an
// error, never a hang.
type writeGate struct {
	gorm.ConnPool
	sem  chan struct{}
	wait time.Duration
}

// ErrBusy is a write that waited for the database longer than the busy
// timeout.
var ErrBusy = errors.New("database is busy: a write waited for its turn longer than the busy timeout")

func newWriteGate(p gorm.ConnPool, wait time.Duration) *writeGate {
	return &writeGate{ConnPool: p, sem: make(chan struct{}, 1), wait: wait}
}

func (g *writeGate) acquire(ctx context.Context) (func(), error) {
	t := time.NewTimer(g.wait)
	defer t.Stop()
	select {
	case g.sem <- struct{}{}:
		var once sync.Once
		return func() { once.Do(func() { <-g.sem }) }, nil
	case <-ctx.Done():
		return nil, ctx.Err()
	case <-t.C:
		return nil, ErrBusy
	}
}

// isRead reports whether a statement outside a transaction only reads.
func isRead(query string) bool {
	q := strings.TrimLeft(query, " \t\r\n(")
	if len(q) < 6 {
		return false
	}
	head := strings.ToUpper(q[:6])
	return head == "SELECT" || head == "PRAGMA"
}

func (g *writeGate) ExecContext(ctx context.Context, query string, args ...any) (sql.Result, error) {
	release, err := g.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return g.ConnPool.ExecContext(ctx, query, args...)
}

func (g *writeGate) QueryContext(ctx context.Context, query string, args ...any) (*sql.Rows, error) {
	if isRead(query) {
		return g.ConnPool.QueryContext(ctx, query, args...)
	}
	release, err := g.acquire(ctx)
	if err != nil {
		return nil, err
	}
	defer release()
	return g.ConnPool.QueryContext(ctx, query, args...)
}

func (g *writeGate) QueryRowContext(ctx context.Context, query string, args ...any) *sql.Row {
	if isRead(query) {
		return g.ConnPool.QueryRowContext(ctx, query, args...)
	}
	release, err := g.acquire(ctx)
	if err != nil {
		// A *sql.Row carries no error of ours: let the database answer
		// (its busy timeout still applies).
		return g.ConnPool.QueryRowContext(ctx, query, args...)
	}
	defer release()
	return g.ConnPool.QueryRowContext(ctx, query, args...)
}

// BeginTx takes the writer's place for the whole transaction
// (_txlock=immediate: every transaction writes); Commit or Rollback gives
// it back.
func (g *writeGate) BeginTx(ctx context.Context, opts *sql.TxOptions) (gorm.ConnPool, error) {
	release, err := g.acquire(ctx)
	if err != nil {
		return nil, err
	}
	var tx gorm.ConnPool
	switch b := g.ConnPool.(type) {
	case gorm.ConnPoolBeginner:
		tx, err = b.BeginTx(ctx, opts)
	case gorm.TxBeginner:
		var t *sql.Tx
		t, err = b.BeginTx(ctx, opts)
		if err == nil {
			tx = t
		}
	default:
		err = gorm.ErrInvalidTransaction
	}
	if err != nil {
		release()
		return nil, err
	}
	return &gatedTx{ConnPool: tx, release: release}, nil
}

// GetDBConn is the underlying *sql.DB (gorm.DB.DB).
func (g *writeGate) GetDBConn() (*sql.DB, error) {
	switch p := g.ConnPool.(type) {
	case gorm.GetDBConnector:
		return p.GetDBConn()
	case *sql.DB:
		return p, nil
	}
	return nil, gorm.ErrInvalidDB
}

// Ping pings the database.
func (g *writeGate) Ping() error {
	db, err := g.GetDBConn()
	if err != nil {
		return err
	}
	return db.Ping()
}

// gatedTx is a transaction holding the writer's place.
type gatedTx struct {
	gorm.ConnPool
	release func()
}

func (t *gatedTx) Commit() error {
	defer t.release()
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	return c.Commit()
}

func (t *gatedTx) Rollback() error {
	defer t.release()
	c, ok := t.ConnPool.(gorm.TxCommitter)
	if !ok {
		return gorm.ErrInvalidTransaction
	}
	return c.Rollback()
}

// StmtContext lets a prepared statement run inside the transaction.
func (t *gatedTx) StmtContext(ctx context.Context, stmt *sql.Stmt) *sql.Stmt {
	if s, ok := t.ConnPool.(interface {
		StmtContext(context.Context, *sql.Stmt) *sql.Stmt
	}); ok {
		return s.StmtContext(ctx, stmt)
	}
	return stmt
}

// GetDBConn is the underlying *sql.DB.
func (t *gatedTx) GetDBConn() (*sql.DB, error) {
	if c, ok := t.ConnPool.(gorm.GetDBConnector); ok {
		return c.GetDBConn()
	}
	return nil, gorm.ErrInvalidDB
}
