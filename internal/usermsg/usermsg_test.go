package usermsg

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/store"
)

// closedPortDSN is a Postgres DSN with a user, password and database name
// on a port nothing listens on: a database outage as the drivers report it.
func closedPortDSN(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	port := l.Addr().(*net.TCPAddr).Port
	l.Close()
	return "postgres://kinflow_secret_user:hunter2@127.0.0.1:" + strconv.Itoa(port) + "/kinflow_private_db?sslmode=disable"
}

// leaks lists the connection details found in a user-facing text.
func leaks(text, dsn string) []string {
	var out []string
	for _, s := range []string{"kinflow_secret_user", "hunter2", "kinflow_private_db", "127.0.0.1", "postgres://", "host=", "user=", "database="} {
		if strings.Contains(text, s) {
			out = append(out, s)
		}
	}
	if i := strings.LastIndex(dsn, ":"); i > 0 {
		if port := strings.SplitN(dsn[i+1:], "/", 2)[0]; strings.Contains(text, port) {
			out = append(out, port)
		}
	}
	return out
}

// TestRedactRealDatabaseOutage: the error the store really returns for an
// unreachable Postgres carries the connection details; Redact names the
// failing part and nothing else.
func TestRedactRealDatabaseOutage(t *testing.T) {
	dsn := closedPortDSN(t)
	_, err := store.Open(context.Background(), dsn)
	if err == nil {
		t.Fatal("opened a database on a closed port")
	}
	t.Logf("driver error: %v", err)
	if len(leaks(err.Error(), dsn)) == 0 {
		t.Logf("the driver's error carries no detail (nothing to redact): %v", err)
	}
	for _, msg := range []string{err.Error(), "predict stage 0: load units: " + err.Error()} {
		got := Redact(msg)
		if got != DatabaseUnreachable || len(leaks(got, dsn)) > 0 {
			t.Fatalf("Redact(%q) = %q", msg, got)
		}
	}
}

func TestRedactAddresses(t *testing.T) {
	for in, want := range map[string]string{
		"GPU service at http://10.0.0.5:7000/embed/jobs answered 502": "GPU service at [server address] answered 502",
		"lookup gpu-host.internal:7000 failed":                        "lookup [server address] failed",
		"cache_files_quarantined:12":                                  "cache_files_quarantined:12",
		"rate 1/2 of rows at 12:30":                                   "rate 1/2 of rows at 12:30",
		"connect [fe80::1%eth0]:5432 timed out":                       "connect [server address] timed out",
		"The job could not be queued.":                                "The job could not be queued.",
	} {
		if got := Redact(in); got != want {
			t.Errorf("Redact(%q) = %q, want %q", in, got, want)
		}
	}
	if got := Redact(`failed to connect to ` + "`host=db.example user=app database=kin`" + `: dial error (dial tcp 10.1.2.3:5432: connect: connection refused)`); got != DatabaseUnreachable {
		t.Errorf("pgconn text: %q", got)
	}
}

// TestDatabaseDownIsNotEveryError: a missing file (a syscall.Errno inside,
// which has Timeout and Temporary) or a query's own error is not an outage.
func TestDatabaseDownIsNotEveryError(t *testing.T) {
	_, err := os.Open("/nonexistent/kinflow/output.csv")
	for _, e := range []error{err, errors.New("record not found"), fmt.Errorf("load job: %w", errors.New("ERROR: syntax error (SQLSTATE 42601)"))} {
		if DatabaseDown(e) {
			t.Errorf("DatabaseDown(%v) = true", e)
		}
	}
	if !DatabaseDown(fmt.Errorf("look up API key: %w", io.ErrUnexpectedEOF)) {
		t.Error("a dropped connection is an outage")
	}
}
