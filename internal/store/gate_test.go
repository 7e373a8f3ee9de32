package store

import (
	"context"
	"errors"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"gorm.io/gorm"
)

// Many writers of one process on one SQLite file: every write lands, none
// meets SQLITE_BUSY (they queue in the gate, not in SQLite's polling busy
// handler), and readers run beside them.
func TestWriteGateManyWriters(t *testing.T) {
	s, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "gate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if err := s.DB.Exec("CREATE TABLE counts (id INTEGER PRIMARY KEY, n INTEGER NOT NULL)").Error; err != nil {
		t.Fatal(err)
	}
	if err := s.DB.Exec("INSERT INTO counts (id, n) VALUES (1, 0)").Error; err != nil {
		t.Fatal(err)
	}
	const writers, each = 40, 25
	var wg sync.WaitGroup
	errs := make(chan error, writers*each+writers)
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range each {
				// Read-then-write in a transaction, and a plain update.
				err := s.DB.Transaction(func(tx *gorm.DB) error {
					var n int
					if err := tx.Raw("SELECT n FROM counts WHERE id = 1").Scan(&n).Error; err != nil {
						return err
					}
					return tx.Exec("UPDATE counts SET n = ? WHERE id = 1", n+1).Error
				})
				if err != nil {
					errs <- err
				}
				if w%2 == 0 {
					var n int
					if err := s.DB.Raw("SELECT n FROM counts WHERE id = 1").Scan(&n).Error; err != nil {
						errs <- err
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatalf("a write failed: %v", err)
	}
	var n int
	s.DB.Raw("SELECT n FROM counts WHERE id = 1").Scan(&n)
	if n != writers*each {
		t.Fatalf("count %d, want %d: a read-then-write lost an update", n, writers*each)
	}
}

// A transaction that writes outside itself waits for its own place: it
// gets ErrBusy after the wait, never a hang.
func TestWriteGateSelfWaitIsAnError(t *testing.T) {
	s, err := Open(context.Background(), "sqlite:"+filepath.Join(t.TempDir(), "gate.db"))
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	g, ok := s.DB.ConnPool.(*writeGate)
	if !ok {
		t.Fatalf("SQLite store without its write gate: %T", s.DB.ConnPool)
	}
	g.wait = 200 * time.Millisecond
	s.DB.Exec("CREATE TABLE t (x INTEGER)")
	start := time.Now()
	err = s.DB.Transaction(func(tx *gorm.DB) error {
		return s.DB.Exec("INSERT INTO t (x) VALUES (1)").Error
	})
	if !errors.Is(err, ErrBusy) || time.Since(start) > 10*time.Second {
		t.Fatalf("nested write outside the transaction: %v after %v, want ErrBusy", err, time.Since(start))
	}
	// The place is free again.
	if err := s.DB.Exec("INSERT INTO t (x) VALUES (2)").Error; err != nil {
		t.Fatal(err)
	}
}
