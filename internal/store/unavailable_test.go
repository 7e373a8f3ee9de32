package store

import (
	"errors"
	"fmt"
	"testing"
)

// TestUnavailable: connection failures (as pgx words them, wrapped or as
// text only) are an outage; a statement's error is not.
func TestUnavailable(t *testing.T) {
	for _, msg := range []string{
		"load stage 0 of job x: failed to connect to `user=postgres database=kinflow`: 127.0.0.1:39581 (127.0.0.1): dial error: dial tcp 127.0.0.1:39581: connect: connection refused",
		"FATAL: the database system is shutting down (SQLSTATE 57P03)",
		"unexpected EOF",
	} {
		if !Unavailable(fmt.Errorf("wrapped: %w", errors.New(msg))) {
			t.Errorf("not an outage: %s", msg)
		}
		if msg != "unexpected EOF" && !UnavailableText(msg) {
			t.Errorf("text not an outage: %s", msg)
		}
	}
	for _, msg := range []string{"ERROR: duplicate key value violates unique constraint (SQLSTATE 23505)", "record not found"} {
		if Unavailable(errors.New(msg)) || UnavailableText(msg) {
			t.Errorf("an outage: %s", msg)
		}
	}
	// A step program's broken pipe is not the database.
	if UnavailableText("write to step program: broken pipe") {
		t.Error("a broken pipe taken for the database")
	}
}
