package stepserver

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"os/signal"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// The test binary doubles as the programs the tests run: a fake step server
// (roleServer) and a gpu-worker stand-in that is killed with kill -9
// (roleParent).
const roleEnv = "STEPSERVER_TEST_ROLE"

const (
	roleServer = "server"
	roleParent = "parent"
)

func TestMain(m *testing.M) {
	switch os.Getenv(roleEnv) {
	case roleServer:
		fakeServer()
		os.Exit(0)
	case roleParent:
		fakeParent()
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// fakeServer speaks the protocol. Its environment chooses how it starts:
// FAKE_LOAD (a duration before ready), FAKE_START=exit|never,
// FAKE_CHILD=1 (start a `sleep` that stays in its group), FAKE_IGNORE_TERM=1,
// FAKE_IGNORE_EOF=1. Each batch line's "act" chooses the answer: done, oom,
// error, longerror, crash, garbage, wrongbatch, hang, wait (for the file named by
// "file"; any act with a "file" waits for it first), waitcrash (wait, then crash), next (answer only once the next line
// has been read). Lines are read as they come, each logged on stderr as
// "received batch N" (a pipelined server reads ahead too).
func fakeServer() {
	if os.Getenv("FAKE_IGNORE_TERM") == "1" {
		signal.Ignore(syscall.SIGTERM)
	}
	fmt.Fprintln(os.Stderr, "loading model")
	switch os.Getenv("FAKE_START") {
	case "exit":
		fmt.Fprintln(os.Stderr, "cannot load the model: weights missing")
		os.Exit(3)
	case "never":
		blockForever()
	}
	if d, err := time.ParseDuration(os.Getenv("FAKE_LOAD")); err == nil {
		time.Sleep(d)
	}
	childPID := 0
	if os.Getenv("FAKE_CHILD") == "1" {
		c := exec.Command("sleep", "1000")
		if err := c.Start(); err != nil {
			fmt.Fprintln(os.Stderr, "start child:", err)
			os.Exit(1)
		}
		childPID = c.Process.Pid
	}
	out := bufio.NewWriter(os.Stdout)
	say := func(v any) {
		b, _ := json.Marshal(v)
		out.Write(append(b, '\n'))
		out.Flush()
	}
	say(map[string]any{"ready": true, "model": "fake-650M", "device": "cpu", "pid": os.Getpid(), "child_pid": childPID})
	type line struct {
		Batch int    `json:"batch"`
		Act   string `json:"act"`
		File  string `json:"file"`
	}
	lines := make(chan line, 64)
	var received atomic.Int64
	go func() {
		in := bufio.NewScanner(os.Stdin)
		in.Buffer(make([]byte, 1<<20), 64<<20)
		for in.Scan() {
			var m line
			if err := json.Unmarshal(in.Bytes(), &m); err != nil {
				fmt.Fprintln(os.Stderr, "bad line:", err)
				os.Exit(2)
			}
			fmt.Fprintf(os.Stderr, "received batch %d\n", m.Batch)
			received.Add(1)
			lines <- m
		}
		close(lines)
	}()
	waitFile := func(f string) {
		for {
			if _, err := os.Stat(f); err == nil {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	var handled int64
	for m := range lines {
		handled++
		if m.File != "" && m.Act != "waitcrash" {
			// Any act waits for its file first, if it names one.
			waitFile(m.File)
		}
		fmt.Fprintf(os.Stderr, "batch %d: %s\n", m.Batch, m.Act)
		switch m.Act {
		case "oom":
			fmt.Fprintln(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory")
			say(map[string]any{"batch": m.Batch, "status": "oom"})
		case "error":
			say(map[string]any{"batch": m.Batch, "status": "error", "message": "bad residue X at 3"})
		case "crash":
			fmt.Fprintln(os.Stderr, "Traceback (most recent call last):")
			fmt.Fprintln(os.Stderr, "RuntimeError: boom")
			os.Exit(1)
		case "garbage":
			out.WriteString("hello from the model\n")
			out.WriteString("{\"foo\": 1}\n")
			out.WriteString("[1, 2]\n")
			out.WriteString("{\"batch\": 1}\n")
			out.WriteString("{not json\n")
			say(map[string]any{"batch": m.Batch, "status": "done"})
		case "longerror":
			say(map[string]any{"batch": m.Batch, "status": "error", "message": strings.Repeat("x", 20000)})
		case "wrongbatch":
			say(map[string]any{"batch": m.Batch + 1, "status": "done"})
		case "hang":
			blockForever()
		case "wait":
			waitFile(m.File)
			say(map[string]any{"batch": m.Batch, "status": "done"})
		case "waitcrash":
			waitFile(m.File)
			fmt.Fprintln(os.Stderr, "RuntimeError: boom")
			os.Exit(1)
		case "next":
			for received.Load() <= handled {
				time.Sleep(time.Millisecond)
			}
			say(map[string]any{"batch": m.Batch, "status": "done"})
		default:
			say(map[string]any{"batch": m.Batch, "status": "done"})
		}
	}
	if os.Getenv("FAKE_IGNORE_EOF") == "1" {
		blockForever()
	}
}

// fakeParent plays the gpu-worker: it starts a wrapped server through a
// pool, sends it a batch that hangs, prints "PIDS <leader> <server>
// <child>" once the batch is in flight and waits to be killed.
func fakeParent() {
	p := NewPool(Options{KillGrace: 500 * time.Millisecond, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	spec := wrappedSpec("k", "FAKE_CHILD=1", "FAKE_IGNORE_TERM=1")
	go func() {
		_, err := p.Do(context.Background(), spec, 1, batchLine(1, "hang"), nil)
		fmt.Fprintln(os.Stderr, "Do returned:", err)
		os.Exit(1)
	}()
	for {
		for _, s := range p.Status() {
			if s.State == StateBusy {
				fmt.Printf("PIDS %d %v %v\n", s.PID, s.Ready["pid"], s.Ready["child_pid"])
				blockForever()
			}
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeSpec runs the fake server directly.
func fakeSpec(key string, env ...string) Spec {
	exe, err := os.Executable()
	if err != nil {
		panic(err)
	}
	return Spec{Key: key, Argv: []string{exe}, Env: append([]string{roleEnv + "=" + roleServer, "PATH=" + os.Getenv("PATH")}, env...)}
}

// wrappedSpec runs the fake server as the child of a shell (a wrapper
// script that does not exec), so that a stop must reach a grandchild.
func wrappedSpec(key string, env ...string) Spec {
	s := fakeSpec(key, env...)
	s.Argv = []string{"/bin/sh", "-c", `"$0"; echo "wrapper: server ended with $?" >&2`, s.Argv[0]}
	return s
}

func batchLine(n int, act string) []byte {
	return []byte(fmt.Sprintf(`{"version": 1, "job_id": "j1", "step_key": "k", "batch": %d, "act": %q, "seqs": []}`, n, act))
}

// alive reports whether pid is a live (not zombie) process.
func alive(pid int) bool {
	if pid <= 0 {
		return false
	}
	state, _, ok := procStat(pid)
	return ok && state != "Z" && state != "X"
}

// pidOf reads a pid from a ready field (a JSON number).
func pidOf(t *testing.T, v any) int {
	t.Helper()
	f, ok := v.(float64)
	if !ok || f <= 0 {
		t.Fatalf("not a pid: %v", v)
	}
	return int(f)
}

// eventually polls cond until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %v: %s", d, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func atoiOr0(s string) int {
	n, _ := strconv.Atoi(strings.TrimSpace(s))
	return n
}

// blockForever parks the fake for good. Not `select {}`: in a process with
// no other goroutine the runtime would call that a deadlock and exit.
func blockForever() {
	for {
		time.Sleep(time.Hour)
	}
}
