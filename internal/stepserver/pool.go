// Package stepserver keeps GPU step programs resident: a step's server
// loads its model once and then answers batch after batch over JSON Lines on
// its stdin and stdout (docs/gpu-host.md, "Resident step servers"). A Pool starts servers
// on demand, keeps up to Options.Ahead batches in flight to each (sent ahead
// of the answers, which come in order), stops idle and least recently used
// ones, restarts dead ones, and makes sure none outlives the process that
// started it.
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
	// Interrupted says the batch may have had no part in the failure: the
	// server was stopped for another batch in flight beside it (cancelled,
	// or it broke the protocol), or it died with other batches in flight
	// (which of them it died of cannot be told). Sending it again alone is
	// worth a try.
	Interrupted bool
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
	StateBusy     = "busy"     // batches are in flight
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
	// held is set while one caller (a Send starting the server and queuing
	// its batch, a Ready, an eviction, the idle stop) uses the entry.
	held bool
	// inflight counts the batches sent and not yet waited for (at most
	// Options.Ahead): a server with batches in flight is never evicted,
	// expired or restarted for a changed command.
	inflight int
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

// Do sends one batch to the server for spec.Key and waits for its answer:
// Send, then Wait. line is the batch's JSON object (the manifest); batch
// its number, which the answer must carry. Output lines that are not
// answers go to logLine (prefixed "[stdout] " or "[stderr] ") while the
// batch is the oldest in flight, as do the pool's notes about the server.
func (p *Pool) Do(ctx context.Context, spec Spec, batch int, line []byte, logLine func(string)) (Answer, error) {
	w, err := p.Send(ctx, spec, batch, line, logLine)
	if err != nil {
		return Answer{}, err
	}
	return w.Wait(ctx)
}

// Pending is a batch sent to a server (Send) whose answer is still to be
// waited for.
type Pending struct {
	p    *Pool
	e    *entry
	pr   *proc
	s    *sent
	once sync.Once
}

// Send hands one batch to the server for spec.Key, starting the server
// first if none runs (or the one that ran died), and returns once the batch
// has its place in the server's line: at most Options.Ahead batches are in
// flight to one server, from any callers, and Send waits while it has that
// many. The server gets the batches, and answers them, in the order Send
// returned them. Every Pending must be waited for: until its Wait returns
// it holds its place.
func (p *Pool) Send(ctx context.Context, spec Spec, batch int, line []byte, logLine func(string)) (*Pending, error) {
	if spec.Key == "" {
		return nil, errors.New("step server spec without a key")
	}
	msg, err := oneLine(line)
	if err != nil {
		return nil, err
	}
	if logLine == nil {
		logLine = func(string) {}
	}
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	e, err := p.acquire(ctx, spec, true)
	if err != nil {
		return nil, err
	}
	pr, err := p.ensure(ctx, e, spec, logLine)
	if err != nil {
		p.release(e)
		return nil, err
	}
	s := &sent{batch: batch, line: msg, logLine: logLine, answer: make(chan answer, 1), wrote: make(chan error, 1)}
	pr.enqueue(s)
	pr.setLog(nil)
	p.mu.Lock()
	e.inflight++
	p.mu.Unlock()
	p.release(e)
	return &Pending{p: p, e: e, pr: pr, s: s}, nil
}

// Wait waits for the batch's answer. A server that exits or breaks the
// protocol fails the batch with a *ServerError and is restarted at the next
// Send. When ctx ends while the batch is in flight the server is killed
// (its state is unknown; the other batches in flight on it fail as
// Interrupted) and Wait returns ctx.Err() once it is gone. Wait is meant to
// be called once; later calls return an error.
func (w *Pending) Wait(ctx context.Context) (Answer, error) {
	first := false
	w.once.Do(func() { first = true })
	if !first {
		return Answer{}, errors.New("step server: Wait called twice for one batch")
	}
	defer func() {
		w.p.mu.Lock()
		w.e.inflight--
		w.p.settleLocked(w.e)
		w.p.mu.Unlock()
	}()
	return w.p.wait(ctx, w.e, w.pr, w.s)
}

// Ready starts the server for spec.Key if none runs (as Send would) and
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
	e, err := p.acquire(ctx, spec, false)
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

// acquire holds the entry of spec.Key, waiting while another caller holds
// it, while its server runs another command with batches in flight, and,
// for a batch (slot), while Options.Ahead batches are in flight.
func (p *Pool) acquire(ctx context.Context, spec Spec, slot bool) (*entry, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for {
		if p.closed {
			return nil, ErrClosed
		}
		e := p.entries[spec.Key]
		if e == nil {
			e = &entry{key: spec.Key, state: StateStopped}
			p.entries[spec.Key] = e
		}
		free := !e.held && (!slot || e.inflight < p.o.Ahead)
		// A changed command restarts the server: only once its batches
		// are answered.
		sameCmd := e.inflight == 0 || e.proc == nil || reflect.DeepEqual(e.proc.spec, spec)
		if free && sameCmd {
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

// release lets go of e (held by the caller).
func (p *Pool) release(e *entry) {
	p.mu.Lock()
	defer p.mu.Unlock()
	e.held = false
	p.settleLocked(e)
}

// settleLocked sets e's state after its holder let go or a batch was
// answered: busy while batches are in flight, else ready with its idle
// timer armed (or stopped, without a server); p.mu is held.
func (p *Pool) settleLocked(e *entry) {
	e.lastUsed = time.Now()
	switch {
	case e.held:
		// The holder sets the state.
	case e.inflight > 0:
		e.state = StateBusy
	case e.proc != nil && !p.closed:
		e.state = StateReady
		pr := e.proc
		e.idle = time.AfterFunc(p.o.Idle, func() { p.expire(e, pr) })
	default:
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
			why = "the server " + pr.exitReason()
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
	pr, err := spawn(spec, p.o.KillGrace, p.o.Ahead, logLine, func(stream, line string) {
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
			if !o.held && o.inflight == 0 && o.proc != nil && (victim == nil || o.lastUsed.Before(victim.lastUsed)) {
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

// wait waits for s's answer from pr (Pending.Wait).
func (p *Pool) wait(ctx context.Context, e *entry, pr *proc, s *sent) (Answer, error) {
	wrote := s.wrote
	for {
		select {
		case a := <-s.answer:
			if a.err != nil {
				pr.stopFor(fmt.Sprintf("batch %d broke the protocol", s.batch))
				pr.kill(p.o.KillGrace)
				p.forget(e, pr, "")
				return Answer{}, p.fail(e, &ServerError{Key: e.key, Op: "batch", Reason: "broke the protocol: " + a.err.Error(), StderrTail: pr.stderrTail()}, s.logLine)
			}
			return p.served(e, pr, a.a), nil
		case err := <-wrote:
			if err == nil {
				wrote = nil
				continue
			}
			// The server closed its stdin or died: wait briefly for its
			// exit status, which says more than the write error.
			pr.kill(p.o.KillGrace)
			p.forget(e, pr, "")
			return Answer{}, p.fail(e, p.ended(e, pr, fmt.Sprintf("could not take batch %d (the server %s)", s.batch, pr.exitReason()), err), s.logLine)
		case <-pr.exited:
			// An answer written just before the exit still counts: exited
			// is closed only after all of stdout has been read.
			select {
			case a := <-s.answer:
				if a.err == nil {
					pr.stop(p.o.KillGrace)
					p.forget(e, pr, "the server "+pr.exitReason()+" after answering")
					return p.served(e, pr, a.a), nil
				}
			default:
			}
			pr.stop(p.o.KillGrace)
			p.forget(e, pr, "")
			return Answer{}, p.fail(e, p.ended(e, pr, fmt.Sprintf("the server %s during batch %d", pr.exitReason(), s.batch), nil), s.logLine)
		case <-ctx.Done():
			select {
			case a := <-s.answer:
				// The answer came in time: the server is in a known state.
				if a.err == nil {
					return p.served(e, pr, a.a), nil
				}
			default:
			}
			p.setState(e, StateStopping)
			p.note(e.key, s.logLine, "cancelled during a batch: stopping the step server", "pid", pr.pid, "batch", s.batch)
			pr.stopFor(fmt.Sprintf("batch %d was cancelled", s.batch))
			pr.kill(p.o.KillGrace)
			p.forget(e, pr, "")
			return Answer{}, ctx.Err()
		}
	}
}

// served counts an answered batch.
func (p *Pool) served(e *entry, pr *proc, a Answer) Answer {
	pr.mu.Lock()
	pr.batches++
	pr.mu.Unlock()
	if a.Status == StatusError {
		p.mu.Lock()
		e.lastErr = fmt.Sprintf("batch %d: %s", a.Batch, a.Message)
		p.mu.Unlock()
	}
	return a
}

// ended is the error of a batch whose server ended before answering it.
func (p *Pool) ended(e *entry, pr *proc, reason string, err error) *ServerError {
	by, why := pr.bystander()
	if by {
		reason += " (" + why + ")"
	}
	return &ServerError{Key: e.key, Op: "batch", Reason: reason, StderrTail: pr.stderrTail(), Err: err, Interrupted: by}
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
	if e.held || e.inflight > 0 || e.proc != pr || p.closed || time.Since(e.lastUsed) < p.o.Idle {
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
			if !e.held && e.inflight == 0 && pr.hasExited() {
				s.State = StateExited
			}
		}
		out = append(out, s)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Key < out[j].Key })
	return out
}

// Close stops every server (stdin closed, then SIGTERM and SIGKILL after
// the grace period) and returns when all are gone and no caller is still
// using one (the batches in flight fail). Send and Do fail with ErrClosed
// afterwards.
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
			if e.held || e.inflight > 0 {
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
