package embedjob

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/procio"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// ExitOutOfMemory is the exit code by which a step program says the batch did
// not fit in GPU memory (EX_TEMPFAIL from sysexits.h: "try again later",
// here: with fewer sequences).
const ExitOutOfMemory = 75

// OOMMarker, as a line of its own on stderr, says the same as exit code 75
// when the program exits non-zero.
const OOMMarker = "KINFLOW_OOM"

// oomTexts are what PyTorch prints when CUDA memory runs out; a program that
// dies with one of them on stderr is treated as out of memory, so that
// unmodified scripts are split and retried too.
var oomTexts = []string{"CUDA out of memory", "torch.OutOfMemoryError", "torch.cuda.OutOfMemoryError"}

// killGrace is how long a cancelled program has, after SIGTERM to its process
// group, to commit the file it is writing before SIGKILL.
const killGrace = 20 * time.Second

// Manifest is the JSON file a step program reads ({manifest_file}).
type Manifest struct {
	Version   int       `json:"version"`
	JobID     string    `json:"job_id"`
	StepKey   string    `json:"step_key"`
	Batch     int       `json:"batch"`
	MediaRoot string    `json:"media_root"`
	Seqs      []SeqItem `json:"seqs"`
	// Folders maps each output folder (relative to sequence_info/) to its
	// family's name (BatchJob.Folders): the folder naming is the host's
	// (KINFLOW_CACHE_FOLDERS), and a program takes a path's family from here.
	Folders map[string]string `json:"folders,omitempty"`
}

// CommandRunner runs each batch on the step's resident server
// (GPU_EMBED_STEP_SERVER_<STEP>, through Pool) or, for a step without one, as
// the step's one-shot program (GPU_EMBED_STEP_CMD_<STEP>), without a shell.
type CommandRunner struct {
	Settings  *Settings
	MediaRoot string
	// Pool keeps the resident servers; nil runs every step one-shot.
	Pool *stepserver.Pool
}

// Name implements BatchRunner.
func (r *CommandRunner) Name() string { return "command" }

// Synthetic implements BatchRunner: a configured program is a real model.
func (r *CommandRunner) Synthetic() bool { return false }

// SendBatch implements batchSender: a batch for a resident server is sent
// ahead of the answers to earlier ones; a one-shot program's runs to its end
// first.
func (r *CommandRunner) SendBatch(ctx context.Context, b BatchJob) (<-chan error, error) {
	if tmpl, ok := r.Settings.Servers[b.StepKey]; ok && r.Pool != nil {
		return r.sendResident(ctx, b, tmpl)
	}
	return settled(r.RunBatch(ctx, b)), nil
}

// RunBatch implements BatchRunner.
func (r *CommandRunner) RunBatch(ctx context.Context, b BatchJob) error {
	if tmpl, ok := r.Settings.Servers[b.StepKey]; ok && r.Pool != nil {
		return r.runResident(ctx, b, tmpl)
	}
	tmpl, ok := r.Settings.Commands[b.StepKey]
	if !ok {
		return &ConfigError{Msg: fmt.Sprintf("no program for step %s: set %s%s (resident) or %s%s (one-shot) in the GPU host's env file", b.StepKey, EnvStepServerPrefix, strings.ToUpper(b.StepKey), EnvStepCmdPrefix, strings.ToUpper(b.StepKey))}
	}
	if err := mediaroot.MkdirAll(r.Settings.ScratchDir, 0o755); err != nil {
		return fmt.Errorf("create scratch dir: %w", err)
	}
	dir, err := os.MkdirTemp(r.Settings.ScratchDir, b.JobID+"-"+b.StepKey+"-")
	if err != nil {
		return fmt.Errorf("create batch dir: %w", err)
	}
	defer os.RemoveAll(dir)

	manifest := filepath.Join(dir, "manifest.json")
	mapFile := filepath.Join(dir, "seq_id_to_seq.json")
	m := Manifest{Version: 1, JobID: b.JobID, StepKey: b.StepKey, Batch: b.Index, MediaRoot: r.MediaRoot, Seqs: b.Items, Folders: b.Folders}
	ids := make([]string, len(b.Items))
	idToSeq := make(map[string]string, len(b.Items))
	for i, it := range b.Items {
		ids[i] = it.SeqID
		idToSeq[it.SeqID] = it.Sequence
	}
	if err := writeJSON(manifest, m); err != nil {
		return err
	}
	if err := writeJSON(mapFile, idToSeq); err != nil {
		return err
	}
	rep := strings.NewReplacer(
		"{step_key}", b.StepKey,
		"{seq_ids}", strings.Join(ids, ","),
		"{seq_count}", strconv.Itoa(len(ids)),
		"{seq_id_to_seq_file}", mapFile,
		"{manifest_file}", manifest,
		"{job_id}", b.JobID,
	)
	argv := make([]string, len(tmpl))
	for i, t := range tmpl {
		argv[i] = rep.Replace(t)
	}

	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = append(append([]string(nil), r.Settings.ProgramEnv...),
		"KINFLOW_JOB_ID="+b.JobID,
		"KINFLOW_STEP_KEY="+b.StepKey,
		"KINFLOW_MANIFEST="+manifest,
		"KINFLOW_SEQ_ID_TO_SEQ_FILE="+mapFile,
		"KINFLOW_MEDIA_ROOT="+r.MediaRoot,
	)
	cmd.Env = append(cmd.Env, mediaRootIDEnv(r.MediaRoot)...)
	cmd.Env = append(cmd.Env, recordKeyEnv()...)
	if !hasEnv(cmd.Env, "PYTHONUNBUFFERED") {
		cmd.Env = append(cmd.Env, "PYTHONUNBUFFERED=1")
	}
	// Own process group: cancellation must reach the model processes a
	// wrapper script starts, not only the wrapper.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = killGrace
	// Writers, not pipes we read: Wait returns when the program exits (plus
	// at most WaitDelay) even if a process it started holds its output open.
	var oom atomic.Bool
	stdout := &procio.LineWriter{Line: func(line string) { b.Log.Printf("[stdout] %s", line) }}
	stderr := &procio.LineWriter{Line: func(line string) {
		b.Log.Printf("[stderr] %s", line)
		if strings.TrimSpace(line) == OOMMarker {
			oom.Store(true)
		}
		for _, t := range oomTexts {
			if strings.Contains(line, t) {
				oom.Store(true)
			}
		}
	}}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	b.Log.Printf("$ %s", procio.QuoteArgv(argv))
	if err := cmd.Start(); err != nil {
		return &ConfigError{Msg: fmt.Sprintf("start step program for %s: %v", b.StepKey, err)}
	}
	err = cmd.Wait()
	stdout.Flush()
	stderr.Flush()
	if errors.Is(err, exec.ErrWaitDelay) {
		b.Log.Printf("the step program exited; output of processes it left behind was cut off")
		err = nil
	}
	if ctx.Err() != nil {
		// Kill whatever the program left behind in its group.
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		return ctx.Err()
	}
	if err == nil {
		return nil
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code := ee.ExitCode()
		if code == ExitOutOfMemory || oom.Load() {
			return fmt.Errorf("step program exit %d: %w", code, ErrOutOfMemory)
		}
		if code < 0 {
			return fmt.Errorf("step program killed by %v", ee.Sys())
		}
		return fmt.Errorf("step program exit %d", code)
	}
	return fmt.Errorf("run step program: %w", err)
}

// ConfigError is a step that cannot run on this host as configured (no
// command, a program that cannot start): retrying will not help.
type ConfigError struct{ Msg string }

func (e *ConfigError) Error() string { return e.Msg }

func hasEnv(env []string, key string) bool {
	for _, kv := range env {
		if strings.HasPrefix(kv, key+"=") {
			return true
		}
	}
	return false
}

func writeJSON(path string, v any) error {
	data, err := json.Marshal(v)
	if err != nil {
		return fmt.Errorf("encode %s: %w", filepath.Base(path), err)
	}
	if err := os.WriteFile(path, data, 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
