package embedjob

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/provenance"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// EnvFingerprintOnly is set to 1 in the environment of a step's fingerprint
// command (EnvStepFingerprintPrefix): the program prints
// `{"fingerprint": {...}}` on stdout and exits 0 without running a batch
// (docs/gpu-host.md; kinflow_steps also takes --fingerprint).
const EnvFingerprintOnly = "KINFLOW_FINGERPRINT_ONLY"

// fingerprintTimeout bounds a one-shot program's fingerprint answer: it
// hashes weights (remembered between runs) but loads no model.
const fingerprintTimeout = 5 * time.Minute

// fingerprinter is a BatchRunner that says what model its step program
// runs, so that the engine can check each family before writing to it.
type fingerprinter interface {
	Fingerprint(ctx context.Context, step string, log *JobLog) (provenance.Fingerprint, error)
}

// Fingerprint implements fingerprinter for the synthetic executor.
func (r *syntheticServerRunner) Fingerprint(_ context.Context, step string, _ *JobLog) (provenance.Fingerprint, error) {
	return provenance.Synthetic(step), nil
}

// Fingerprint implements fingerprinter: the `fingerprint` field of the
// resident server's ready line, or for a one-shot step the answer of its
// fingerprint command (EnvStepFingerprintPrefix, run with
// EnvFingerprintOnly=1). A program that reports none is identified by the
// SHA-256 of its program and of every file named on its command line
// (ProgramFingerprint), so a changed script or checkpoint still shows.
func (r *CommandRunner) Fingerprint(ctx context.Context, step string, log *JobLog) (provenance.Fingerprint, error) {
	if tmpl, ok := r.Settings.Servers[step]; ok && r.Pool != nil {
		spec := r.serverSpec(step, tmpl)
		info, err := r.Pool.Ready(ctx, spec, func(l string) { log.Printf("%s", l) })
		if err != nil {
			return provenance.Fingerprint{}, r.serverErr(ctx, step, err)
		}
		if fp, ok := provenance.Parse(info["fingerprint"]); ok {
			return fp, checkClaim(step, fp)
		}
		model, _ := info["model"].(string)
		return ProgramFingerprint(spec.Argv, model)
	}
	tmpl, ok := r.Settings.Commands[step]
	if !ok {
		return provenance.Fingerprint{}, &ConfigError{Msg: fmt.Sprintf("no program for step %s: set %s%s (resident) or %s%s (one-shot) in the GPU host's env file", step, EnvStepServerPrefix, strings.ToUpper(step), EnvStepCmdPrefix, strings.ToUpper(step))}
	}
	fcmd, ok := r.Settings.Fingerprints[step]
	if !ok {
		// Never run a one-shot program to ask: one that does not know the
		// question would run a batch. Its command's files identify it.
		return ProgramFingerprint(tmpl, "")
	}
	rep := strings.NewReplacer("{step_key}", step, "{media_root}", r.MediaRoot)
	argv := make([]string, len(fcmd))
	for i, t := range fcmd {
		argv[i] = rep.Replace(t)
	}
	cctx, cancel := context.WithTimeout(ctx, fingerprintTimeout)
	defer cancel()
	cmd := exec.CommandContext(cctx, argv[0], argv[1:]...)
	cmd.Env = append(append([]string(nil), r.Settings.ProgramEnv...),
		"KINFLOW_STEP_KEY="+step, "KINFLOW_MEDIA_ROOT="+r.MediaRoot, EnvFingerprintOnly+"=1")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		return provenance.Fingerprint{}, ctx.Err()
	}
	if err == nil {
		for _, line := range bytes.Split(stdout.Bytes(), []byte("\n")) {
			var doc map[string]any
			if json.Unmarshal(bytes.TrimSpace(line), &doc) == nil {
				if fp, ok := provenance.Parse(doc["fingerprint"]); ok {
					return fp, checkClaim(step, fp)
				}
			}
		}
		err = errors.New(`no {"fingerprint": …} line on stdout`)
	}
	tail := strings.TrimSpace(stderr.String())
	if i := strings.LastIndexByte(tail, '\n'); i >= 0 {
		tail = tail[i+1:]
	}
	return provenance.Fingerprint{}, &ConfigError{Msg: fmt.Sprintf("%s%s: %v %s", EnvStepFingerprintPrefix, strings.ToUpper(step), err, tail)}
}

// checkClaim refuses a step program's fingerprint that claims to be
// synthetic. Only kinflow's own synthetic executor is synthetic, and it
// never answers through this path (syntheticServerRunner): a configured
// program that says so is misconfigured or lying, and taking its word
// would record its files under a synthetic fingerprint (or, in a family of
// a real model, beside real ones), so it is refused like a family made by
// another model.
func checkClaim(step string, fp provenance.Fingerprint) error {
	if !fp.Synthetic {
		return nil
	}
	return &ConfigError{Msg: fmt.Sprintf("the step program of %s reports a synthetic fingerprint (%s, model %q): only kinflow's synthetic executor (KINFLOW_STEP_EXECUTOR=synthetic) writes synthetic files; a configured program must report its model", step, fp.ID(), fp.Model)}
}

// ProgramFingerprint identifies a program that reports no fingerprint of
// its own (provenance.CommandFingerprint with the host's hash cache).
func ProgramFingerprint(argv []string, model string) (provenance.Fingerprint, error) {
	return provenance.CommandFingerprint(provenance.SharedHashCache(), argv, model)
}

// FamilyName is the name of the family whose folder under l's naming is
// dir; for a folder of no family, its path under sequence_info/ (the
// folder's base name when it is not under one).
func FamilyName(l *embedding.Layout, dir string) string {
	if f, ok := l.FamilyOfDir(dir); ok {
		return f.Name
	}
	sep := string(filepath.Separator) + embedding.SequenceInfoDir + string(filepath.Separator)
	if i := strings.LastIndex(dir, sep); i >= 0 {
		return filepath.ToSlash(dir[i+len(sep):])
	}
	return filepath.Base(dir)
}

// syntheticOutputs returns the outputs of seqs that are synthetic files
// (internal/provenance: a family recorded as synthetic, or the manifest's
// per-file flag where the family holds files of two origins). Real step
// programs treat them as missing and replace them. One record read per
// folder; the manifest only where the record says it is needed.
func syntheticOutputs(seqs []SeqItem) (map[string]bool, error) {
	byDir := map[string][]string{}
	for _, it := range seqs {
		for _, p := range it.Outputs {
			byDir[filepath.Dir(p)] = append(byDir[filepath.Dir(p)], p)
		}
	}
	out := map[string]bool{}
	for dir, paths := range byDir {
		rec, err := provenance.ReadRecorded(dir)
		if err != nil {
			return nil, err
		}
		if rec.AllSynthetic() && !rec.Unverified {
			for _, p := range paths {
				out[p] = true
			}
			continue
		}
		if rec != nil && !rec.SyntheticFiles && !rec.AllSynthetic() {
			continue
		}
		entries := embedding.ReadManifest(dir)
		for _, p := range paths {
			base := filepath.Base(p)
			if e, ok := entries[strings.TrimSuffix(base, filepath.Ext(base))]; ok && e.Synthetic && e.Filename == base {
				out[p] = true
			}
		}
	}
	return out, nil
}

// admit checks, before any write, that the runner's model may write each
// family that todo's missing outputs go to (provenance.Admit), and removes
// the synthetic files a real program is about to replace (with their
// manifest entries), since step programs skip files that exist. A family
// made by another model is a *ConfigError carrying the one-line message.
// It returns the fingerprint admitted (zero when the runner reports none).
func (e *Engine) admit(ctx context.Context, req StepRequest, todo []SeqItem, synth map[string]bool) (provenance.Fingerprint, error) {
	f, ok := e.Runner.(fingerprinter)
	if !ok || len(todo) == 0 {
		return provenance.Fingerprint{}, nil
	}
	fp, err := f.Fingerprint(ctx, req.StepKey, req.Log)
	if err != nil {
		return fp, err
	}
	return fp, e.admitFamilies(req, fp, todo, synth)
}

// recheck is the check before each batch of a resident server: a server
// restarted since the step was admitted (it crashed, or was stopped when
// idle) may have loaded other weights. Its ready line's fingerprint is
// compared with the admitted one (no process is started: Pool.Ready finds
// the running server, or starts the one the batch would start anyway), and
// a different one is admitted afresh, so it is refused like any other.
func (e *Engine) recheck(ctx context.Context, req StepRequest, admitted provenance.Fingerprint, items []SeqItem) error {
	r, ok := e.Runner.(*CommandRunner)
	if !ok || admitted.IsZero() || r.Pool == nil {
		return nil
	}
	tmpl, ok := r.Settings.Servers[req.StepKey]
	if !ok {
		return nil
	}
	spec := r.serverSpec(req.StepKey, tmpl)
	info, err := r.Pool.Ready(ctx, spec, func(l string) { req.Log.Printf("%s", l) })
	if err != nil {
		return r.serverErr(ctx, req.StepKey, err)
	}
	fp, ok := provenance.Parse(info["fingerprint"])
	if ok {
		if err := checkClaim(req.StepKey, fp); err != nil {
			return err
		}
	}
	if !ok {
		// A server that reports no fingerprint was admitted under its
		// command line's files (Fingerprint): a restart may have loaded
		// changed ones, so they are identified again (sums are remembered
		// by path, size and mtime: no re-read of unchanged weights).
		model, _ := info["model"].(string)
		if fp, err = ProgramFingerprint(spec.Argv, model); err != nil {
			return err
		}
	}
	if fp.ID() == admitted.ID() {
		return nil
	}
	req.Log.Printf("FINGERPRINT_CHANGED job_id=%s step=%s from=%s to=%s (the step server restarted)", req.JobID, req.StepKey, admitted.ID(), fp.ID())
	return e.admitFamilies(req, fp, items, nil)
}

// admitFamilies admits fp for the families of items' missing outputs and
// replaces the synthetic ones (synth).
func (e *Engine) admitFamilies(req StepRequest, fp provenance.Fingerprint, todo []SeqItem, synth map[string]bool) error {
	dirs := map[string]map[string]string{} // dir → path → seq id
	for _, it := range todo {
		for _, p := range it.MissingOutputs {
			d := filepath.Dir(p)
			if dirs[d] == nil {
				dirs[d] = map[string]string{}
			}
			dirs[d][p] = it.SeqID
		}
	}
	for _, d := range slices.Sorted(maps.Keys(dirs)) {
		fam := FamilyName(e.layout(), d)
		var suffix string
		for p := range dirs[d] {
			suffix = filepath.Ext(p)
			break
		}
		v, err := provenance.AdmitWith(d, fam, fp, func() error { return flagUnlistedSynthetic(d, suffix) })
		if err != nil {
			var me *provenance.MismatchError
			if errors.As(err, &me) {
				req.Log.Printf("FINGERPRINT_MISMATCH job_id=%s step=%s %s", req.JobID, req.StepKey, err)
				e.Log.Warn("family refused", "step", req.StepKey, "family", fam, "recorded", me.Recorded, "host", me.Writer)
				return &ConfigError{Msg: err.Error()}
			}
			return err
		}
		req.Log.Printf("FINGERPRINT job_id=%s step=%s family=%s fingerprint=%s verdict=%s", req.JobID, req.StepKey, fam, fp.ForFamily(fam).ID(), v)
		var remove []string
		for p, sid := range dirs[d] {
			if !synth[p] {
				continue
			}
			if err := os.Remove(p); err != nil && !errors.Is(err, os.ErrNotExist) {
				return fmt.Errorf("replace synthetic file: %w", err)
			}
			remove = append(remove, sid)
		}
		if len(remove) > 0 {
			sort.Strings(remove)
			req.Log.Printf("SYNTHETIC_REPLACED job_id=%s step=%s family=%s files=%d", req.JobID, req.StepKey, fam, len(remove))
			if err := embedding.MergeManifest(d, nil, remove); err != nil {
				return err
			}
		}
	}
	return nil
}

// flagUnlistedSynthetic flags in dir's manifest, as synthetic, every
// artefact `<sid><suffix>` that the manifest does not list. It runs when a
// real writer takes over a family recorded as all synthetic: a synthetic
// writer killed between renaming its files and merging their manifest
// entries left files that only the old record said were synthetic, and the
// new record would otherwise present them as the real model's.
func flagUnlistedSynthetic(dir, suffix string) error {
	if suffix == "" {
		return nil
	}
	ents, err := os.ReadDir(dir)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil
		}
		return err
	}
	listed := embedding.ReadManifest(dir)
	var commits []embedding.Commit
	for _, e := range ents {
		name := e.Name()
		sid, ok := strings.CutSuffix(name, suffix)
		if !ok || sid == "" || strings.HasPrefix(name, ".") || !e.Type().IsRegular() {
			continue
		}
		if _, ok := listed[sid]; ok {
			continue
		}
		info, err := e.Info()
		if err != nil {
			continue
		}
		commits = append(commits, embedding.Commit{SeqID: sid, Suffix: suffix, Bytes: info.Size(), Synthetic: true})
	}
	return embedding.MergeManifest(dir, commits, nil)
}

// EnvMediaRootID names, in a step program's environment, the media root's
// identity this host found at start (mediaroot): the program creates
// folders under the root only while its marker holds that id.
const EnvMediaRootID = "KINFLOW_MEDIA_ROOT_ID"

// mediaRootIDEnv is EnvMediaRootID=<id> when this process opened the root
// at mediaRoot and adopted its identity; nothing otherwise (a scratch
// root, a test).
func mediaRootIDEnv(mediaRoot string) []string {
	if r := mediaroot.Lookup(mediaRoot); r != nil {
		if id := r.ID(); id != "" {
			return []string{EnvMediaRootID + "=" + id}
		}
	}
	return nil
}

// recordKeyEnv names the record key's file for a step program, so that the
// records it writes carry their code (none without a key): a record
// without one would be set aside by any job that planned on the file before
// this host recorded it after the batch.
func recordKeyEnv() []string {
	if f := embedding.RecordKeyFile(); f != "" {
		return []string{embedding.EnvRecordKeyFile + "=" + f}
	}
	return nil
}

// serverSpec is the resident server's spec for step (tmpl is its
// GPU_EMBED_STEP_SERVER_* template).
func (r *CommandRunner) serverSpec(step string, tmpl []string) stepserver.Spec {
	rep := strings.NewReplacer("{step_key}", step, "{media_root}", r.MediaRoot)
	argv := make([]string, len(tmpl))
	for i, t := range tmpl {
		argv[i] = rep.Replace(t)
	}
	env := append(append([]string(nil), r.Settings.ProgramEnv...),
		"KINFLOW_STEP_KEY="+step,
		"KINFLOW_MEDIA_ROOT="+r.MediaRoot,
	)
	env = append(env, mediaRootIDEnv(r.MediaRoot)...)
	env = append(env, recordKeyEnv()...)
	return stepserver.Spec{Key: step, Argv: argv, Env: env}
}
