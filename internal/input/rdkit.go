package input

import (
	"bufio"
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"

	lru "github.com/hashicorp/golang-lru/v2"
)

//go:embed rdkit_helper.py
var rdkitHelperScript string

// DefaultPython is the interpreter the RDKit helper runs with: Debian's
// python3, for which python3-rdkit is packaged.
const DefaultPython = "/usr/bin/python3"

const (
	// defaultStartTimeout bounds the helper's start-up (Python start plus
	// `import rdkit`, about a second; generous for a loaded machine).
	defaultStartTimeout = 30 * time.Second
	// defaultMoleculeTimeout is the time bound of one molecule. A
	// drug-like SMILES takes 0.4 ms to check (measured on the shared 2-core
	// dev machine; an InChI through Open Babel one to two), but RDKit's time
	// grows steeply with chain length: a chain of 500 C took 0.4 s there,
	// 1,000 C 2.9 s (0.8 s on an idle machine), 2,000 C 9 s and 4,000 C 99 s.
	// 3 s passes every molecule of a real table with a wide margin for a
	// loaded machine, and is what one slow molecule can cost: past it the
	// helper is killed (and restarted in the background) and the molecule
	// reads "could not be checked in time".
	defaultMoleculeTimeout = 3 * time.Second
	// chunkItemAllowance is added to a request's bound for every item after
	// the first: 1,000 drug-like molecules take ~0.4 s, so a chunk gets
	// MoleculeTimeout + 2 s; a chunk that still times out is retried item by
	// item, each under MoleculeTimeout.
	chunkItemAllowance = 2 * time.Millisecond
	// defaultHelpers is how many helper processes run (about 70 MiB each):
	// one caller's slow molecule occupies one of them while the others keep
	// answering everyone else. A caller uses one helper at a time.
	defaultHelpers = 3
	// rdkitChunk is the most items sent in one request, so that one request
	// stays far inside its timeout and a failure costs little to retry.
	rdkitChunk = 1000
	// soloLen is the text length from which a molecule is sent alone: the
	// slow molecules are long ones (time grows with size), and alone they
	// cost only their own bound, never a whole chunk's. Real substrates
	// are far shorter (ATP's SMILES is 90 characters).
	soloLen = 150
	// maxTimeoutsPerCall is how many molecules of one call may run into
	// their bound; the call's remaining long molecules are then answered
	// "could not be checked in time" without being tried. With it one call
	// (one request or job step) holds a helper for at most about
	// maxTimeoutsPerCall × MoleculeTimeout of slow molecules, however many
	// slow rows it has.
	maxTimeoutsPerCall = 2
	// timedOutKept is how many molecules that ran into their bound are
	// remembered, so that a retry (or another row, or another caller) does
	// not pay the bound again.
	timedOutKept = 4096
	// stderrKeep is how much of the helper's stderr is kept for diagnostics.
	stderrKeep = 4096
	// defaultMaxRSSMiB is the helper's memory limit: past it, the helper
	// asks to be restarted (about 70 MiB after start-up).
	defaultMaxRSSMiB = 512
)

// errMoleculeTimeout marks a request that ran past its time bound.
var errMoleculeTimeout = errors.New("rdkit: request timed out")

// ErrRDKitUnavailable means the helper cannot run here: no interpreter, or
// RDKit is not installed for it. The Go checks then decide alone.
var ErrRDKitUnavailable = errors.New("RDKit is not available")

// RDKitOptions configure the helpers.
type RDKitOptions struct {
	// Python is the interpreter; empty means DefaultPython.
	Python string
	// StartTimeout overrides the start-up bound when non-zero.
	StartTimeout time.Duration
	// MoleculeTimeout is the time bound of one molecule (a request of n
	// items gets MoleculeTimeout + (n-1) × 2 ms); zero means 3 s.
	MoleculeTimeout time.Duration
	// Helpers is how many helper processes run; zero or less means 3.
	Helpers int
	// MaxRSSMiB is the helper's peak resident memory, in MiB, past which it
	// asks to be restarted after its current answer: a guard against leaks
	// in the C++ libraries (Open Babel 3.1.1 leaks about 30 KB for every
	// InChI it cannot read). Zero or less means 512.
	MaxRSSMiB int
	// Log receives helper restarts and failures; nil means slog.Default().
	Log *slog.Logger
}

// RDKitInfo describes a running helper.
type RDKitInfo struct {
	// Version is RDKit's version, e.g. "2022.09.3".
	Version string `json:"rdkit"`
	// InChI says whether the helper can read and write InChI: RDKit's own
	// InChI support (not in Debian's python3-rdkit), or else Open Babel's
	// (Debian's python3-openbabel).
	InChI bool `json:"inchi"`
	// InChIVia names what reads and writes InChI: "rdkit", "openbabel", or
	// "" when InChI is false.
	InChIVia string `json:"inchi_via"`
}

// RDKit is a small pool of long-lived RDKit helper processes (an embedded
// Python script speaking line-delimited JSON on stdin/stdout). Helpers
// start on first use and are restarted after they die or time out. It is
// safe for concurrent callers: a request takes one free helper (waiting
// callers are served in arrival order), so one caller's slow molecule holds
// one helper, for at most its time bound, while the others keep answering.
type RDKit struct {
	opts RDKitOptions
	log  *slog.Logger

	// slots holds the free helpers; a request takes one and gives it back.
	slots chan *rdkitSlot
	all   []*rdkitSlot

	mu          sync.Mutex
	info        RDKitInfo
	haveInfo    bool
	unavailable error // sticky: set when the interpreter or RDKit is missing

	// timedOut holds the texts (op + text) that ran into their bound.
	timedOut *lru.Cache[string, struct{}]
	// answers keeps the helper's answers to short texts (op + text →
	// answer): RDKit's verdict on a text is fixed for a helper build, and
	// the same substrates come back job after job (in a burst of 200 small
	// jobs, a helper round trip per submit was about 3 ms of CPU per job).
	answers *lru.Cache[string, rdResult]
}

// rdkitAnswersKept is how many answers RDKit.answers keeps, each of a text
// under soloLen: a few megabytes at most.
const rdkitAnswersKept = 16384

// answerKey is RDKit.answers' key of op on text.
func answerKey(op, text string) string { return op + "\x00" + text }

// rdkitSlot is one helper; whoever holds it (taken from RDKit.slots) owns it.
type rdkitSlot struct {
	proc   *rdkitProc
	nextID int64
}

type rdkitProc struct {
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	out    *bufio.Reader
	stderr *tailBuffer
	exited chan struct{}
	// closeOut closes our read end of the helper's stdout.
	closeOut func() error
}

// NewRDKit returns a helper pool; nothing starts until the first request.
func NewRDKit(opts RDKitOptions) *RDKit {
	if opts.Python == "" {
		opts.Python = DefaultPython
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.MoleculeTimeout == 0 {
		opts.MoleculeTimeout = defaultMoleculeTimeout
	}
	if opts.Helpers <= 0 {
		opts.Helpers = defaultHelpers
	}
	if opts.MaxRSSMiB <= 0 {
		opts.MaxRSSMiB = defaultMaxRSSMiB
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	r := &RDKit{opts: opts, log: log.With("component", "rdkit"), slots: make(chan *rdkitSlot, opts.Helpers)}
	r.timedOut, _ = lru.New[string, struct{}](timedOutKept)
	r.answers, _ = lru.New[string, rdResult](rdkitAnswersKept)
	for range opts.Helpers {
		sl := &rdkitSlot{}
		r.all = append(r.all, sl)
		r.slots <- sl
	}
	return r
}

// acquire takes a free helper, started. The caller must release it.
func (r *RDKit) acquire(ctx context.Context) (*rdkitSlot, error) {
	if err := r.unavailableErr(); err != nil {
		return nil, err
	}
	var sl *rdkitSlot
	select {
	case sl = <-r.slots:
	case <-ctx.Done():
		return nil, fmt.Errorf("rdkit: %w", ctx.Err())
	}
	if err := r.ensure(ctx, sl); err != nil {
		r.slots <- sl
		return nil, err
	}
	return sl, nil
}

func (r *RDKit) release(sl *rdkitSlot) { r.slots <- sl }

// restartLater kills sl's helper and starts a new one in the background
// before giving the slot back, so that the restart (a second or more) is
// not charged to the next caller.
func (r *RDKit) restartLater(sl *rdkitSlot) {
	r.stop(sl)
	go func() {
		ctx, cancel := context.WithTimeout(context.Background(), r.opts.StartTimeout)
		defer cancel()
		if err := r.ensure(ctx, sl); err != nil {
			r.log.Warn("rdkit helper restart failed; it is retried on the next request", "err", err)
		}
		r.release(sl)
	}()
}

func (r *RDKit) unavailableErr() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.unavailable
}

// Probe starts a helper if needed and reports what it offers, or
// ErrRDKitUnavailable (wrapped) when it cannot run here.
func (r *RDKit) Probe(ctx context.Context) (RDKitInfo, error) {
	r.mu.Lock()
	info, have, unavailable := r.info, r.haveInfo, r.unavailable
	r.mu.Unlock()
	if unavailable != nil {
		return RDKitInfo{}, unavailable
	}
	if have {
		return info, nil
	}
	sl, err := r.acquire(ctx)
	if err != nil {
		return RDKitInfo{}, err
	}
	r.release(sl)
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.info, nil
}

// Warm starts every helper that is not running (tests, and a process
// that wants its first requests fast).
func (r *RDKit) Warm(ctx context.Context) error {
	var held []*rdkitSlot
	defer func() {
		for _, sl := range held {
			r.release(sl)
		}
	}()
	for range r.opts.Helpers {
		sl, err := r.acquire(ctx)
		if err != nil {
			return err
		}
		held = append(held, sl)
	}
	return nil
}

// Close stops every helper process, waiting for requests in flight (each is
// bounded by its timeout).
func (r *RDKit) Close() error {
	held := make([]*rdkitSlot, 0, len(r.all))
	for range r.all {
		held = append(held, <-r.slots)
	}
	for _, sl := range held {
		r.stop(sl)
		r.release(sl)
	}
	return nil
}

// rdResult is one item's answer.
type rdResult struct {
	OK    bool    `json:"ok"`
	Value *string `json:"value"`
	Error string  `json:"error,omitempty"`
	// TimedOut: the item ran into its time bound (or was not tried because
	// it had before, or its call had used its budget); OK is false.
	TimedOut bool `json:"-"`
}

// call runs op over items, in chunks of rdkitChunk.
func (r *RDKit) call(ctx context.Context, op string, items []string) ([]rdResult, error) {
	out := make([]rdResult, 0, len(items))
	for start := 0; start < len(items); start += rdkitChunk {
		end := min(start+rdkitChunk, len(items))
		res, err := r.request(ctx, op, items[start:end])
		if err != nil {
			return nil, err
		}
		out = append(out, res...)
	}
	return out, nil
}

// timeoutFor is the time bound of a request of n items.
func (r *RDKit) timeoutFor(n int) time.Duration {
	return r.opts.MoleculeTimeout + time.Duration(max(n-1, 0))*chunkItemAllowance
}

func (r *RDKit) request(ctx context.Context, op string, items []string) ([]rdResult, error) {
	sl, err := r.acquire(ctx)
	if err != nil {
		return nil, err
	}
	sl.nextID++
	id := sl.nextID
	line, err := json.Marshal(struct {
		ID    int64    `json:"id"`
		Op    string   `json:"op"`
		Items []string `json:"items"`
	}{id, op, items})
	if err != nil {
		r.release(sl)
		return nil, fmt.Errorf("rdkit: encode request: %w", err)
	}
	p := sl.proc
	type reply struct {
		line []byte
		err  error
	}
	done := make(chan reply, 1)
	go func() {
		if _, err := p.stdin.Write(append(line, '\n')); err != nil {
			done <- reply{err: fmt.Errorf("write: %w", err)}
			return
		}
		b, err := p.out.ReadBytes('\n')
		done <- reply{b, err}
	}()
	timeout := r.timeoutFor(len(items))
	timer := time.NewTimer(timeout)
	defer timer.Stop()
	var rep reply
	select {
	case rep = <-done:
	case <-timer.C:
		r.log.Warn("rdkit helper timed out; restarting it", "op", op, "items", len(items), "timeout", timeout)
		r.restartLater(sl)
		<-done
		return nil, fmt.Errorf("%w after %s", errMoleculeTimeout, timeout)
	case <-ctx.Done():
		// The helper may be mid-answer; a restart is the only safe resync.
		r.restartLater(sl)
		<-done
		return nil, fmt.Errorf("rdkit: %w", ctx.Err())
	}
	if rep.err != nil {
		stderr := p.stderr.String()
		r.stop(sl)
		r.release(sl)
		r.log.Warn("rdkit helper died; it restarts on the next request", "err", rep.err, "stderr", stderr)
		return nil, fmt.Errorf("rdkit helper died: %w", rep.err)
	}
	defer r.release(sl)
	var resp struct {
		ID      int64      `json:"id"`
		Results []rdResult `json:"results"`
		Error   string     `json:"error"`
		// Restart: the helper passed its memory limit and is to be
		// replaced; this answer still holds.
		Restart bool `json:"restart"`
	}
	if err := json.Unmarshal(rep.line, &resp); err != nil || resp.ID != id || len(resp.Results) != len(items) {
		r.stop(sl)
		return nil, fmt.Errorf("rdkit: malformed reply (id %d, %d results for %d items, %q): %v",
			resp.ID, len(resp.Results), len(items), resp.Error, err)
	}
	if resp.Restart {
		r.log.Info("rdkit helper passed its memory limit; it restarts on the next request", "max_rss_mib", r.opts.MaxRSSMiB)
		r.stop(sl)
	}
	return resp.Results, nil
}

// ensure starts sl's helper when it is not running; the caller holds sl.
func (r *RDKit) ensure(ctx context.Context, sl *rdkitSlot) error {
	if err := r.unavailableErr(); err != nil {
		return err
	}
	if sl.proc != nil {
		select {
		case <-sl.proc.exited:
			r.stop(sl)
		default:
			return nil
		}
	}
	if _, err := exec.LookPath(r.opts.Python); err != nil {
		return r.setUnavailable(fmt.Errorf("%w: interpreter %s: %v", ErrRDKitUnavailable, r.opts.Python, err))
	}
	// The helper must outlive the request that started it, so it is not
	// bound to ctx; the start-up wait below is.
	cmd := exec.Command(r.opts.Python, "-u", "-c", rdkitHelperScript, strconv.Itoa(r.opts.MaxRSSMiB))
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return fmt.Errorf("rdkit: stdin pipe: %w", err)
	}
	// Our own pipe, not StdoutPipe: Wait must not close the read end
	// while a last line (such as "RDKit is missing") is still unread.
	stdout, pw, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("rdkit: stdout pipe: %w", err)
	}
	cmd.Stdout = pw
	stderr := &tailBuffer{max: stderrKeep}
	cmd.Stderr = stderr
	err = cmd.Start()
	_ = pw.Close()
	if err != nil {
		_ = stdout.Close()
		return fmt.Errorf("rdkit: start %s: %w", r.opts.Python, err)
	}
	p := &rdkitProc{cmd: cmd, stdin: stdin, out: bufio.NewReaderSize(stdout, 64*1024), stderr: stderr, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(p.exited) }()
	p.closeOut = stdout.Close

	type hello struct {
		Ready bool   `json:"ready"`
		Error string `json:"error"`
		RDKitInfo
	}
	got := make(chan struct {
		h   hello
		err error
	}, 1)
	go func() {
		var h hello
		b, err := p.out.ReadBytes('\n')
		if err == nil {
			err = json.Unmarshal(b, &h)
		}
		got <- struct {
			h   hello
			err error
		}{h, err}
	}()
	timer := time.NewTimer(r.opts.StartTimeout)
	defer timer.Stop()
	kill := func() { _ = cmd.Process.Kill(); <-p.exited; _ = p.closeOut() }
	select {
	case g := <-got:
		if g.err != nil {
			kill()
			return fmt.Errorf("rdkit: helper start: %w (stderr: %s)", g.err, stderr.String())
		}
		if !g.h.Ready {
			kill()
			return r.setUnavailable(fmt.Errorf("%w: %s", ErrRDKitUnavailable, g.h.Error))
		}
		sl.proc = p
		r.mu.Lock()
		r.info, r.haveInfo = g.h.RDKitInfo, true
		r.mu.Unlock()
		r.log.Debug("rdkit helper started", "rdkit", g.h.Version, "inchi", g.h.InChI, "inchi_via", g.h.InChIVia, "pid", cmd.Process.Pid)
		return nil
	case <-timer.C:
		kill()
		return fmt.Errorf("rdkit: helper did not start within %s", r.opts.StartTimeout)
	case <-ctx.Done():
		kill()
		return fmt.Errorf("rdkit: helper start: %w", ctx.Err())
	}
}

func (r *RDKit) setUnavailable(err error) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.unavailable = err
	return err
}

// stop kills sl's helper, if running, and waits for it; the caller holds sl.
func (r *RDKit) stop(sl *rdkitSlot) {
	if sl.proc == nil {
		return
	}
	_ = sl.proc.stdin.Close()
	_ = sl.proc.cmd.Process.Kill()
	<-sl.proc.exited
	_ = sl.proc.closeOut()
	sl.proc = nil
}

// tailBuffer keeps the last max bytes written to it.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	b   bytes.Buffer
}

func (t *tailBuffer) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.b.Write(p)
	if over := t.b.Len() - t.max; over > 0 {
		t.b.Next(over)
	}
	return len(p), nil
}

func (t *tailBuffer) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.TrimSpace(t.b.String())
}
