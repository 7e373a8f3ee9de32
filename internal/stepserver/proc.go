package stepserver

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/procio"
)

// tailLines is how many stderr lines a failure quotes: enough for a Python
// traceback's last frames and its exception line.
const tailLines = 20

// groupGoneWait bounds the wait for the last members of a killed process
// group to exit: SIGKILLed processes are gone within milliseconds, but one
// inside a GPU driver call exits only when the call returns, and the next
// model should not be loaded while the old one still holds the memory. A
// process stuck longer than this is reported and left to the kernel.
const groupGoneWait = 10 * time.Second

// maxProtocolLine is the longest stdout line read as a ready line or an
// answer: an error answer may carry a whole traceback, well over a log
// line's procio.MaxLine; longer lines are cut (and so are log text).
const maxProtocolLine = 1 << 20

// answer is one parsed answer line, or the protocol violation it was.
type answer struct {
	a   Answer
	err error
}

// sent is one batch line handed to a server. A server answers its lines in
// the order it got them, so the oldest sent batch is the one an answer is
// for.
type sent struct {
	batch int
	// line is the batch's line, until the writer has written it.
	line []byte
	// logLine receives the server's output while this batch is the oldest
	// in flight.
	logLine func(string)
	// answer receives the batch's answer (or the protocol violation it
	// was); wrote the outcome of writing its line.
	answer chan answer
	wrote  chan error
}

// proc is one running server process and its end of the protocol.
type proc struct {
	spec  Spec
	cmd   *exec.Cmd
	pid   int
	since time.Time
	stdin io.WriteCloser
	// lifeline's read end is the watchdog's stdin: when this process dies,
	// however it dies, the watchdog reads EOF and kills the server's group.
	lifeline *os.File
	watchdog *exec.Cmd
	wdExited chan struct{}
	// exited is closed once the server's leader has exited and its output
	// is flushed; waitErr and state are set before.
	exited  chan struct{}
	waitErr error
	state   *os.ProcessState

	stdout, stderr *procio.LineWriter
	readyCh        chan struct{}
	// writes feeds writeLines, which writes the lines to stdin in order:
	// a write blocks while the server has not read the lines before it,
	// and no caller should wait for that (at most Options.Ahead queued).
	writes chan *sent

	mu        sync.Mutex
	ready     bool
	readyInfo map[string]any
	// queue holds the batches sent and not yet answered, oldest first.
	queue []*sent
	// stopWhy says which batch the pool stopped the server for (cancelled,
	// or broke the protocol): the other batches in flight were bystanders.
	stopWhy string
	// logLine receives output while the server starts (Send, Ready).
	logLine func(string)
	idleLog func(stream, line string)
	tail    []string
	// broken says why the process may not serve another batch.
	broken  string
	batches int
}

// spawn starts spec's program with its watchdog; ahead bounds the lines
// queued for writing.
func spawn(spec Spec, grace time.Duration, ahead int, logLine func(string), idleLog func(stream, line string)) (*proc, error) {
	if len(spec.Argv) == 0 || spec.Argv[0] == "" {
		return nil, errors.New("empty command")
	}
	pr := &proc{
		spec:    spec,
		exited:  make(chan struct{}),
		readyCh: make(chan struct{}),
		writes:  make(chan *sent, max(ahead, 1)),
		logLine: logLine,
		idleLog: idleLog,
	}
	cmd := exec.Command(spec.Argv[0], spec.Argv[1:]...)
	cmd.Dir = spec.Dir
	// Never nil: a nil Env would hand the program the whole environment of
	// the gpu-worker, secrets included.
	cmd.Env = append([]string{}, spec.Env...)
	if !hasEnv(cmd.Env, "PYTHONUNBUFFERED") {
		// A Python server must flush each answer line at once.
		cmd.Env = append(cmd.Env, "PYTHONUNBUFFERED=1")
	}
	cmd.SysProcAttr = serverSysProcAttr()
	// Bounds Wait when a process the server started still holds its output
	// open after the server exited.
	cmd.WaitDelay = grace
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("stdin pipe: %w", err)
	}
	pr.stdin = stdin
	pr.stdout = &procio.LineWriter{Line: pr.onStdout, Max: maxProtocolLine}
	pr.stderr = &procio.LineWriter{Line: pr.onStderr}
	cmd.Stdout, cmd.Stderr = pr.stdout, pr.stderr
	pr.cmd = cmd

	lr, lw, err := os.Pipe()
	if err != nil {
		_ = stdin.Close()
		return nil, fmt.Errorf("lifeline pipe: %w", err)
	}
	defer lr.Close()
	if err := startOnLockedThread(cmd.Start); err != nil {
		_ = lw.Close()
		return nil, err
	}
	pr.pid = cmd.Process.Pid
	pr.since = time.Now()
	pr.lifeline = lw

	// The watchdog joins the server's process group. It ignores the signals
	// a normal stop sends the group, so that it still guards the group if
	// the gpu-worker dies during the grace period, and dies by the final
	// SIGKILL.
	wd := exec.Command("/bin/sh", "-c", "trap '' TERM INT HUP; while read -r _; do :; done; kill -9 0")
	wd.Stdin = lr
	wd.Env = []string{}
	wd.SysProcAttr = watchdogSysProcAttr(pr.pid)
	// The server is reaped (by wait) only once the watchdog is in its
	// group: a server that exits at once stays a zombie until then, and the
	// group it leads exists for the watchdog to join.
	err = startOnLockedThread(wd.Start)
	go pr.wait()
	if err != nil {
		// Without a watchdog a kill -9 of the gpu-worker could leave the
		// server's children behind: refuse to run the server.
		pr.stop(grace)
		return nil, fmt.Errorf("start watchdog: %w", err)
	}
	pr.watchdog = wd
	pr.wdExited = make(chan struct{})
	go pr.writeLines()
	go func() {
		_ = wd.Wait()
		close(pr.wdExited)
	}()
	return pr, nil
}

// writeLines writes each sent line to the server's stdin, in order, until
// the server has exited. After a failed write every later line fails too
// (the server closed its stdin or died).
func (pr *proc) writeLines() {
	var failed error
	for {
		select {
		case s := <-pr.writes:
			if failed == nil {
				_, failed = pr.stdin.Write(s.line)
			}
			s.line = nil
			s.wrote <- failed
		case <-pr.exited:
			return
		}
	}
}

// enqueue sends s: it joins the batches in flight and its line is written
// after theirs.
func (pr *proc) enqueue(s *sent) {
	pr.mu.Lock()
	pr.queue = append(pr.queue, s)
	pr.mu.Unlock()
	pr.writes <- s
}

// stopFor records that the pool stops the server because of one batch.
func (pr *proc) stopFor(why string) {
	pr.mu.Lock()
	if pr.stopWhy == "" {
		pr.stopWhy = why
	}
	pr.mu.Unlock()
}

// bystander says, once the server has ended, whether an unanswered batch
// may have had no part in the end: the pool stopped the server for another
// batch, or other batches were in flight beside it (a crash cannot be
// pinned on one of them). why describes it for the error.
func (pr *proc) bystander() (yes bool, why string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	switch {
	case pr.stopWhy != "":
		return true, "stopped because " + pr.stopWhy
	case len(pr.queue) > 1:
		return true, fmt.Sprintf("%d batches were in flight", len(pr.queue))
	}
	return false, ""
}

func (pr *proc) wait() {
	err := pr.cmd.Wait()
	pr.stdout.Flush()
	pr.stderr.Flush()
	pr.waitErr = err
	pr.state = pr.cmd.ProcessState
	close(pr.exited)
}

// hasExited reports whether the leader has exited.
func (pr *proc) hasExited() bool {
	select {
	case <-pr.exited:
		return true
	default:
		return false
	}
}

// exitReason describes how the leader ended (after exited is closed).
func (pr *proc) exitReason() string {
	if pr.state == nil {
		return fmt.Sprintf("ended: %v", pr.waitErr)
	}
	if ws, ok := pr.state.Sys().(syscall.WaitStatus); ok && ws.Signaled() {
		return fmt.Sprintf("killed by signal %v", ws.Signal())
	}
	return fmt.Sprintf("exited with status %d", pr.state.ExitCode())
}

// stop ends the server: stdin closed (the protocol's request to exit), then
// SIGTERM to its process group after grace, SIGKILL after another grace, and
// SIGKILL to whatever is left of the group. It returns once the group is
// gone (or groupGoneWait has passed). Safe to call more than once, also
// concurrently.
func (pr *proc) stop(grace time.Duration) {
	_ = pr.stdin.Close()
	if !pr.waitExit(grace) {
		_ = syscall.Kill(-pr.pid, syscall.SIGTERM)
		if !pr.waitExit(grace) {
			_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
			<-pr.exited
		}
	}
	pr.killGroup()
}

// kill ends the server at once (its state is unknown, or it broke the
// protocol): SIGTERM, then SIGKILL after grace.
func (pr *proc) kill(grace time.Duration) {
	_ = syscall.Kill(-pr.pid, syscall.SIGTERM)
	if !pr.waitExit(grace) {
		_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
		<-pr.exited
	}
	_ = pr.stdin.Close()
	pr.killGroup()
}

// killGroup kills what the server left in its group (the watchdog too) and
// waits for the group to be gone.
func (pr *proc) killGroup() {
	_ = syscall.Kill(-pr.pid, syscall.SIGKILL)
	if pr.lifeline != nil {
		_ = pr.lifeline.Close()
	}
	if pr.wdExited != nil {
		<-pr.wdExited
	}
	waitGroupGone(pr.pid, groupGoneWait)
}

func (pr *proc) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-pr.exited:
		return true
	case <-t.C:
		return false
	}
}

// setLog directs output lines to f (nil: the pool's log).
func (pr *proc) setLog(f func(string)) {
	pr.mu.Lock()
	pr.logLine = f
	pr.mu.Unlock()
}

// logLocked passes one output line on, to the oldest batch in flight (its
// answer comes next), else to whoever starts the server, else to the pool's
// log; pr.mu is held so that no line reaches a batch's logLine after its
// answer.
func (pr *proc) logLocked(stream, line string) {
	if len(line) > procio.MaxLine {
		line = line[:procio.MaxLine] + "…"
	}
	f := pr.logLine
	if len(pr.queue) > 0 {
		f = pr.queue[0].logLine
	}
	if f != nil {
		f("[" + stream + "] " + line)
		return
	}
	if pr.idleLog != nil {
		pr.idleLog(stream, line)
	}
}

func (pr *proc) onStderr(line string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	if len(pr.tail) == tailLines {
		copy(pr.tail, pr.tail[1:])
		pr.tail = pr.tail[:tailLines-1]
	}
	pr.tail = append(pr.tail, line)
	pr.logLocked("stderr", line)
}

// stderrTail is a copy of the last stderr lines.
func (pr *proc) stderrTail() []string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return append([]string(nil), pr.tail...)
}

// onStdout sorts a stdout line into the ready line, an answer, or log text.
func (pr *proc) onStdout(line string) {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	trimmed := strings.TrimSpace(line)
	if !strings.HasPrefix(trimmed, "{") {
		pr.logLocked("stdout", line)
		return
	}
	var obj map[string]json.RawMessage
	if err := json.Unmarshal([]byte(trimmed), &obj); err != nil {
		pr.logLocked("stdout", line)
		return
	}
	if !pr.ready {
		var ready bool
		if raw, ok := obj["ready"]; ok && json.Unmarshal(raw, &ready) == nil && ready {
			pr.ready = true
			pr.readyInfo = map[string]any{}
			for k, raw := range obj {
				var v any
				if k != "ready" && json.Unmarshal(raw, &v) == nil {
					pr.readyInfo[k] = v
				}
			}
			close(pr.readyCh)
			return
		}
		pr.logLocked("stdout", line)
		return
	}
	rawBatch, hasBatch := obj["batch"]
	rawStatus, hasStatus := obj["status"]
	if !hasBatch || !hasStatus {
		pr.logLocked("stdout", line)
		return
	}
	pr.logLocked("stdout", line)
	var a Answer
	var err error
	if e1, e2 := json.Unmarshal(rawBatch, &a.Batch), json.Unmarshal(rawStatus, &a.Status); e1 != nil || e2 != nil {
		err = fmt.Errorf("answer %s: batch must be a number and status a string", truncate(trimmed))
	} else if a.Status != StatusDone && a.Status != StatusOOM && a.Status != StatusError {
		err = fmt.Errorf("answer %s: status must be %q, %q or %q", truncate(trimmed), StatusDone, StatusOOM, StatusError)
	} else if raw, ok := obj["message"]; ok {
		if json.Unmarshal(raw, &a.Message) != nil {
			a.Message = string(raw)
		}
	}
	if len(pr.queue) == 0 {
		pr.broken = fmt.Sprintf("answer %s while no batch was in flight", truncate(trimmed))
		return
	}
	s := pr.queue[0]
	pr.queue[0] = nil
	pr.queue = pr.queue[1:]
	if err == nil && a.Batch != s.batch {
		err = fmt.Errorf("answer for batch %d while batch %d was the oldest in flight", a.Batch, s.batch)
	}
	s.answer <- answer{a: a, err: err}
}

func truncate(s string) string {
	const max = 200
	if len(s) > max {
		return s[:max] + "…"
	}
	return s
}

// oneLine returns line as a single protocol line: JSON spread over several
// lines is compacted (JSON strings cannot hold a raw newline, so this never
// changes a value).
func oneLine(line []byte) ([]byte, error) {
	line = bytes.TrimSpace(line)
	if !bytes.ContainsAny(line, "\r\n") {
		return append(line[:len(line):len(line)], '\n'), nil
	}
	var buf bytes.Buffer
	if err := json.Compact(&buf, line); err != nil {
		return nil, fmt.Errorf("batch line spans lines and is not JSON: %w", err)
	}
	buf.WriteByte('\n')
	return buf.Bytes(), nil
}

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

// starter runs every Start on one goroutine locked to its OS thread for the
// life of the process. Linux sends the parent-death signal when the thread
// that started a child exits, not the process; Go ends a thread when a
// goroutine locked to it returns, so a server started from an arbitrary
// thread could be killed by an unrelated goroutine's exit. This thread never
// exits.
var starter struct {
	once sync.Once
	reqs chan startReq
}

type startReq struct {
	start func() error
	done  chan error
}

func startOnLockedThread(start func() error) error {
	starter.once.Do(func() {
		starter.reqs = make(chan startReq)
		go func() {
			runtime.LockOSThread()
			for r := range starter.reqs {
				r.done <- r.start()
			}
		}()
	})
	done := make(chan error, 1)
	starter.reqs <- startReq{start: start, done: done}
	return <-done
}
