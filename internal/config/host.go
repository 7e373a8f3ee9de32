package config

import (
	"strconv"
	"strings"
	"time"
)

// Host is the GPU host's own configuration (`kinflow gpu-worker`, and the
// CPU worker's local steps): read from the host's environment file, the
// process environment winning (LoadHost's lookup). The step programs'
// templates (the Prefix keys of HostKeys) are read by
// embedjob.LoadSettings, which knows the step keys.
type Host struct {
	// ToksPerBatch is the token budget of one batch (all steps).
	ToksPerBatch int
	// MaxBatchSeqs caps the sequences of one batch; 0 means no cap.
	MaxBatchSeqs int
	// ErrorLogTailLines is how many log lines a step failure quotes,
	// clamped to 20..2000.
	ErrorLogTailLines int
	// SyntheticDelay is the synthetic executor's time per sequence.
	SyntheticDelay time.Duration
	// JobLogDir holds the per-job step logs; empty: the caller's default
	// under the media root.
	JobLogDir string
	// ScratchDir holds the manifests of running batches; empty: the
	// caller's default under the system's temporary folder.
	ScratchDir string
	// GPUName names the GPU when nvidia-smi is absent.
	GPUName string
	// StepServersMax is the most resident step servers at once.
	StepServersMax int
	// StepServerIdle is how long an unused step server stays up.
	StepServerIdle time.Duration
	// StepServerStart bounds a step server's start (model load).
	StepServerStart time.Duration
	// StepServerAhead is the most batches in flight to one step server.
	StepServerAhead int
}

// HostKey describes one key of the GPU host's table.
type HostKey struct {
	Name    string
	Default string
	Meaning string
	// Allowed says, for error messages, what a valid value looks like.
	Allowed string
	// Prefix marks a family of keys, one per step key (Name ends in
	// `<STEP>`): embedjob.LoadSettings reads and checks them, since the
	// step catalogue sits above this package.
	Prefix bool
	set    func(h *Host, v string) error
}

// HostKeys is the table of the GPU host's keys, in README order. Their
// values are trimmed; an empty value counts as unset.
var HostKeys = []HostKey{
	{Name: "GPU_EMBED_STEP_SERVER_<STEP>", Prefix: true,
		Meaning: "The step's resident server template (docs/gpu-host.md); wins over `GPU_EMBED_STEP_CMD_<STEP>`. Placeholders: `{step_key}`, `{media_root}`; a per-batch placeholder, or a key naming an unknown or deprecated step, is a start-up error."},
	{Name: "GPU_EMBED_STEP_CMD_<STEP>", Prefix: true,
		Meaning: "The step's one-shot command template, one process per batch (docs/gpu-host.md). With `KINFLOW_STEP_EXECUTOR=command`, a step without a server or command fails (not retried) when asked."},
	{Name: "GPU_EMBED_STEP_FINGERPRINT_<STEP>", Prefix: true,
		Meaning: "A one-shot step's fingerprint command (run with `KINFLOW_FINGERPRINT_ONLY=1`, prints `{\"fingerprint\": {…}}`). Without one the program is identified by the files of its command."},
	// fair-esm's default toks_per_batch (extract.py): a batch of this many
	// padded tokens fits a 650M model on a 16 GB GPU.
	{Name: "GPU_EMBED_TOKS_PER_BATCH", Default: "4096",
		Meaning: "Token budget of one batch (fair-esm's default: fits a 650M model on a 16 GB GPU).", Allowed: "want a whole number, 1 or more",
		set: func(h *Host, v string) error { return setIntMin(&h.ToksPerBatch, v, 1) }},
	{Name: "GPU_EMBED_TOKS_PER_BATCH_<STEP>", Prefix: true,
		Meaning: "The same for one step."},
	{Name: "GPU_EMBED_MAX_BATCH_SEQS", Default: "0",
		Meaning: "Most sequences in one batch; 0: only the token budget limits a batch.", Allowed: "want a whole number, 0 or more",
		set: func(h *Host, v string) error { return setIntMin(&h.MaxBatchSeqs, v, 0) }},
	{Name: "GPU_EMBED_MAX_RESIDUES_<STEP>", Prefix: true,
		Meaning: "Longest sequence the step's model takes (1022 for `METHODD_ESM1B` and `METHODF_ESM1V`, else none; 0: none); longer ones follow the long-sequence rule."},
	// On the media root, not /tmp: several GPU hosts serve one queue, so
	// the host answering GET …/logs may not be the one that ran a step.
	{Name: "GPU_EMBED_JOB_LOG_DIR", Default: "",
		Meaning: "Step logs `<dir>/<job_id>.log`. Empty: `<media root>/gpu_jobs/logs` (on shared storage, so any host can serve `…/logs`).",
		set:     func(h *Host, v string) error { h.JobLogDir = v; return nil }},
	{Name: "GPU_EMBED_SCRATCH_DIR", Default: "",
		Meaning: "Batch manifests while a batch runs. Empty: `$TMPDIR/kinflow-gpu-embed/scratch`.",
		set:     func(h *Host, v string) error { h.ScratchDir = v; return nil }},
	// Clamped to 20..2000 like the reference's GPU service: enough context to
	// see a traceback, never a log dump inside a workflow failure.
	{Name: "GPU_EMBED_ERROR_LOG_TAIL_LINES", Default: "120",
		Meaning: "Log lines a failed step's error quotes (clamped to 20..2000).", Allowed: "want a whole number, 0 or more",
		set: func(h *Host, v string) error {
			if err := setIntMin(&h.ErrorLogTailLines, v, 0); err != nil {
				return err
			}
			h.ErrorLogTailLines = min(max(h.ErrorLogTailLines, 20), 2000)
			return nil
		}},
	{Name: "GPU_EMBED_SYNTHETIC_DELAY_MS", Default: "0",
		Meaning: "The synthetic executor's time per sequence, in milliseconds: it stands in for model time in demos and in the tests that kill a worker mid-step.", Allowed: "want a whole number, 0 or more",
		set: func(h *Host, v string) error {
			var ms int
			if err := setIntMin(&ms, v, 0); err != nil {
				return err
			}
			h.SyntheticDelay = time.Duration(ms) * time.Millisecond
			return nil
		}},
	{Name: "GPU_NAME", Default: "",
		Meaning: "`gpu_name` in the GPU host's `/health` when `nvidia-smi` is absent. Empty: `unknown`.",
		set:     func(h *Host, v string) error { h.GPUName = v; return nil }},
	// Each resident server holds its model's weights, a CUDA context and
	// the peak activations of its largest batch: two keep the step that
	// runs now and the one before it warm within a 24 GB card
	// (stepserver.DefaultMax says more).
	{Name: "KINFLOW_STEP_SERVERS_MAX", Default: "2",
		Meaning: "Resident step servers at once on a GPU host; starting one more stops the least recently used idle one. Hosts with a large GPU raise it.", Allowed: "want a positive integer",
		set: func(h *Host, v string) error { return setIntMin(&h.StepServersMax, v, 1) }},
	// Long enough that one working session's jobs find the model warm,
	// short enough that a shared host gets its GPU memory back in minutes.
	{Name: "KINFLOW_STEP_SERVER_IDLE_SECONDS", Default: "600",
		Meaning: "Seconds an unused step server stays up before it is asked to exit.", Allowed: "want a positive integer",
		set: func(h *Host, v string) error { return setSeconds(&h.StepServerIdle, v) }},
	// A 13 GB ensemble read from a network disk at 50 MB/s takes over four
	// minutes; a program silent for ten is stuck.
	{Name: "KINFLOW_STEP_SERVER_START_SECONDS", Default: "600",
		Meaning: "Seconds a step server may take to load its model (start to ready line); past it the server's batch fails.", Allowed: "want a positive integer",
		set: func(h *Host, v string) error { return setSeconds(&h.StepServerStart, v) }},
	// Three: a pipelined step server's three stages (forward pass, copy,
	// writes) each hold a batch, so the device never waits for the host's
	// check of the batch before (stepserver.DefaultAhead says more). Capped
	// so that a typing error cannot queue a whole job's manifests in memory.
	{Name: "KINFLOW_STEP_SERVER_AHEAD", Default: "3",
		Meaning: "Batches the GPU host keeps in flight to one resident step server (sent before the answers to earlier ones, which come in order): a pipelined server (`steps/`) computes one while it writes another and the host checks the files of the last. 1: one batch at a time. A server that dies fails its batches in flight; each gets one more try.", Allowed: "want a whole number from 1 to 16",
		set: func(h *Host, v string) error {
			if err := setIntMin(&h.StepServerAhead, v, 1); err != nil || h.StepServerAhead > 16 {
				return errInvalid
			}
			return nil
		}},
}

// LoadHost reads the GPU host's keys through lookup (its env file under the
// process environment), applying defaults, and returns the first invalid
// value as a *KeyError.
func LoadHost(lookup func(string) (string, bool)) (*Host, error) {
	h := &Host{}
	for _, k := range HostKeys {
		if k.Prefix {
			continue
		}
		v, _ := lookup(k.Name)
		if v = strings.TrimSpace(v); v == "" {
			v = k.Default
		}
		if err := k.set(h, v); err != nil {
			return nil, &KeyError{Key: k.Name, Value: v, Allowed: k.Allowed}
		}
	}
	return h, nil
}

func setIntMin(dst *int, v string, lo int) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < lo {
		return errInvalid
	}
	*dst = n
	return nil
}

// hostMarkdown renders the GPU host's table, below the main one.
func hostMarkdown(b *strings.Builder) {
	b.WriteString("\nThe GPU host's own keys (`kinflow gpu-worker`, and the CPU worker's local steps): read from its env file (`--env-file`, `KINFLOW_GPU_ENV_FILE`), the process environment winning; `<STEP>` is an active step key, upper-cased.\n\n")
	b.WriteString(tableHeader)
	for _, k := range HostKeys {
		def := formatDefault(k.Default)
		if k.Prefix {
			def = "—"
		}
		writeRow(b, k.Name, def, k.Meaning)
	}
}
