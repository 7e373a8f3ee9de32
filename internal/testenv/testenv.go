// Package testenv gives tests the real components they run against: a fresh
// Postgres database, a Temporal dev server from bin/temporal, the repository
// root. When a component is missing a test skips, except under CI=true, where
// it fails: CI must never pass by skipping.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/kinflow/kinflow/internal/freeport"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/testsuite"
)

// InCI reports whether the tests run under CI (CI=true), where a missing
// component is a failure, not a skip.
func InCI() bool {
	v := strings.ToLower(os.Getenv("CI"))
	return v == "true" || v == "1"
}

// Unavailable skips tb (or fails it under CI) because a component is missing.
func Unavailable(tb testing.TB, format string, args ...any) {
	tb.Helper()
	msg := fmt.Sprintf(format, args...)
	if InCI() {
		tb.Fatalf("%s (CI=true: a missing component fails the run)", msg)
	}
	tb.Skipf("%s (skipped outside CI; `make test` starts what is needed)", msg)
}

// RepoRoot is the folder that holds go.mod.
func RepoRoot() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Clean(filepath.Join(filepath.Dir(file), "..", ".."))
}

// PostgresAdminURL is the server tests create their databases on.
func PostgresAdminURL() string {
	if u := os.Getenv("KINFLOW_TEST_POSTGRES_URL"); u != "" {
		return u
	}
	return "postgres://postgres@127.0.0.1:5432/postgres?sslmode=disable"
}

// CreatePostgresDB creates a fresh, uniquely named database and returns its URL
// and a function that drops it.
func CreatePostgresDB(prefix string) (string, func(), error) {
	admin := PostgresAdminURL()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	conn, err := pgx.Connect(ctx, admin)
	if err != nil {
		return "", nil, fmt.Errorf("connect to Postgres at %s: %w", admin, err)
	}
	defer conn.Close(context.Background())
	name := fmt.Sprintf("kinflow_%s_%s", sanitize(prefix), RandHex(6))
	if _, err := conn.Exec(ctx, "CREATE DATABASE "+name); err != nil {
		return "", nil, fmt.Errorf("create database %s: %w", name, err)
	}
	url := replaceDBName(admin, name)
	drop := func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if c, err := pgx.Connect(ctx, admin); err == nil {
			_, _ = c.Exec(ctx, "DROP DATABASE IF EXISTS "+name+" WITH (FORCE)")
			_ = c.Close(ctx)
		}
	}
	return url, drop, nil
}

// PostgresURL creates a fresh database for tb, dropped at cleanup.
func PostgresURL(tb testing.TB) string {
	tb.Helper()
	url, drop, err := CreatePostgresDB(tb.Name())
	if err != nil {
		Unavailable(tb, "Postgres: %v", err)
	}
	tb.Cleanup(drop)
	return url
}

func sanitize(s string) string {
	var b strings.Builder
	for _, r := range strings.ToLower(s) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			b.WriteRune(r)
		} else {
			b.WriteByte('_')
		}
		if b.Len() >= 24 {
			break
		}
	}
	return b.String()
}

func replaceDBName(u, name string) string {
	q := ""
	if i := strings.Index(u, "?"); i >= 0 {
		u, q = u[:i], u[i:]
	}
	if i := strings.LastIndex(u, "/"); i > len("postgres://") {
		u = u[:i]
	}
	return u + "/" + name + q
}

// TemporalPath is the Temporal CLI that `make` builds into bin/.
func TemporalPath() string {
	if p := os.Getenv("KINFLOW_TEMPORAL_CLI"); p != "" {
		return p
	}
	return filepath.Join(RepoRoot(), "bin", "temporal")
}

// SearchAttributeArgs registers kinflow's search attributes on a dev server.
var SearchAttributeArgs = []string{
	"--search-attribute", "JobId=Keyword",
	"--search-attribute", "Method=Keyword",
	"--search-attribute", "Stage=Keyword",
}

// Temporal is a running dev server shared by a test package.
type Temporal struct {
	Server *testsuite.DevServer
	Client client.Client
}

var (
	temporalOnce sync.Once
	temporalInst *Temporal
	temporalErr  error
)

// StartTemporal starts (once per process) a Temporal dev server from
// bin/temporal. It never downloads: a missing binary is an error.
func StartTemporal() (*Temporal, error) {
	temporalOnce.Do(func() {
		path := TemporalPath()
		if _, err := os.Stat(path); err != nil {
			temporalErr = fmt.Errorf("Temporal CLI not built at %s (run `make bin/temporal`): %w", path, err)
			return
		}
		port, err := freeport.Port()
		if err != nil {
			temporalErr = err
			return
		}
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		srv, err := testsuite.StartDevServer(ctx, testsuite.DevServerOptions{
			ExistingPath:  path,
			ClientOptions: &client.Options{HostPort: fmt.Sprintf("127.0.0.1:%d", port), Namespace: "default"},
			LogLevel:      "error",
			ExtraArgs:     SearchAttributeArgs,
		})
		if err != nil {
			temporalErr = fmt.Errorf("start Temporal dev server: %w", err)
			return
		}
		temporalInst = &Temporal{Server: srv, Client: srv.Client()}
	})
	return temporalInst, temporalErr
}

// MustTemporal returns the package's dev server, or skips/fails tb.
func MustTemporal(tb testing.TB) *Temporal {
	tb.Helper()
	t, err := StartTemporal()
	if err != nil {
		Unavailable(tb, "Temporal: %v", err)
	}
	return t
}

// StopTemporal stops the dev server if one was started; call it from TestMain.
func StopTemporal() {
	if temporalInst != nil {
		temporalInst.Client.Close()
		_ = temporalInst.Server.Stop()
	}
}

// FreeAddr is a "127.0.0.1:port" address for a process the test starts
// (freeport.Addr); it fails the test when there is none.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	addr, err := freeport.Addr()
	if err != nil {
		tb.Fatal(err)
	}
	return addr
}

// RandHex is n random bytes in hex: unique names for databases, projects, keys.
func RandHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
