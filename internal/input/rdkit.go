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
	// defaultRequestTimeout bounds one request of at most rdkitChunk items.
	// A SMILES takes well under a millisecond, an InChI through Open Babel
	// one to two (ATP: 0.8 ms to check, 1.8 ms InChI to standard InChI); a
	// request that takes this long means RDKit is stuck on a pathological
	// input, and the helper is killed and restarted rather than blocking
	// every caller behind it.
	defaultRequestTimeout = 30 * time.Second
	// rdkitChunk is the most items sent in one request, so that one request
	// stays far inside its timeout and a failure costs little to retry.
	rdkitChunk = 1000
	// stderrKeep is how much of the helper's stderr is kept for diagnostics.
	stderrKeep = 4096
	// defaultMaxRSSMiB is the helper's memory limit: past it, the helper
	// asks to be restarted (about 70 MiB after start-up).
	defaultMaxRSSMiB = 512
)

// ErrRDKitUnavailable means the helper cannot run here: no interpreter, or
// RDKit is not installed for it. The Go checks then decide alone.
var ErrRDKitUnavailable = errors.New("RDKit is not available")

// RDKitOptions configure the helper.
type RDKitOptions struct {
	// Python is the interpreter; empty means DefaultPython.
	Python string
	// StartTimeout and RequestTimeout override the defaults when non-zero.
	StartTimeout, RequestTimeout time.Duration
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

// RDKit is a long-lived RDKit helper process (an embedded Python script
// speaking line-delimited JSON on stdin/stdout). It starts on first use, is
// restarted after it dies or times out, and is safe for concurrent callers
// (requests are serialised: the helper is single-threaded anyway).
type RDKit struct {
	opts RDKitOptions
	log  *slog.Logger

	mu          sync.Mutex
	proc        *rdkitProc
	info        RDKitInfo
	unavailable error // sticky: set when the interpreter or RDKit is missing
	nextID      int64
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

// NewRDKit returns a helper handle; nothing starts until the first request.
func NewRDKit(opts RDKitOptions) *RDKit {
	if opts.Python == "" {
		opts.Python = DefaultPython
	}
	if opts.StartTimeout == 0 {
		opts.StartTimeout = defaultStartTimeout
	}
	if opts.RequestTimeout == 0 {
		opts.RequestTimeout = defaultRequestTimeout
	}
	if opts.MaxRSSMiB <= 0 {
		opts.MaxRSSMiB = defaultMaxRSSMiB
	}
	log := opts.Log
	if log == nil {
		log = slog.Default()
	}
	return &RDKit{opts: opts, log: log.With("component", "rdkit")}
}

// Probe starts the helper if needed and reports what it offers, or
// ErrRDKitUnavailable (wrapped) when it cannot run here.
func (r *RDKit) Probe(ctx context.Context) (RDKitInfo, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ensure(ctx); err != nil {
		return RDKitInfo{}, err
	}
	return r.info, nil
}

// Close stops the helper process, if running.
func (r *RDKit) Close() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.stop()
	return nil
}

// rdResult is one item's answer.
type rdResult struct {
	OK    bool    `json:"ok"`
	Value *string `json:"value"`
	Error string  `json:"error,omitempty"`
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

func (r *RDKit) request(ctx context.Context, op string, items []string) ([]rdResult, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if err := r.ensure(ctx); err != nil {
		return nil, err
	}
	r.nextID++
	id := r.nextID
	line, err := json.Marshal(struct {
		ID    int64    `json:"id"`
		Op    string   `json:"op"`
		Items []string `json:"items"`
	}{id, op, items})
	if err != nil {
		return nil, fmt.Errorf("rdkit: encode request: %w", err)
	}
	p := r.proc
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
	timer := time.NewTimer(r.opts.RequestTimeout)
	defer timer.Stop()
	var rep reply
	select {
	case rep = <-done:
	case <-timer.C:
		r.log.Warn("rdkit helper timed out; restarting", "op", op, "items", len(items), "timeout", r.opts.RequestTimeout)
		r.stop()
		<-done
		return nil, fmt.Errorf("rdkit: request timed out after %s", r.opts.RequestTimeout)
	case <-ctx.Done():
		// The helper may be mid-answer; a restart is the only safe resync.
		r.stop()
		<-done
		return nil, fmt.Errorf("rdkit: %w", ctx.Err())
	}
	if rep.err != nil {
		stderr := p.stderr.String()
		r.stop()
		r.log.Warn("rdkit helper died; it restarts on the next request", "err", rep.err, "stderr", stderr)
		return nil, fmt.Errorf("rdkit helper died: %w", rep.err)
	}
	var resp struct {
		ID      int64      `json:"id"`
		Results []rdResult `json:"results"`
		Error   string     `json:"error"`
		// Restart: the helper passed its memory limit and is to be
		// replaced; this answer still holds.
		Restart bool `json:"restart"`
	}
	if err := json.Unmarshal(rep.line, &resp); err != nil || resp.ID != id || len(resp.Results) != len(items) {
		r.stop()
		return nil, fmt.Errorf("rdkit: malformed reply (id %d, %d results for %d items, %q): %v",
			resp.ID, len(resp.Results), len(items), resp.Error, err)
	}
	if resp.Restart {
		r.log.Info("rdkit helper passed its memory limit; it restarts on the next request", "max_rss_mib", r.opts.MaxRSSMiB)
		r.stop()
	}
	return resp.Results, nil
}

// ensure starts the helper when it is not running. r.mu is held.
func (r *RDKit) ensure(ctx context.Context) error {
	if r.unavailable != nil {
		return r.unavailable
	}
	if r.proc != nil {
		select {
		case <-r.proc.exited:
			r.stop()
		default:
			return nil
		}
	}
	if _, err := exec.LookPath(r.opts.Python); err != nil {
		r.unavailable = fmt.Errorf("%w: interpreter %s: %v", ErrRDKitUnavailable, r.opts.Python, err)
		return r.unavailable
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
			r.unavailable = fmt.Errorf("%w: %s", ErrRDKitUnavailable, g.h.Error)
			return r.unavailable
		}
		r.proc, r.info = p, g.h.RDKitInfo
		r.log.Debug("rdkit helper started", "rdkit", r.info.Version, "inchi", r.info.InChI, "inchi_via", r.info.InChIVia, "pid", cmd.Process.Pid)
		return nil
	case <-timer.C:
		kill()
		return fmt.Errorf("rdkit: helper did not start within %s", r.opts.StartTimeout)
	case <-ctx.Done():
		kill()
		return fmt.Errorf("rdkit: helper start: %w", ctx.Err())
	}
}

// stop kills the helper, if running, and waits for it. r.mu is held.
func (r *RDKit) stop() {
	if r.proc == nil {
		return
	}
	_ = r.proc.stdin.Close()
	_ = r.proc.cmd.Process.Kill()
	<-r.proc.exited
	_ = r.proc.closeOut()
	r.proc = nil
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
