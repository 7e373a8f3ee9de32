package store_test

import (
	"context"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestQueryBesideFullPool is go-gorm/gorm#7465 as it met kinflow's submit
// path: with every pooled connection held by a transaction, a query of a new
// text waits for a connection; the transactions then run that same text.
// Through GORM's prepared-statement cache the waiting query had claimed the
// text's preparation, the transactions waited for it, and nothing moved
// again: a fresh api under a burst of submits hung for good. On Postgres the
// store has no such cache (pgx prepares per connection), so the query,
// through the store's plain handle or Unprepared, waits its turn.
func TestQueryBesideFullPool(t *testing.T) {
	for name, db := range map[string]func(s *store.Store, ctx context.Context) *gorm.DB{
		"plain":      func(s *store.Store, ctx context.Context) *gorm.DB { return s.DB.WithContext(ctx) },
		"unprepared": func(s *store.Store, ctx context.Context) *gorm.DB { return s.Unprepared(ctx) },
	} {
		t.Run(name, func(t *testing.T) { queryBesideFullPool(t, db) })
	}
}

func queryBesideFullPool(t *testing.T, db func(s *store.Store, ctx context.Context) *gorm.DB) {
	s := testenv.OpenStore(t, store.Postgres)
	sqlDB, err := s.DB.DB()
	if err != nil {
		t.Fatal(err)
	}
	sqlDB.SetMaxOpenConns(2)
	ctx := context.Background()
	const q = "SELECT count(*) FROM jobs WHERE id IN ?"
	ids := []string{"a", "b", "c"} // a text no earlier query prepared

	var txs []*gorm.DB
	for range 2 {
		tx := s.DB.WithContext(ctx).Begin()
		if tx.Error != nil {
			t.Fatal(tx.Error)
		}
		if err := tx.Exec("SELECT 1").Error; err != nil { // holds its connection
			t.Fatal(err)
		}
		txs = append(txs, tx)
	}
	done := make(chan error, 3)
	go func() {
		var n int64
		done <- db(s, ctx).Raw(q, ids).Scan(&n).Error
	}()
	time.Sleep(200 * time.Millisecond) // the query above now waits for a connection
	var wg sync.WaitGroup
	for _, tx := range txs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var n int64
			if err := tx.Raw(q, ids).Scan(&n).Error; err != nil {
				done <- err
				return
			}
			done <- tx.Commit().Error
		}()
	}
	deadline := time.After(30 * time.Second)
	for range 3 {
		select {
		case err := <-done:
			if err != nil {
				t.Fatal(err)
			}
		case <-deadline:
			t.Fatal("deadlock: the query and the transactions wait on each other")
		}
	}
	wg.Wait()
}

// TestUnpreparedSkipsSQLiteCache: on SQLite, where GORM's prepared-statement
// cache is on, a query through Unprepared adds no statement to it (an IN
// list of each length would add one), and a write through it still takes
// the write gate's turn (it runs while no transaction holds the gate).
func TestUnpreparedSkipsSQLiteCache(t *testing.T) {
	s := testenv.OpenStore(t, store.SQLite)
	ctx := context.Background()
	cached := func() int {
		t.Helper()
		n, ok := store.PreparedCount(s)
		if !ok {
			t.Fatal("SQLite has no prepared-statement cache")
		}
		return n
	}
	before := cached()
	var n int64
	if err := s.Unprepared(ctx).Raw("SELECT count(*) FROM jobs WHERE id IN ?", []string{"a", "b", "c", "d", "e"}).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if got := cached(); got != before {
		t.Fatalf("prepared statements %d → %d after an Unprepared query", before, got)
	}
	if err := s.DB.WithContext(ctx).Raw("SELECT count(*) FROM jobs WHERE id IN ?", []string{"a", "b", "c", "d", "e", "f"}).Scan(&n).Error; err != nil {
		t.Fatal(err)
	}
	if got := cached(); got != before+1 {
		t.Fatalf("prepared statements %d → %d after a plain query, want one more", before, got)
	}
	if err := s.Unprepared(ctx).Exec("DELETE FROM jobs WHERE id IN ?", []string{"x", "y"}).Error; err != nil {
		t.Fatal(err)
	}
}
