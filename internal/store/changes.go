package store

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"gorm.io/gorm"
	"gorm.io/gorm/clause"
)

// changeFeed tells this process's listeners which job a write of this
// process touched: every create, update or delete of the jobs, job_stages or
// job_events tables through the store's GORM handle (the API's and, in
// `kinflow dev`, the worker's) names its job, or "" when the statement does
// not say which (a listener then treats every job as changed). Writes by
// another process are not seen: listeners pair the feed with a short
// time-to-live.
type changeFeed struct {
	mu  sync.RWMutex
	fns []func(jobID string)
	// listening counts ListenJobChanges connections that are listening.
	listening atomic.Int32
}

func (f *changeFeed) publish(jobID string) {
	f.mu.RLock()
	fns := f.fns
	f.mu.RUnlock()
	for _, fn := range fns {
		fn(jobID)
	}
}

// OnJobChange registers fn to be called after each write this process makes
// to a job's row, stages or events, with the job id ("" when the write does
// not name one job). A write inside a transaction is announced before its
// commit: a listener that reads at once may still see the old state, and must
// look again shortly (the API's status cache does). fn runs on the writer's
// goroutine and must not block.
func (s *Store) OnJobChange(fn func(jobID string)) {
	if s.changes == nil {
		return
	}
	s.changes.mu.Lock()
	s.changes.fns = append(append([]func(string){}, s.changes.fns...), fn)
	s.changes.mu.Unlock()
}

// SeesAllWrites reports whether OnJobChange's listeners hear, now, of every
// write to jobs, stages and events, whichever process makes it: on Postgres
// while ListenJobChanges is connected (the triggers' notices cover every
// process; a reconnection announces "" for what it missed); on SQLite while
// no other process, and no other Store of this one, has the database open
// (writers_unix.go). Otherwise a listener must re-read what it caches now
// and then to see other processes' writes.
func (s *Store) SeesAllWrites() bool {
	if s.changes == nil {
		return false
	}
	if s.Dialect == Postgres {
		return s.changes.listening.Load() > 0
	}
	return s.procs.alone()
}

// jobTables are the tables whose writes change what /status/ shows, with the
// column that names the job.
var jobTables = map[string]string{"jobs": "id", "job_stages": "job_id", "job_events": "job_id"}

// registerChangeCallbacks hooks the feed after GORM's create, update and
// delete callbacks of db.
func registerChangeCallbacks(db *gorm.DB, f *changeFeed) error {
	after := func(tx *gorm.DB) {
		if tx.Error != nil || tx.Statement.Schema == nil {
			return
		}
		col, ok := jobTables[tx.Statement.Table]
		if !ok {
			return
		}
		for _, id := range changedJobIDs(tx.Statement, col) {
			f.publish(id)
		}
	}
	cb := db.Callback()
	if err := cb.Create().After("gorm:create").Register("kinflow:job_change_create", after); err != nil {
		return err
	}
	if err := cb.Update().After("gorm:update").Register("kinflow:job_change_update", after); err != nil {
		return err
	}
	return cb.Delete().After("gorm:delete").Register("kinflow:job_change_delete", after)
}

// changedJobIDs names the jobs a statement wrote: from the created values,
// else from a leading `col = ?` condition; [""] when neither says.
func changedJobIDs(st *gorm.Statement, col string) []string {
	field := "JobID"
	if col == "id" {
		field = "ID"
	}
	if f := st.Schema.LookUpField(field); f != nil && st.ReflectValue.IsValid() {
		var ids []string
		collect := func(v reflect.Value) {
			if v.Kind() == reflect.Pointer {
				v = v.Elem()
			}
			if v.Kind() != reflect.Struct {
				return
			}
			if id, zero := f.ValueOf(st.Context, v); !zero {
				if s, ok := id.(string); ok {
					ids = append(ids, s)
				}
			}
		}
		switch rv := st.ReflectValue; rv.Kind() {
		case reflect.Slice, reflect.Array:
			for i := 0; i < rv.Len(); i++ {
				collect(rv.Index(i))
			}
		default:
			collect(rv)
		}
		if len(ids) > 0 {
			return ids
		}
	}
	if c, ok := st.Clauses["WHERE"]; ok {
		if w, ok := c.Expression.(clause.Where); ok {
			for _, e := range w.Exprs {
				switch e := e.(type) {
				case clause.Expr:
					sql := strings.TrimSpace(e.SQL)
					if (strings.HasPrefix(sql, col+" = ?") || strings.HasPrefix(sql, col+"=?")) && len(e.Vars) > 0 {
						if s, ok := e.Vars[0].(string); ok {
							return []string{s}
						}
					}
				case clause.Eq:
					if name, ok := e.Column.(string); ok && name == col {
						if s, ok := e.Value.(string); ok {
							return []string{s}
						}
					}
				}
			}
		}
	}
	return []string{""}
}

// jobChangeChannel is the Postgres channel of migration 0009's triggers.
const jobChangeChannel = "kinflow_job_changed"

// ListenJobChanges relays the database's job-change notices (Postgres
// LISTEN on the channel that migration 0009's triggers notify) to
// OnJobChange's listeners until ctx ends, so that an API process learns at
// once of the writes of worker processes. It reconnects with backoff and,
// on each connection, announces "" (every job may have changed while it
// was not listening). It returns at once on SQLite, where listeners rely on
// their own process's writes and a time-to-live.
func (s *Store) ListenJobChanges(ctx context.Context, log *slog.Logger) {
	if s.Dialect != Postgres || s.url == "" || s.changes == nil {
		return
	}
	// Backoff between connection attempts: 1 s doubling to 30 s, so a
	// database restart is followed within seconds without hammering it.
	wait := time.Second
	for ctx.Err() == nil {
		start := time.Now()
		err := s.listenOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if time.Since(start) > time.Minute {
			wait = time.Second
		}
		log.Warn("job change notices interrupted; statuses fall back to their time-to-live", "error", err, "retry_in", wait.String())
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 30*time.Second)
	}
}

func (s *Store) listenOnce(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, s.url)
	if err != nil {
		return fmt.Errorf("connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "LISTEN "+jobChangeChannel); err != nil {
		return fmt.Errorf("listen: %w", err)
	}
	// "" first: whatever changed while nobody listened; only then is the
	// feed complete.
	s.changes.publish("")
	s.changes.listening.Add(1)
	defer s.changes.listening.Add(-1)
	for {
		n, err := conn.WaitForNotification(ctx)
		if err != nil {
			return err
		}
		s.changes.publish(n.Payload)
	}
}
