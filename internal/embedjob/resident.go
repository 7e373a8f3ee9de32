package embedjob

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// runResident runs one batch on the step's resident server (tmpl is its
// GPU_EMBED_STEP_SERVER_* template): the pool starts the server at its first
// batch and keeps it across batches, steps and jobs (docs/gpu-host.md).
func (r *CommandRunner) runResident(ctx context.Context, b BatchJob, tmpl []string) error {
	done, err := r.sendResident(ctx, b, tmpl)
	if err != nil {
		return err
	}
	return <-done
}

// sendResident hands one batch to the step's resident server and returns
// once it is in the server's line (at most KINFLOW_STEP_SERVER_AHEAD
// batches in flight); the channel receives its outcome.
func (r *CommandRunner) sendResident(ctx context.Context, b BatchJob, tmpl []string) (<-chan error, error) {
	line, err := json.Marshal(Manifest{Version: 1, JobID: b.JobID, StepKey: b.StepKey, Batch: b.Index, MediaRoot: r.MediaRoot, Seqs: b.Items, Folders: b.Folders})
	if err != nil {
		return nil, fmt.Errorf("encode batch: %w", err)
	}
	spec := r.serverSpec(b.StepKey, tmpl)
	w, err := r.Pool.Send(ctx, spec, b.Index, line, func(l string) { b.Log.Printf("%s", l) })
	if err != nil {
		return nil, r.serverErr(ctx, b.StepKey, err)
	}
	done := make(chan error, 1)
	go func() {
		ans, err := w.Wait(ctx)
		done <- r.answerErr(ctx, b.StepKey, ans, err)
	}()
	return done, nil
}

// answerErr is the runner's outcome of a server's answer (or failure).
func (r *CommandRunner) answerErr(ctx context.Context, step string, ans stepserver.Answer, err error) error {
	if err != nil {
		return r.serverErr(ctx, step, err)
	}
	switch ans.Status {
	case stepserver.StatusDone:
		return nil
	case stepserver.StatusOOM:
		return fmt.Errorf("step server answered oom: %w", ErrOutOfMemory)
	default:
		return fmt.Errorf("step server error: %s", ans.Message)
	}
}

// serverErr maps a pool error for step to the runner's errors: a program
// that cannot start is a *ConfigError, a server that died of CUDA memory
// exhaustion is ErrOutOfMemory, the rest is returned as is.
func (r *CommandRunner) serverErr(ctx context.Context, step string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var se *stepserver.ServerError
	if errors.As(err, &se) {
		if se.Op == "start" && (errors.Is(se.Err, exec.ErrNotFound) || errors.Is(se.Err, os.ErrNotExist) || errors.Is(se.Err, os.ErrPermission)) {
			return &ConfigError{Msg: fmt.Sprintf("start step server for %s: %v", step, se.Err)}
		}
		// A server that died of CUDA memory exhaustion is split like
		// a one-shot program that did.
		for _, l := range se.StderrTail {
			for _, t := range oomTexts {
				if strings.Contains(l, t) {
					return fmt.Errorf("step server died: %w", ErrOutOfMemory)
				}
			}
		}
	}
	// The reason and the tail of the server's stderr (the same lines
	// are in the job's log).
	return err
}

// syntheticServerRunner is the synthetic executor: every step runs on a
// resident `kinflow step-server --synthetic` through the same protocol and
// pool real models use, so the embedded default exercises the production
// path.
type syntheticServerRunner struct{ CommandRunner }

// Name implements BatchRunner.
func (r *syntheticServerRunner) Name() string { return "synthetic" }

// Synthetic implements BatchRunner.
func (r *syntheticServerRunner) Synthetic() bool { return true }

// BatchLimits implements batchLimiter: no GPU memory to respect, so batches
// are large (fewer manifest merges), yet small enough that a step reports
// progress and an interrupted one loses little.
func (r *syntheticServerRunner) BatchLimits() (tokens, seqs int) { return 1 << 30, 256 }

// SyntheticServerArgv is the synthetic step server's command line: this
// very executable, `step-server --synthetic` (a test binary answers it
// through MainIfStepServer).
func SyntheticServerArgv() ([]string, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("find this executable for the synthetic step server: %w", err)
	}
	return []string{exe, "step-server", "--synthetic"}, nil
}

// newSyntheticServerRunner runs every active step on the synthetic server.
func newSyntheticServerRunner(st *Settings, mediaRoot string, pool *stepserver.Pool) (BatchRunner, error) {
	argv, err := SyntheticServerArgv()
	if err != nil {
		return nil, err
	}
	cp := *st
	cp.Servers = map[string][]string{}
	for _, k := range ActiveSteps {
		cp.Servers[k] = argv
	}
	return &syntheticServerRunner{CommandRunner{Settings: &cp, MediaRoot: mediaRoot, Pool: pool}}, nil
}

// MainIfStepServer turns a test binary into the synthetic step server when
// it is started as one (arguments `step-server --synthetic`): call it first
// in TestMain of a package whose tests run the synthetic executor in
// process. It returns when the arguments ask for something else.
func MainIfStepServer() {
	if len(os.Args) > 2 && os.Args[1] == "step-server" {
		os.Exit(StepServerMain(context.Background(), os.Args[2:], os.Stdin, os.Stdout, os.Stderr))
	}
}

// StepServerMain is `kinflow step-server --synthetic`: a resident step
// server (docs/gpu-host.md) that writes internal/embedding's synthetic
// artefacts, flagged synthetic. Its layout comes from the configuration in
// its environment (the GPU host passes its own); the media root from each
// batch. GPU_EMBED_SYNTHETIC_DELAY_MS is spent per sequence, a stand-in for
// model time. It returns the exit code.
func StepServerMain(ctx context.Context, args []string, stdin io.Reader, stdout, stderr io.Writer) int {
	if len(args) != 1 || args[0] != "--synthetic" {
		fmt.Fprintln(stderr, "usage: kinflow step-server --synthetic (real models: the steps/ package, docs/gpu-host.md)")
		return 2
	}
	cfg, err := config.Load(os.LookupEnv)
	if err != nil {
		fmt.Fprintln(stderr, "step-server:", err)
		return 1
	}
	// The host names its record key (recordKeyEnv): the records written
	// here carry their code, as the host's own do.
	if err := embedding.LoadRecordKey(cfg.CacheRecordKeyFile, false); err != nil {
		fmt.Fprintln(stderr, "step-server:", err)
		return 1
	}
	if id := os.Getenv(EnvMediaRootID); id != "" && cfg.MediaRoot != "" {
		// The host's identity of the media root: the artefacts' folders
		// are created only while the root holds it (mediaroot.MkdirAll).
		r, err := mediaroot.Open(cfg.MediaRoot, mediaroot.Options{ExpectID: id})
		if err != nil {
			fmt.Fprintln(stderr, "step-server:", err)
			return 1
		}
		defer r.Close()
	}
	delay := time.Duration(0)
	if v := os.Getenv(EnvSyntheticDelayMS); v != "" {
		ms, err := strconv.Atoi(v)
		if err != nil || ms < 0 {
			fmt.Fprintf(stderr, "step-server: %s=%q: want a whole number of milliseconds\n", EnvSyntheticDelayMS, v)
			return 1
		}
		delay = time.Duration(ms) * time.Millisecond
	}
	out := json.NewEncoder(stdout)
	ready := map[string]any{"ready": true, "model": "synthetic", "device": "cpu", "synthetic": true,
		"fingerprint": provenance.Synthetic(os.Getenv("KINFLOW_STEP_KEY"))}
	if err := out.Encode(ready); err != nil {
		return 1
	}
	in := bufio.NewReader(stdin)
	for {
		line, err := in.ReadBytes('\n')
		if len(strings.TrimSpace(string(line))) > 0 {
			var m Manifest
			ans := map[string]any{"status": "done"}
			if jerr := json.Unmarshal(line, &m); jerr != nil {
				ans["status"], ans["message"] = "error", "bad batch line: "+jerr.Error()
			} else if werr := writeSynthetic(ctx, cfg, m, delay); werr != nil {
				ans["status"], ans["message"] = "error", werr.Error()
			}
			ans["batch"] = m.Batch
			if err := out.Encode(ans); err != nil {
				return 1
			}
		}
		if err != nil {
			// EOF: the host asks us to exit.
			return 0
		}
	}
}

// writeSynthetic writes one batch's synthetic artefacts.
func writeSynthetic(ctx context.Context, cfg *config.Config, m Manifest, delay time.Duration) error {
	l, err := embedding.NewLayout(m.MediaRoot, cfg.MethodJCacheDir, cfg.MethodECheckpointRoot, cfg.BindingSiteDir)
	if err != nil {
		return err
	}
	// The host names the folders (the manifest's "folders"); a program
	// never picks a naming of its own.
	if l.Folders, err = embedding.FoldersOf(m.Folders); err != nil {
		return err
	}
	ids := make([]string, 0, len(m.Seqs))
	seqs := make(map[string]string, len(m.Seqs))
	for _, it := range m.Seqs {
		if delay > 0 {
			// One sequence at a time, so files appear at the simulated pace.
			time.Sleep(delay)
			if _, err := embedding.ComputeStep(ctx, l, m.StepKey, []string{it.SeqID}, map[string]string{it.SeqID: it.Sequence}, nil); err != nil {
				return err
			}
			continue
		}
		ids = append(ids, it.SeqID)
		seqs[it.SeqID] = it.Sequence
	}
	if len(ids) == 0 {
		return nil
	}
	_, err = embedding.ComputeStep(ctx, l, m.StepKey, ids, seqs, nil)
	return err
}
