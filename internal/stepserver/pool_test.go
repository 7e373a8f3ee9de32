package stepserver

import (
	"bufio"
	"context"
	"errors"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

// gone is how long the tests give processes to disappear; they normally go
// in milliseconds, the bound only keeps a broken stop from hanging the run.
const gone = 10 * time.Second

// logLines collects a batch's log lines.
type logLines struct {
	mu sync.Mutex
	l  []string
}

func (g *logLines) add(s string) {
	g.mu.Lock()
	g.l = append(g.l, s)
	g.mu.Unlock()
}

func (g *logLines) text() string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return strings.Join(g.l, "\n")
}

// newPool returns a pool with test-sized timeouts that is closed, and
// checked to have left no server behind, at the end of the test.
func newPool(t *testing.T, o Options) *Pool {
	t.Helper()
	if o.KillGrace == 0 {
		o.KillGrace = 500 * time.Millisecond
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 20 * time.Second
	}
	o.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	p := NewPool(o)
	t.Cleanup(func() {
		var pids []int
		for _, s := range p.Status() {
			if s.PID > 0 {
				pids = append(pids, s.PID)
			}
		}
		p.Close()
		for _, pid := range pids {
			if alive(pid) {
				t.Errorf("server %d still alive after Close", pid)
			}
		}
	})
	return p
}

func statusOf(p *Pool, key string) ServerStatus {
	for _, s := range p.Status() {
		if s.Key == key {
			return s
		}
	}
	return ServerStatus{}
}

func do(t *testing.T, p *Pool, spec Spec, n int, act string) (Answer, *logLines, error) {
	t.Helper()
	var g logLines
	a, err := p.Do(context.Background(), spec, n, batchLine(n, act), g.add)
	return a, &g, err
}

func TestReadyThenDone(t *testing.T) {
	p := newPool(t, Options{})
	spec := fakeSpec("methodh_esm2")
	a, g, err := do(t, p, spec, 1, "done")
	if err != nil || a.Batch != 1 || a.Status != StatusDone {
		t.Fatalf("Do = %+v, %v", a, err)
	}
	a, _, err = do(t, p, spec, 2, "done")
	if err != nil || a.Batch != 2 || a.Status != StatusDone {
		t.Fatalf("second Do = %+v, %v", a, err)
	}
	s := statusOf(p, "methodh_esm2")
	if s.State != StateReady || s.PID == 0 || s.Batches != 2 || s.Since.IsZero() {
		t.Errorf("status %+v", s)
	}
	if s.Ready["model"] != "fake-650M" || s.Ready["device"] != "cpu" || pidOf(t, s.Ready["pid"]) != s.PID {
		t.Errorf("ready fields %v", s.Ready)
	}
	log := g.text()
	for _, want := range []string{"starting the step server", "step server ready", "model=fake-650M"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestOOMAnswerKeepsServer(t *testing.T) {
	p := newPool(t, Options{})
	spec := fakeSpec("k")
	a, _, err := do(t, p, spec, 1, "oom")
	if err != nil || a.Status != StatusOOM {
		t.Fatalf("Do = %+v, %v", a, err)
	}
	// (The fake's stderr line may arrive after its answer, so it is not
	// asserted here: stdout and stderr are read independently.)
	pid := statusOf(p, "k").PID
	a, _, err = do(t, p, spec, 2, "done")
	if err != nil || a.Status != StatusDone {
		t.Fatalf("Do after oom = %+v, %v", a, err)
	}
	if got := statusOf(p, "k").PID; got != pid {
		t.Errorf("server restarted after an oom answer: pid %d then %d", pid, got)
	}
}

func TestErrorAnswer(t *testing.T) {
	p := newPool(t, Options{})
	a, _, err := do(t, p, fakeSpec("k"), 7, "error")
	if err != nil || a.Status != StatusError || a.Batch != 7 || a.Message != "bad residue X at 3" {
		t.Fatalf("Do = %+v, %v", a, err)
	}
	if s := statusOf(p, "k"); s.State != StateReady || !strings.Contains(s.LastError, "bad residue") {
		t.Errorf("status %+v", s)
	}
}

// An error answer longer than a log line is still an answer.
func TestLongErrorAnswer(t *testing.T) {
	p := newPool(t, Options{})
	a, _, err := do(t, p, fakeSpec("k"), 1, "longerror")
	if err != nil || a.Status != StatusError || len(a.Message) != 20000 {
		t.Fatalf("Do = %v, %v (message of %d bytes)", a.Status, err, len(a.Message))
	}
}

// A changed command (new env file) replaces the running server.
func TestChangedSpecRestarts(t *testing.T) {
	p := newPool(t, Options{})
	if _, _, err := do(t, p, fakeSpec("k"), 1, "done"); err != nil {
		t.Fatal(err)
	}
	old := statusOf(p, "k").PID
	if _, _, err := do(t, p, fakeSpec("k", "MODEL=v2"), 2, "done"); err != nil {
		t.Fatal(err)
	}
	if pid := statusOf(p, "k").PID; pid == old || alive(old) {
		t.Errorf("server not replaced: pid %d then %d (old alive: %v)", old, pid, alive(old))
	}
}

func TestCrashMidBatchThenRestart(t *testing.T) {
	p := newPool(t, Options{})
	spec := wrappedSpec("k", "FAKE_CHILD=1")
	if _, _, err := do(t, p, spec, 1, "done"); err != nil {
		t.Fatal(err)
	}
	s := statusOf(p, "k")
	child := pidOf(t, s.Ready["child_pid"])
	_, g, err := do(t, p, spec, 2, "crash")
	var se *ServerError
	if !errors.As(err, &se) || se.Op != "batch" {
		t.Fatalf("Do = %v, want a *ServerError", err)
	}
	if msg := err.Error(); !strings.Contains(msg, "RuntimeError: boom") || !strings.Contains(msg, "during batch 2") {
		t.Errorf("error lacks the stderr tail: %v", err)
	}
	if !strings.Contains(g.text(), "[stderr] RuntimeError: boom") {
		t.Errorf("log:\n%s", g.text())
	}
	if alive(s.PID) || alive(child) {
		t.Errorf("crashed server's group still alive: leader %v child %v", alive(s.PID), alive(child))
	}
	a, _, err := do(t, p, spec, 3, "done")
	if err != nil || a.Status != StatusDone {
		t.Fatalf("Do after crash = %+v, %v", a, err)
	}
	s2 := statusOf(p, "k")
	if s2.PID == s.PID || s2.PID == 0 || s2.Batches != 1 || !strings.Contains(s2.LastError, "during batch 2") {
		t.Errorf("status after restart %+v (before %d)", s2, s.PID)
	}
}

func TestProtocolViolationRestarts(t *testing.T) {
	p := newPool(t, Options{})
	spec := fakeSpec("k")
	_, _, err := do(t, p, spec, 4, "wrongbatch")
	if err == nil || !strings.Contains(err.Error(), "answer for batch 5 while batch 4 was the oldest in flight") {
		t.Fatalf("Do = %v", err)
	}
	if s := statusOf(p, "k"); s.PID != 0 {
		t.Errorf("server kept after breaking the protocol: %+v", s)
	}
	if a, _, err := do(t, p, spec, 5, "done"); err != nil || a.Status != StatusDone {
		t.Fatalf("Do after violation = %+v, %v", a, err)
	}
}

func TestNeverReady(t *testing.T) {
	p := newPool(t, Options{StartTimeout: 300 * time.Millisecond})
	var pid int
	g := &logLines{}
	_, err := p.Do(context.Background(), fakeSpec("k", "FAKE_START=never", "FAKE_IGNORE_TERM=1"), 1, batchLine(1, "done"), func(s string) {
		g.add(s)
	})
	var se *ServerError
	if !errors.As(err, &se) || se.Op != "start" || !strings.Contains(err.Error(), "not ready within 300ms") || !strings.Contains(err.Error(), "loading model") {
		t.Fatalf("Do = %v", err)
	}
	if s := statusOf(p, "k"); s.PID != 0 || s.State != StateStopped || !strings.Contains(s.LastError, "not ready") {
		t.Errorf("status %+v", s)
	}
	for _, l := range strings.Split(g.text(), "\n") {
		if i := strings.Index(l, "pid="); i >= 0 {
			pid = atoiOr0(strings.Fields(l[i+4:])[0])
		}
	}
	if alive(pid) {
		t.Errorf("server %d still alive", pid)
	}
}

func TestExitBeforeReady(t *testing.T) {
	p := newPool(t, Options{})
	_, _, err := do(t, p, fakeSpec("k", "FAKE_START=exit"), 1, "done")
	if err == nil || !strings.Contains(err.Error(), "exited with status 3 before it was ready") || !strings.Contains(err.Error(), "weights missing") {
		t.Fatalf("Do = %v", err)
	}
}

func TestProgramNotFound(t *testing.T) {
	p := newPool(t, Options{})
	_, _, err := do(t, p, Spec{Key: "k", Argv: []string{filepath.Join(t.TempDir(), "missing")}}, 1, "done")
	var se *ServerError
	if !errors.As(err, &se) || se.Op != "start" || !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Do = %v", err)
	}
}

// The server gets Spec.Env and nothing of the gpu-worker's environment.
func TestEnvIsOnlySpecEnv(t *testing.T) {
	t.Setenv("KINFLOW_DATABASE_URL", "postgres://secret")
	p := newPool(t, Options{})
	_, g, err := do(t, p, Spec{Key: "k", Argv: []string{"/usr/bin/env"}, Env: []string{"A=1"}}, 1, "done")
	if err == nil || !strings.Contains(err.Error(), "before it was ready") {
		t.Fatalf("Do = %v", err)
	}
	log := g.text()
	if !strings.Contains(log, "[stdout] A=1") || !strings.Contains(log, "[stdout] PYTHONUNBUFFERED=1") || strings.Contains(log, "secret") {
		t.Errorf("environment seen by the server:\n%s", log)
	}
}

func TestGarbageLinesAreLog(t *testing.T) {
	p := newPool(t, Options{})
	a, g, err := do(t, p, fakeSpec("k"), 1, "garbage")
	if err != nil || a.Status != StatusDone {
		t.Fatalf("Do = %+v, %v", a, err)
	}
	log := g.text()
	for _, want := range []string{"[stdout] hello from the model", `[stdout] {"foo": 1}`, "[stdout] [1, 2]", `[stdout] {"batch": 1}`, "[stdout] {not json"} {
		if !strings.Contains(log, want) {
			t.Errorf("log lacks %q:\n%s", want, log)
		}
	}
}

func TestMultiLineManifestIsCompacted(t *testing.T) {
	p := newPool(t, Options{})
	line := []byte("{\n  \"batch\": 3,\n  \"act\": \"done\"\n}\n")
	a, err := p.Do(context.Background(), fakeSpec("k"), 3, line, nil)
	if err != nil || a.Status != StatusDone || a.Batch != 3 {
		t.Fatalf("Do = %+v, %v", a, err)
	}
}

func TestIdleExit(t *testing.T) {
	p := newPool(t, Options{Idle: 300 * time.Millisecond})
	spec := wrappedSpec("k", "FAKE_CHILD=1")
	if _, _, err := do(t, p, spec, 1, "done"); err != nil {
		t.Fatal(err)
	}
	s := statusOf(p, "k")
	server, child := pidOf(t, s.Ready["pid"]), pidOf(t, s.Ready["child_pid"])
	eventually(t, gone, "idle server stopped", func() bool { return statusOf(p, "k").State == StateStopped })
	for _, pid := range []int{s.PID, server, child} {
		if alive(pid) {
			t.Errorf("pid %d alive after the idle stop", pid)
		}
	}
	if _, _, err := do(t, p, spec, 2, "done"); err != nil {
		t.Fatal(err)
	}
	if s2 := statusOf(p, "k"); s2.PID == s.PID || s2.PID == 0 {
		t.Errorf("status after idle restart %+v", s2)
	}
}

func TestLRUEvictionMax1(t *testing.T) {
	p := newPool(t, Options{Max: 1})
	a, b := fakeSpec("a"), fakeSpec("b")
	if _, _, err := do(t, p, a, 1, "done"); err != nil {
		t.Fatal(err)
	}
	pidA := statusOf(p, "a").PID
	_, g, err := do(t, p, b, 1, "done")
	if err != nil {
		t.Fatal(err)
	}
	if alive(pidA) {
		t.Errorf("server a (%d) alive after b started with Max=1", pidA)
	}
	if !strings.Contains(g.text(), "stopping the least recently used step server to make room step=b stopped_step=a") {
		t.Errorf("log:\n%s", g.text())
	}
	if s := statusOf(p, "a"); s.State != StateStopped || s.PID != 0 {
		t.Errorf("a: %+v", s)
	}

	// A server mid-batch is never evicted: b waits for a's batch to end.
	release := filepath.Join(t.TempDir(), "release")
	aDone := make(chan error, 1)
	go func() {
		ans, err := p.Do(context.Background(), a, 2, []byte(`{"batch": 2, "act": "wait", "file": "`+release+`"}`), nil)
		if err == nil && ans.Status != StatusDone {
			err = errors.New("status " + ans.Status)
		}
		aDone <- err
	}()
	eventually(t, gone, "a busy", func() bool { return statusOf(p, "a").State == StateBusy })
	bDone := make(chan error, 1)
	go func() {
		_, _, err := do(t, p, b, 2, "done")
		bDone <- err
	}()
	eventually(t, gone, "b waiting for room", func() bool { return statusOf(p, "b").State == StateWaiting })
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := <-aDone; err != nil {
		t.Fatalf("a's batch: %v", err)
	}
	if err := <-bDone; err != nil {
		t.Fatalf("b's batch: %v", err)
	}
}

func TestDifferentKeysRunConcurrently(t *testing.T) {
	p := newPool(t, Options{Max: 2})
	release := filepath.Join(t.TempDir(), "release")
	line := []byte(`{"batch": 1, "act": "wait", "file": "` + release + `"}`)
	errs := make(chan error, 2)
	for _, k := range []string{"a", "b"} {
		go func() {
			_, err := p.Do(context.Background(), fakeSpec(k), 1, line, nil)
			errs <- err
		}()
	}
	eventually(t, gone, "a and b busy at once", func() bool {
		return statusOf(p, "a").State == StateBusy && statusOf(p, "b").State == StateBusy
	})
	if err := os.WriteFile(release, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := <-errs; err != nil {
			t.Fatal(err)
		}
	}
}

// TestSameKeyManyCallers: eight callers share one server (batches sent ahead
// up to Options.Ahead); each gets the answer to its own batch.
func TestSameKeyManyCallers(t *testing.T) {
	p := newPool(t, Options{})
	spec := fakeSpec("k")
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for i := 1; i <= 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a, err := p.Do(context.Background(), spec, i, batchLine(i, "done"), nil)
			if err == nil && (a.Batch != i || a.Status != StatusDone) {
				err = errors.New("answer for the wrong batch")
			}
			errs <- err
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Error(err)
		}
	}
	if s := statusOf(p, "k"); s.Batches != 8 {
		t.Errorf("status %+v", s)
	}
}

func TestCancelMidBatch(t *testing.T) {
	p := newPool(t, Options{})
	spec := wrappedSpec("k", "FAKE_CHILD=1", "FAKE_IGNORE_TERM=1")
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		_, err := p.Do(ctx, spec, 1, batchLine(1, "hang"), nil)
		done <- err
	}()
	eventually(t, gone, "batch in flight", func() bool { return statusOf(p, "k").State == StateBusy })
	s := statusOf(p, "k")
	pids := []int{s.PID, pidOf(t, s.Ready["pid"]), pidOf(t, s.Ready["child_pid"])}
	cancel()
	if err := <-done; !errors.Is(err, context.Canceled) {
		t.Fatalf("Do = %v, want context.Canceled", err)
	}
	// Do returns once the group is gone.
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d alive after cancellation", pid)
		}
	}
	if s := statusOf(p, "k"); s.PID != 0 || s.State != StateStopped {
		t.Errorf("status %+v", s)
	}
	if a, _, err := do(t, p, spec, 2, "done"); err != nil || a.Status != StatusDone {
		t.Fatalf("Do after cancel = %+v, %v", a, err)
	}
}

func TestCloseLeavesNothing(t *testing.T) {
	p := newPool(t, Options{Max: 3})
	specs := []Spec{
		wrappedSpec("a", "FAKE_CHILD=1"),
		wrappedSpec("b", "FAKE_CHILD=1", "FAKE_IGNORE_EOF=1"),
		fakeSpec("c", "FAKE_CHILD=1", "FAKE_IGNORE_EOF=1", "FAKE_IGNORE_TERM=1"),
	}
	var pids []int
	for _, s := range specs {
		if _, _, err := do(t, p, s, 1, "done"); err != nil {
			t.Fatal(err)
		}
		st := statusOf(p, s.Key)
		pids = append(pids, st.PID, pidOf(t, st.Ready["pid"]), pidOf(t, st.Ready["child_pid"]))
	}
	p.Close()
	for _, pid := range pids {
		if alive(pid) {
			t.Errorf("pid %d alive after Close", pid)
		}
	}
	if _, _, err := do(t, p, specs[0], 2, "done"); !errors.Is(err, ErrClosed) {
		t.Errorf("Do after Close = %v", err)
	}
}

// A kill -9 of the gpu-worker leaves no server: the kernel kills the
// server (parent-death signal) and the watchdog kills the rest of its group.
func TestParentKill9LeavesNoServer(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(exe)
	cmd.Env = append(os.Environ(), roleEnv+"="+roleParent)
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var line string
	select {
	case line = <-lines:
	case <-time.After(30 * time.Second):
		t.Fatal("the parent did not report its server")
	}
	f := strings.Fields(line)
	if len(f) != 4 || f[0] != "PIDS" {
		t.Fatalf("parent said %q", line)
	}
	var pids []int
	for _, s := range f[1:] {
		pid := atoiOr0(s)
		if !alive(pid) {
			t.Fatalf("pid %s not alive before the kill (%q)", s, line)
		}
		pids = append(pids, pid)
	}
	if err := cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for _, pid := range pids {
		eventually(t, gone, "server processes gone after kill -9 of their parent", func() bool { return !alive(pid) })
	}
}
