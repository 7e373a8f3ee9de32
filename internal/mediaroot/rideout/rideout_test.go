package rideout

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/mediaroot"
)

// fixture is a marked media root opened for the test, and an activity
// that writes a job file under it.
type fixture struct {
	root  *mediaroot.Root
	path  string
	runs  atomic.Int32
	final string
	// first, when set, runs at the start of the activity's first run.
	first func()
}

func newFixture(t *testing.T) *fixture {
	t.Helper()
	path := filepath.Join(t.TempDir(), "media")
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	r, err := mediaroot.Open(path, mediaroot.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(r.Close)
	return &fixture{root: r, path: path, final: filepath.Join(path, "jobs", "j1", "out.txt")}
}

// WriteJobFile writes the job's file; a failure is non-retryable, as the
// errors of an input that cannot be read are.
func (f *fixture) WriteJobFile(ctx context.Context) error {
	if f.runs.Add(1) == 1 && f.first != nil {
		f.first()
	}
	if err := fsutil.WriteFileAtomic(f.final, []byte("ok\n"), 0o644); err != nil {
		return temporal.NewNonRetryableApplicationError("write "+f.final+": "+err.Error(), "InvalidInput", nil)
	}
	return nil
}

// Skipped is WriteJobFile under a name the interceptor is told to skip.
func (f *fixture) Skipped(ctx context.Context) error { return f.WriteJobFile(ctx) }

func (f *fixture) env(t *testing.T, rideOut time.Duration) *testsuite.TestActivityEnvironment {
	var s testsuite.WorkflowTestSuite
	env := s.NewTestActivityEnvironment()
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{Interceptor(f.root, rideOut, slog.New(slog.NewTextHandler(io.Discard, nil)), "Skipped")}})
	env.RegisterActivity(f.WriteJobFile)
	env.RegisterActivity(f.Skipped)
	return env
}

// TestActivityWaitsForTheRootAndRunsAgain: an activity whose write fails
// because the media root was renamed away under it (its error here is
// non-retryable, as that of an input it could not read is) is held,
// creates nothing at the old path, and runs again once the root is back:
// it succeeds in the same attempt. A second one, started while the root is
// away, waits before it runs at all.
func TestActivityWaitsForTheRootAndRunsAgain(t *testing.T) {
	f := newFixture(t)
	env := f.env(t, time.Minute)
	aside := f.path + ".aside"
	stray := make(chan error, 1)
	putBack := func() {
		time.Sleep(1500 * time.Millisecond)
		if _, err := os.Lstat(f.path); !errors.Is(err, os.ErrNotExist) {
			stray <- errors.New("the root was recreated while away")
		} else {
			stray <- nil
		}
		if err := os.Rename(aside, f.path); err != nil {
			t.Error(err)
		}
	}
	f.first = func() {
		if err := os.Rename(f.path, aside); err != nil {
			t.Error(err)
		}
		go putBack()
	}
	if _, err := env.ExecuteActivity(f.WriteJobFile); err != nil {
		t.Fatalf("the activity failed: %v", err)
	}
	if err := <-stray; err != nil {
		t.Fatal(err)
	}
	if b, err := os.ReadFile(f.final); err != nil || string(b) != "ok\n" || f.runs.Load() != 2 {
		t.Fatalf("job file: %q %v after %d runs", b, err, f.runs.Load())
	}

	if err := os.Rename(f.path, aside); err != nil {
		t.Fatal(err)
	}
	f.root.CheckNow()
	go putBack()
	if _, err := env.ExecuteActivity(f.WriteJobFile); err != nil {
		t.Fatalf("the second activity failed: %v", err)
	}
	if err := <-stray; err != nil {
		t.Fatal(err)
	}
	if f.runs.Load() != 3 {
		t.Fatalf("the second activity ran %d times, want once, after the root was back", f.runs.Load()-2)
	}
}

// TestActivityGivesUpRetryably: a root that stays away past the ride-out
// fails the activity with a retryable MediaRootUnavailable error whose
// message names no path; an activity in the skip list is not held (its own
// error comes back at once).
func TestActivityGivesUpRetryably(t *testing.T) {
	f := newFixture(t)
	env := f.env(t, time.Second)
	if err := os.Rename(f.path, f.path+".aside"); err != nil {
		t.Fatal(err)
	}
	f.root.CheckNow()
	_, err := env.ExecuteActivity(f.WriteJobFile)
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != ErrType || ae.NonRetryable() || strings.Contains(err.Error(), f.path) || !mediaroot.UnavailableText(err.Error()) {
		t.Fatalf("error %v (%T)", err, err)
	}
	if _, err := os.Lstat(f.path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the root was recreated: %v", err)
	}
	runs := f.runs.Load()
	start := time.Now()
	_, err = env.ExecuteActivity(f.Skipped)
	if !errors.As(err, &ae) || ae.Type() != "InvalidInput" || time.Since(start) > 500*time.Millisecond || f.runs.Load() != runs+1 {
		t.Fatalf("skipped activity: %v after %v", err, time.Since(start))
	}
}
