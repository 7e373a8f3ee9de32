package embedjob

import (
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// Environment-file keys (docs/gpu-host.md lists them with their meaning).
const (
	// EnvStepCmdPrefix + upper-cased step key holds a step's command template.
	EnvStepCmdPrefix = "GPU_EMBED_STEP_CMD_"
	// EnvStepServerPrefix + upper-cased step key holds a step's resident
	// server template (docs/gpu-host.md); it wins over the command.
	EnvStepServerPrefix = "GPU_EMBED_STEP_SERVER_"
	// EnvStepFingerprintPrefix + upper-cased step key holds the command
	// that prints a one-shot step program's fingerprint (docs/gpu-host.md);
	// without one the program is identified by the files of its command.
	EnvStepFingerprintPrefix = "GPU_EMBED_STEP_FINGERPRINT_"
	// EnvToksPerBatch is the token budget of one batch (all steps).
	EnvToksPerBatch = "GPU_EMBED_TOKS_PER_BATCH"
	// EnvToksPerBatchPrefix + STEP overrides the budget for one step.
	EnvToksPerBatchPrefix = "GPU_EMBED_TOKS_PER_BATCH_"
	// EnvMaxBatchSeqs caps the sequences of one batch (0: only the budget).
	EnvMaxBatchSeqs = "GPU_EMBED_MAX_BATCH_SEQS"
	// EnvMaxResiduesPrefix + STEP is the longest sequence the step's model takes.
	EnvMaxResiduesPrefix = "GPU_EMBED_MAX_RESIDUES_"
	// EnvJobLogDir holds the per-job step logs <dir>/<job_id>.log.
	EnvJobLogDir = "GPU_EMBED_JOB_LOG_DIR"
	// EnvScratchDir holds the manifests of running batches.
	EnvScratchDir = "GPU_EMBED_SCRATCH_DIR"
	// EnvErrorLogTailLines is how many log lines a failed step's error quotes.
	EnvErrorLogTailLines = "GPU_EMBED_ERROR_LOG_TAIL_LINES"
	// EnvSyntheticDelayMS is the synthetic executor's time per sequence.
	EnvSyntheticDelayMS = "GPU_EMBED_SYNTHETIC_DELAY_MS"
	// EnvGPUName names the GPU when nvidia-smi is absent.
	EnvGPUName = "GPU_NAME"
	// EnvMethodECheckpointRoot is where method E's model.pt files are.
	EnvMethodECheckpointRoot = "METHODE_CHECKPOINT_ROOT"
)

// DefaultToksPerBatch is fair-esm's default toks_per_batch (extract.py): a
// batch of this many padded tokens fits a 650M model on a 16 GB GPU
// (GPU_EMBED_TOKS_PER_BATCH's default in config.HostKeys).
const DefaultToksPerBatch = 4096

// Settings are the GPU host's settings from its environment file (and the
// process environment, which wins).
type Settings struct {
	// Commands holds each step's tokenised command template, by step key.
	Commands map[string][]string
	// Servers holds each step's tokenised resident server template.
	Servers map[string][]string
	// Fingerprints holds each one-shot step's fingerprint command.
	Fingerprints map[string][]string
	// Pool tunes the resident servers (KINFLOW_STEP_SERVERS_MAX, …).
	Pool stepserver.Options
	// ToksPerBatch is the default token budget of one batch.
	ToksPerBatch int
	// StepToksPerBatch overrides ToksPerBatch per step.
	StepToksPerBatch map[string]int
	// MaxBatchSeqs caps the sequences of a batch; 0 means no cap.
	MaxBatchSeqs int
	// MaxResidues is the longest sequence each step's model accepts; absent
	// or 0 means any length.
	MaxResidues map[string]int
	// JobLogDir holds <job_id>.log.
	JobLogDir string
	// ScratchDir holds batch manifests while a batch runs.
	ScratchDir string
	// ErrorLogTailLines is how many log lines a step failure quotes (20..2000).
	ErrorLogTailLines int
	// GPUName names the GPU when nvidia-smi is absent ("" → "unknown").
	GPUName string
	// MethodECheckpointRoot is METHODE_CHECKPOINT_ROOT.
	MethodECheckpointRoot string
	// SyntheticDelay is how long the synthetic executor takes per sequence
	// (GPU_EMBED_SYNTHETIC_DELAY_MS): it stands in for model time in demos
	// and in the tests that kill a worker mid-step.
	SyntheticDelay time.Duration
	// ProgramEnv is the step programs' environment: the process environment
	// plus the env file's entries the process does not set.
	ProgramEnv []string
}

// Lookup finds a setting: the process environment first, then the env file.
type Lookup func(key string) (string, bool)

// LayeredLookup looks key up in the process environment, then in file.
func LayeredLookup(file map[string]string) Lookup {
	return func(k string) (string, bool) {
		if v, ok := os.LookupEnv(k); ok {
			return v, true
		}
		v, ok := file[k]
		return v, ok
	}
}

// LoadSettings builds Settings from look (see LayeredLookup) and the env
// file's entries (passed to step programs). mediaRoot anchors the default log
// directory. The host's keys are config.HostKeys (read by config.LoadHost,
// an invalid value is a *config.KeyError); the per-step keys are read here,
// where the step keys are known.
func LoadSettings(look Lookup, file map[string]string, mediaRoot string) (*Settings, error) {
	h, err := config.LoadHost(look)
	if err != nil {
		return nil, err
	}
	s := &Settings{
		Commands:          map[string][]string{},
		Servers:           map[string][]string{},
		Fingerprints:      map[string][]string{},
		ToksPerBatch:      h.ToksPerBatch,
		StepToksPerBatch:  map[string]int{},
		MaxBatchSeqs:      h.MaxBatchSeqs,
		MaxResidues:       maps.Clone(DefaultMaxResidues),
		JobLogDir:         h.JobLogDir,
		ScratchDir:        h.ScratchDir,
		ErrorLogTailLines: h.ErrorLogTailLines,
		GPUName:           h.GPUName,
		SyntheticDelay:    h.SyntheticDelay,
		Pool:              stepserver.Options{Max: h.StepServersMax, Idle: h.StepServerIdle, StartTimeout: h.StepServerStart, KillGrace: stepserver.DefaultKillGrace, Ahead: h.StepServerAhead},
	}
	get := func(k string) string { v, _ := look(k); return strings.TrimSpace(v) }
	if err := s.loadStepKeys(file, get); err != nil {
		return nil, err
	}
	if s.JobLogDir == "" {
		s.JobLogDir = filepath.Join(mediaRoot, "gpu_jobs", "logs")
	}
	if s.ScratchDir == "" {
		s.ScratchDir = filepath.Join(os.TempDir(), "kinflow-gpu-embed", "scratch")
	}
	s.MethodECheckpointRoot = get(EnvMethodECheckpointRoot)

	env := os.Environ()
	var fileKeys []string
	for _, k := range slices.Sorted(maps.Keys(file)) {
		if _, set := os.LookupEnv(k); !set {
			fileKeys = append(fileKeys, k)
		}
	}
	for _, k := range fileKeys {
		env = append(env, k+"="+file[k])
	}
	s.ProgramEnv = config.ChildEnv(env)
	return s, nil
}

// loadStepKeys reads the per-step keys (the Prefix keys of
// config.HostKeys) of the env file and the process environment. Every
// GPU_EMBED_STEP_CMD_*, GPU_EMBED_TOKS_PER_BATCH_* and
// GPU_EMBED_MAX_RESIDUES_* key must name an active step: a typo would
// otherwise silently fall back to the default.
func (s *Settings) loadStepKeys(file map[string]string, get func(string) string) error {
	keys := map[string]bool{}
	for k := range file {
		keys[k] = true
	}
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		keys[k] = true
	}
	for _, k := range slices.Sorted(maps.Keys(keys)) {
		var err error
		switch {
		case strings.HasPrefix(k, EnvStepCmdPrefix):
			err = s.setStep(k, EnvStepCmdPrefix, get(k), func(step, v string) error {
				argv, err := commandWords(v)
				if argv != nil {
					s.Commands[step] = argv
				}
				return err
			})
		case strings.HasPrefix(k, EnvStepFingerprintPrefix):
			err = s.setStep(k, EnvStepFingerprintPrefix, get(k), func(step, v string) error {
				argv, err := commandWords(v)
				if argv != nil {
					s.Fingerprints[step] = argv
				}
				return err
			})
		case strings.HasPrefix(k, EnvStepServerPrefix):
			err = s.setStep(k, EnvStepServerPrefix, get(k), s.setServer)
		case strings.HasPrefix(k, EnvToksPerBatchPrefix):
			err = s.setStep(k, EnvToksPerBatchPrefix, get(k), func(step, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 1 {
					return fmt.Errorf("want a whole number, 1 or more")
				}
				s.StepToksPerBatch[step] = n
				return nil
			})
		case strings.HasPrefix(k, EnvMaxResiduesPrefix):
			err = s.setStep(k, EnvMaxResiduesPrefix, get(k), func(step, v string) error {
				n, err := strconv.Atoi(v)
				if err != nil || n < 0 {
					return fmt.Errorf("want a whole number, 0 (no limit) or more")
				}
				s.MaxResidues[step] = n
				return nil
			})
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// setServer sets step's resident server template, refusing a per-batch
// placeholder.
func (s *Settings) setServer(step, v string) error {
	argv, err := commandWords(v)
	if argv == nil {
		return err
	}
	for _, a := range argv {
		if p := batchPlaceholder(a); p != "" {
			return fmt.Errorf("%s names one batch; a resident server gets its batches on stdin ({step_key} and {media_root} are the placeholders it may use)", p)
		}
	}
	s.Servers[step] = argv
	return nil
}

func (s *Settings) setStep(key, prefix, val string, set func(step, v string) error) error {
	suffix := strings.ToLower(strings.TrimPrefix(key, prefix))
	if r, dep := deprecatedSteps[suffix]; dep {
		return fmt.Errorf("%s: %s is a deprecated step key; set %s%s instead", key, suffix, prefix, strings.ToUpper(r))
	}
	if _, ok := CanonicalStep(suffix); !ok {
		return fmt.Errorf("%s: %q is not an active step key", key, suffix)
	}
	if err := set(suffix, val); err != nil {
		return fmt.Errorf("%s: %w", key, err)
	}
	return nil
}

// TokenBudget is the token budget of one batch of step.
func (s *Settings) TokenBudget(step string) int {
	if n, ok := s.StepToksPerBatch[step]; ok {
		return n
	}
	return s.ToksPerBatch
}

// batchPlaceholder returns the one-shot placeholder word holds, if any.
func batchPlaceholder(word string) string {
	for _, p := range []string{"{manifest_file}", "{seq_id_to_seq_file}", "{seq_ids}", "{seq_count}", "{job_id}"} {
		if strings.Contains(word, p) {
			return p
		}
	}
	return ""
}

// commandWords splits a command template (nil for an empty value, which
// leaves the step unset).
func commandWords(v string) ([]string, error) {
	if v == "" {
		return nil, nil
	}
	argv, err := SplitCommand(v)
	if err != nil {
		return nil, err
	}
	if len(argv) == 0 {
		return nil, fmt.Errorf("empty command")
	}
	return argv, nil
}
