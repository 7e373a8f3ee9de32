// Package stepserver keeps GPU step programs resident: a step's server
// loads its model once and then answers batch after batch over JSON Lines on
// its stdin and stdout (docs/gpu-host.md, "Resident step servers"). A Pool starts servers
// on demand, serializes the batches of each, stops idle and least recently
// used ones, restarts dead ones, and makes sure none outlives the process
// that started it.
package stepserver

import (
	"context"
	"errors"
	"fmt"
	"github.com/kinflow/kinflow/internal/procio"
	"maps"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
)

// Answer statuses (the protocol's "status" field).
const (
	StatusDone  = "done"
	StatusOOM   = "oom"
	StatusError = "error"
)

// Spec says how to start one step's server.
type Spec struct {
	// Key names the server (the step key); one server runs per key.
	Key string
	// Argv is the program and its arguments (no shell).
	Argv []string
	// Env is the program's whole environment (nothing is inherited; the
	// pool adds PYTHONUNBUFFERED=1 when absent).
	Env []string
	// Dir is the working directory ("" for the gpu-worker's).
	Dir string
}

// Answer is a server's answer to one batch.
type Answer struct {
	Batch   int    `json:"batch"`
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// ServerError is a batch that failed because its server did: it could not
// start, exited, was not ready in time, or broke the protocol. The server is
// started afresh for the next batch.
type ServerError struct {
	Key string
	// Op is "start" (before the ready line) or "batch".
	Op     string
	Reason string
	// StderrTail is the last lines the server wrote to stderr.
	StderrTail []string
	// Err is the underlying error, if any (a program that cannot be
	// executed: errors.Is(err, exec.ErrNotFound) and the like).
	Err error
}

func (e *ServerError) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "step server %s: %s", e.Key, e.Reason)
	if e.Err != nil {
		fmt.Fprintf(&b, ": %v", e.Err)
	}
	if len(e.StderrTail) > 0 {
		b.WriteString("; stderr ends with:\n")
		b.WriteString(strings.Join(e.StderrTail, "\n"))
	}
	return b.String()
}

// Unwrap returns Err.
func (e *ServerError) Unwrap() error { return e.Err }

// ErrClosed is returned by Do once Close has been called.
var ErrClosed = errors.New("step server pool closed")

// Server states shown by Status.
const (
	StateStarting = "starting" // loading, not ready yet
	StateReady    = "ready"    // resident, idle
	StateBusy     = "busy"     // a batch is in flight
	StateWaiting  = "waiting"  // a batch waits for room (Max servers busy)
	StateStopping = "stopping"
	StateStopped  = "stopped" // not running; starts at the next batch
	StateExited   = "exited"  // died while idle; restarts at the next batch
)

// ServerStatus describes one step's server (for /health).
type ServerStatus struct {
	Key   string `json:"step_key"`
	State string `json:"state"`
	// PID, Since and Batches describe the running process (zero when none).
	PID     int       `json:"pid,omitempty"`
	Since   time.Time `json:"since,omitzero"`
	Batches int       `json:"batches_served"`
	// LastError is the last failure of this step's server, or the message
	// of its last error answer.
	LastError string `json:"last_error,omitempty"`
	// Ready holds the extra fields of the ready line ("model", "device", …).
	Ready map[string]any `json:"ready,omitempty"`
}

// Pool runs step servers. Its methods are safe for concurrent use.
type Pool struct {
	o Options

	mu      sync.Mutex
	entries map[string]*entry
	// changed is closed and replaced whenever an entry is released or a
	// server stops: waiters re-check their condition.
	changed chan struct{}
	closed  bool
}

// entry is one step key's slot; mu guards every field.
type entry struct {
	key string
	// held is set while one caller (a Do, an eviction, the idle stop) uses
	// the entry: batches of one server run one at a time.
	held bool
	// reserved counts a server being started against Max.
	reserved bool
	state    string
	proc     *proc
	lastUsed time.Time
	lastErr  string
	idle     *time.Timer
}

// NewPool returns an empty pool; servers start at their first batch.
func NewPool(o Options) *Pool {
	return &Pool{o: o.withDefaults(), entries: map[string]*entry{}, changed: make(chan struct{})}
}

// Do sends one batch to the server for spec.Key and waits for its answer,
// starting the server first if none runs (or the one that ran died). line is
// the batch's JSON object (the manifest); batch its number, which the answer
// must carry. Output lines that are not the answer go to logLine (prefixed
// "[stdout] " or "[stderr] "), as do the pool's notes about the server.
//
// A server that exits or breaks the protocol fails the batch with a
// *ServerError and is restarted at the next Do. When ctx ends while the
// batch runs the server is killed (its state is unknown) and Do returns
// ctx.Err() once it is gone.
func (p *Pool) Do(ctx context.Context, spec Spec, batch int, line []byte, logLine func(string)) (Answer, error) {
	if spec.Key == "" {
		return Answer{}, errors.New("step server spec without a key")
	}
	msg, err := oneLine(line)
	if err != nil {
		return Answer{}, err
	}
	if logLine == nil {
		logLine = func(string) {}
	}
	if err := ctx.Err(); err != nil {
		return Answer{}, err
	}
	e, err := p.acquire(ctx, spec.Key)
	if err != nil {
		return Answer{}, err
	}
	defer p.release(e)
	pr, err := p.ensure(ctx, e, spec, logLine)
	if err != nil {
		return Answer{}, err
	}
	defer pr.setLog(nil)
	return p.run(ctx, e, pr, batch, msg, logLine)
}

// Ready starts the server for spec.Key if none runs (as Do would) and
// returns the extra fields of its ready line ("model", "device",
// "fingerprint", …), so that a caller can check what the server will write
// before sending it a batch.
func (p *Pool) Ready(ctx context.Context, spec Spec, logLine func(string)) (map[string]any, error) {
	if spec.Key == "" {
		return nil, errors.New("step server spec without a key")
	}
	if logLine == nil {
		logLine = func(string) {}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e, err := p.acquire(ctx, spec.Key)
	if err != nil {
		return nil, err
	}
	defer p.release(e)
	pr, err := p.ensure(ctx, e, spec, logLine)
	if err != nil {
		return nil, err
	}
	defer pr.setLog(nil)
	return pr.readyFields(), nil
}

// acquire holds key's entry, waiting while another caller holds it.
func (p *Pool) acquire(ctx context.Context, key string) (*entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			return nil, ErrClosed
		}
		e := p.entries[key]
		if e == nil {
			e = &entry{key: key, state: StateStopped}
			p.entries[key] = e
		}
		if !e.held {
			e.held = true
			if e.idle != nil {
				e.idle.Stop()
			}
			return e, nil
		}
		if err := p.waitLocked(ctx); err != nil {
			return nil, err
		}
	}
}

// release lets go of e and arms its idle timer.
func (p *Pool) release(e *entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.held = false
	e.lastUsed = time.Now()
	if e.proc != nil && !p.closed {
		e.state = StateReady
		pr := e.proc
		e.idle = time.AfterFunc(p.o.Idle, func() { p.expire(e, pr) })
	} else {
		e.proc = nil
		e.state = StateStopped
	}
	p.broadcastLocked()
}

// waitLocked waits, with p.mu released, for the next change or ctx's end.
func (p *Pool) waitLocked(ctx context.Context) error {
	ch := p.changed
	p.mu.Unlock()
	defer p.mu.Lock()
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *Pool) broadcastLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// forget drops e's process after it has been stopped, recording why.
func (p *Pool) forget(e *entry, pr *proc, why string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if e.proc == pr {
		e.proc = nil
		e.state = StateStopped
	}
	if why != "" {
		e.lastErr = why
	}
	p.broadcastLocked()
}

// ensure returns e's ready server, starting one if needed (e is held).
func (p *Pool) ensure(ctx context.Context, e *entry, spec Spec, logLine func(string)) (*proc, error) {
	p.mu.Lock()
	pr := e.proc
	p.mu.Unlock()
	if pr != nil {
		var why string
		switch {
		case pr.hasExited():
			why = "the server " + pr.exitReason() + " while idle"
		case pr.isBroken() != "":
			why = "the server broke the protocol: " + pr.isBroken()
		case !reflect.DeepEqual(pr.spec, spec):
			why = "its command changed"
		}
		if why == "" {
			pr.setLog(logLine)
			return pr, nil
		}
		p.note(e.key, logLine, "restarting the step server", "pid", pr.pid, "reason", why)
		p.setState(e, StateStopping)
		pr.kill(p.o.KillGrace)
		p.forget(e, pr, "")
	}
	if err := p.makeRoom(ctx, e, logLine); err != nil {
		return nil, err
	}

	p.note(e.key, logLine, "starting the step server", "argv", procio.QuoteArgv(spec.Argv))
	started := time.Now()
	pr, err := spawn(spec, p.o.KillGrace, logLine, func(stream, line string) {
		p.o.Log.Info("step server output", "step", spec.Key, "stream", stream, "line", line)
	})
	p.mu.Lock()
	e.reserved = false
	if err == nil {
		e.proc = pr
	}
	closed := p.closed
	p.broadcastLocked()
	p.mu.Unlock()
	if err != nil {
		return nil, p.fail(e, &ServerError{Key: spec.Key, Op: "start", Reason: "cannot start the program", Err: err}, logLine)
	}
	if closed {
		pr.kill(p.o.KillGrace)
		p.forget(e, pr, "")
		return nil, ErrClosed
	}

	timer := time.NewTimer(p.o.StartTimeout)
	defer timer.Stop()
	var failure error
	select {
	case <-pr.readyCh:
	case <-pr.exited:
		pr.stop(p.o.KillGrace)
		failure = &ServerError{Key: spec.Key, Op: "start", Reason: "the server " + pr.exitReason() + " before it was ready", StderrTail: pr.stderrTail()}
	case <-timer.C:
		pr.kill(p.o.KillGrace)
		// The start timeout comes from the environment key named here.
		failure = &ServerError{Key: spec.Key, Op: "start", Reason: fmt.Sprintf("not ready within %v (%s)", p.o.StartTimeout, EnvStartSeconds), StderrTail: pr.stderrTail()}
	case <-ctx.Done():
		pr.kill(p.o.KillGrace)
		p.forget(e, pr, "")
		return nil, ctx.Err()
	}
	if failure != nil {
		p.forget(e, pr, "")
		pr.setLog(nil)
		return nil, p.fail(e, failure, logLine)
	}
	info := pr.readyFields()
	args := []any{"pid", pr.pid, "load_seconds", time.Since(started).Round(time.Millisecond).Seconds()}
	for _, k := range slices.Sorted(maps.Keys(info)) {
		args = append(args, k, info[k])
	}
	p.note(e.key, logLine, "step server ready", args...)
	return pr, nil
}

// makeRoom reserves a place for e's server under Max, stopping the least
// recently used idle server when none is free and waiting while every one is
// busy.
func (p *Pool) makeRoom(ctx context.Context, e *entry, logLine func(string)) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			return ErrClosed
		}
		n := 0
		var victim *entry
		for _, o := range p.entries {
			if o == e || (o.proc == nil && !o.reserved) {
				continue
			}
			n++
			if !o.held && o.proc != nil && (victim == nil || o.lastUsed.Before(victim.lastUsed)) {
				victim = o
			}
		}
		if n < p.o.Max {
			e.reserved = true
			e.state = StateStarting
			return nil
		}
		if victim == nil {
			// Every server is busy (or starting): never stop one mid-batch.
			e.state = StateWaiting
			if err := p.waitLocked(ctx); err != nil {
				e.state = StateStopped
				return err
			}
			continue
		}
		victim.held = true
		victim.state = StateStopping
		if victim.idle != nil {
			victim.idle.Stop()
		}
		vp := victim.proc
		p.mu.Unlock()
		p.note(e.key, logLine, "stopping the least recently used step server to make room", "stopped_step", victim.key, "pid", vp.pid, "max", p.o.Max)
		vp.stop(p.o.KillGrace)
		p.mu.Lock()
		victim.proc = nil
		victim.held = false
		victim.state = StateStopped
		p.broadcastLocked()
	}
}

// run sends one batch to pr and waits for the answer.
func (p *Pool) run(ctx context.Context, e *entry, pr *proc, batch int, msg []byte, logLine func(string)) (Answer, error) {
	pr.mu.Lock()
	pr.waiting, pr.expect = true, batch
	pr.mu.Unlock()
	p.setState(e, StateBusy)
	wr := make(chan error, 1)
	go func() {
		_, err := pr.stdin.Write(msg)
		wr <- err
	}()
	served := func(a Answer) (Answer, error) {
		pr.mu.Lock()
		pr.batches++
		pr.mu.Unlock()
		if a.Status == StatusError {
			p.mu.Lock()
			e.lastErr = fmt.Sprintf("batch %d: %s", a.Batch, a.Message)
			p.mu.Unlock()
		}
		return a, nil
	}
	for {
		select {
		case a := <-pr.answers:
			if a.err != nil {
				pr.kill(p.o.KillGrace)
				p.forget(e, pr, "")
				return Answer{}, p.fail(e, &ServerError{Key: e.key, Op: "batch", Reason: "broke the protocol: " + a.err.Error(), StderrTail: pr.stderrTail()}, logLine)
			}
			return served(a.a)
		case err := <-wr:
			if err == nil {
				wr = nil
				continue
			}
			// The server closed its stdin or died: wait briefly for its
			// exit status, which says more than the write error.
			pr.kill(p.o.KillGrace)
			p.forget(e, pr, "")
			return Answer{}, p.fail(e, &ServerError{Key: e.key, Op: "batch", Reason: fmt.Sprintf("could not take batch %d (the server %s)", batch, pr.exitReason()), StderrTail: pr.stderrTail(), Err: err}, logLine)
		case <-pr.exited:
			// An answer written just before the exit still counts: exited
			// is closed only after all of stdout has been read.
			select {
			case a := <-pr.answers:
				if a.err == nil {
					pr.stop(p.o.KillGrace)
					p.forget(e, pr, "the server "+pr.exitReason()+" after answering")
					return served(a.a)
				}
			default:
			}
			pr.stop(p.o.KillGrace)
			p.forget(e, pr, "")
			return Answer{}, p.fail(e, &ServerError{Key: e.key, Op: "batch", Reason: fmt.Sprintf("the server %s during batch %d", pr.exitReason(), batch), StderrTail: pr.stderrTail()}, logLine)
		case <-ctx.Done():
			select {
			case a := <-pr.answers:
				// The answer came in time: the server is in a known state.
				if a.err == nil {
					return served(a.a)
				}
			default:
			}
			p.setState(e, StateStopping)
			p.note(e.key, logLine, "cancelled during a batch: stopping the step server", "pid", pr.pid, "batch", batch)
			pr.kill(p.o.KillGrace)
			p.forget(e, pr, "")
			return Answer{}, ctx.Err()
		}
	}
}

// fail records err as e's last error, notes it and returns it.
func (p *Pool) fail(e *entry, err error, logLine func(string)) error {
	p.mu.Lock()
	e.lastErr = err.Error()
	p.mu.Unlock()
	logLine(err.Error())
	p.o.Log.Warn("step server failed", "step", e.key, "error", err)
	return err
}

// expire stops pr when it has been idle for Options.Idle.
func (p *Pool) expire(e *entry, pr *proc) {
	p.mu.Lock()
	if e.held || e.proc != pr || p.closed || time.Since(e.lastUsed) < p.o.Idle {
		p.mu.Unlock()
		return
	}
	e.held = true
	e.state = StateStopping
	p.mu.Unlock()
	p.o.Log.Info("stopping an idle step server", "step", e.key, "pid", pr.pid, "idle", p.o.Idle)
	pr.stop(p.o.KillGrace)
	p.mu.Lock()
	if e.proc == pr {
		e.proc = nil
	}
	e.held = false
	e.state = StateStopped
	p.broadcastLocked()
	p.mu.Unlock()
}

func (p *Pool) setState(e *entry, s string) {
	p.mu.Lock()
	e.state = s
	p.mu.Unlock()
}

// note logs a pool event to the pool's log and the batch's log.
func (p *Pool) note(key string, logLine func(string), msg string, args ...any) {
	p.o.Log.Info(msg, append([]any{"step", key}, args...)...)
	var b strings.Builder
	b.WriteString(msg)
	fmt.Fprintf(&b, " step=%s", key)
	for i := 0; i+1 < len(args); i += 2 {
		fmt.Fprintf(&b, " %v=%v", args[i], args[i+1])
	}
	logLine(b.String())
}

// Status describes every step server the pool has run, sorted by step key.
func (p *Pool) Status() []ServerStatus {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]ServerStatus, 0, len(p.entries))
	for _, e := range p.entries {
		s := ServerStatus{Key: e.key, State: e.state, LastError: e.lastErr}
		if pr := e.proc; pr != nil {
			s.PID, s.Since = pr.pid, pr.since
			pr.mu.Lock()
			s.Batches = pr.batches
			if len(pr.readyInfo) > 0 {
				s.Ready = make(map[string]any, len(pr.readyInfo))
				for k, v := range pr.readyInfo {
					s.Ready[k] = v
				}
			}
			pr.mu.Unlock()
			if !e.held && pr.hasExited() {
				s.State = StateExited
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Close stops every server (stdin closed, then SIGTERM and SIGKILL after
// the grace period) and returns when all are gone and no Do is still using
// one. Do fails with ErrClosed afterwards.
func (p *Pool) Close() {
	p.mu.Lock()
	if p.closed {
		p.mu.Unlock()
		return
	}
	p.closed = true
	var procs []*proc
	for _, e := range p.entries {
		if e.idle != nil {
			e.idle.Stop()
		}
		if e.proc != nil {
			procs = append(procs, e.proc)
		}
	}
	p.broadcastLocked()
	p.mu.Unlock()

	var wg sync.WaitGroup
	for _, pr := range procs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			pr.stop(p.o.KillGrace)
		}()
	}
	wg.Wait()

	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		busy := false
		for _, e := range p.entries {
			if e.held {
				busy = true
			} else {
				e.proc = nil
				e.state = StateStopped
			}
		}
		if !busy {
			return
		}
		_ = p.waitLocked(context.Background())
	}
}

func (pr *proc) isBroken() string {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	return pr.broken
}

// readyFields is a copy of the ready line's extra fields.
func (pr *proc) readyFields() map[string]any {
	pr.mu.Lock()
	defer pr.mu.Unlock()
	out := make(map[string]any, len(pr.readyInfo))
	for k, v := range pr.readyInfo {
		out[k] = v
	}
	return out
}
