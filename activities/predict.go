package activities

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/procio"
)

// stagePredictions is MEDIA/jobs/<id>/work/stage-<i>/pred.json: one value
// (or null) and one skip reason per input row.
type stagePredictions struct {
	Values  []*float64 `json:"values"`
	Reasons []string   `json:"reasons"`
	// Source is the Source cell of a predicted row.
	Source    string `json:"source"`
	Synthetic bool   `json:"synthetic"`
}

// Reasons the engines give (WIRE §3.2, verbatim).
const reasonNoPrediction = "Prediction could not be made"

// Predict runs the stage's method over its valid rows with the configured
// engine and stores one value or skip reason per row.
func (a *Activities) Predict(ctx context.Context, ref StageRef) (PredictResult, error) {
	sr, err := a.loadStageRows(ref.JobID, ref.StageIndex)
	if err != nil {
		return PredictResult{}, err
	}
	d, ok := a.Catalogue.Get(sr.MethodKey)
	if !ok {
		return PredictResult{}, temporal.NewNonRetryableApplicationError("Invalid method selection: "+sr.MethodKey, ErrUnknownMethod, nil)
	}
	dir, err := a.stageDir(ref.JobID, ref.StageIndex)
	if err != nil {
		return PredictResult{}, err
	}
	predFile := filepath.Join(dir, "pred.json")
	var done stagePredictions
	if fsutil.ReadJSON(predFile, &done) == nil && len(done.Values) == len(sr.Rows) {
		// A retry after the file was written: nothing to redo.
		return countPredictions(done), nil
	}

	out := stagePredictions{Values: make([]*float64, len(sr.Rows)), Reasons: make([]string, len(sr.Rows))}
	var valid []int
	for i, r := range sr.Rows {
		if r.Reason != "" {
			out.Reasons[i] = r.Reason
			continue
		}
		valid = append(valid, i)
	}
	job, err := a.Store.Job(ctx, ref.JobID)
	if err != nil {
		return PredictResult{}, err
	}
	log := a.Log.With("job_id", ref.JobID, "stage", ref.StageIndex, "method", d.Key, "target", sr.Target, "step", "predict")
	log.Info("prediction started", "rows", len(sr.Rows), "valid", len(valid), "engine", a.Config.PredictionEngine)
	if len(valid) > 0 {
		var vals []*float64
		var reasons map[int]string
		if a.Config.PredictionEngine == "synthetic" {
			out.Synthetic = true
			out.Source = "Synthetic placeholder from " + d.DisplayName + " (not a prediction)"
			vals, err = a.predictSynthetic(ctx, ref, d, sr, valid)
		} else {
			out.Source = "Prediction from " + d.DisplayName
			vals, reasons, err = a.predictCommand(ctx, ref, job.CanonicalizeSubstrates, d, sr, valid, dir)
		}
		if err != nil {
			log.Warn("prediction failed", "error", err)
			return PredictResult{}, err
		}
		for k, i := range valid {
			out.Values[i] = vals[k]
			if vals[k] == nil {
				out.Reasons[i] = reasonNoPrediction
			}
			if r, ok := reasons[k]; ok {
				out.Values[i], out.Reasons[i] = nil, r
			}
		}
	}
	if err := fsutil.WriteJSONAtomic(predFile, out); err != nil {
		return PredictResult{}, err
	}
	res := countPredictions(out)
	log.Info("prediction done", "predicted", res.Predicted, "skipped", res.Skipped, "synthetic", res.Synthetic)
	if err := a.Store.UpdateStage(ctx, ref.JobID, ref.StageIndex, map[string]any{"predictions_made": res.Predicted}); err != nil {
		return res, err
	}
	err = a.Store.UpdateJob(ctx, ref.JobID, map[string]any{
		"total_predictions": len(valid), "predictions_made": res.Predicted, "invalid_rows": len(sr.Rows) - len(valid),
	})
	return res, err
}

func countPredictions(p stagePredictions) PredictResult {
	var r PredictResult
	for _, v := range p.Values {
		if v != nil {
			r.Predicted++
		} else {
			r.Skipped++
		}
	}
	r.Synthetic = p.Synthetic
	return r
}

// predictSynthetic is the embedded default engine. It reads nothing but
// checks, like a real method, that every artefact the row's plan expects is
// on disk, then derives a deterministic stand-in number from the method,
// target, sequence and substrate. Its output is flagged synthetic everywhere.
func (a *Activities) predictSynthetic(ctx context.Context, ref StageRef, d *methods.Descriptor, sr stageRows, valid []int) ([]*float64, error) {
	if err := a.checkArtefacts(ref); err != nil {
		return nil, err
	}
	lo, hi := syntheticRange(sr.Target)
	vals := make([]*float64, len(valid))
	for k, i := range valid {
		if k%500 == 0 {
			activity.RecordHeartbeat(ctx, k)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		r := sr.Rows[i]
		keys := make([]string, 0, len(r.Kwargs))
		for kw := range r.Kwargs {
			keys = append(keys, kw)
		}
		sort.Strings(keys)
		h := sha256.New()
		fmt.Fprintf(h, "%s|%s|%s", d.Key, sr.Target, r.Seq)
		for _, kw := range keys {
			fmt.Fprintf(h, "|%s=%s", kw, r.Kwargs[kw])
		}
		u := float64(binary.BigEndian.Uint64(h.Sum(nil)[:8])>>11) / float64(1<<53)
		v := math.Pow(10, lo+u*(hi-lo))
		v = math.Round(v*1e4) / 1e4
		vals[k] = &v
	}
	return vals, nil
}

// syntheticRange is the log10 range of stand-in values per target.
func syntheticRange(target string) (float64, float64) {
	switch target {
	case "Km":
		return -3, 2
	case "kcat/Km":
		return -1, 4
	}
	return -2, 3
}

// checkArtefacts fails when an artefact the stage's plan expects is missing:
// a prediction never runs on an incomplete cache.
func (a *Activities) checkArtefacts(ref StageRef) error {
	dir, err := a.stageDir(ref.JobID, ref.StageIndex)
	if err != nil {
		return err
	}
	var plan struct {
		Expected map[string][]string `json:"expected_paths_by_seq"`
	}
	if err := fsutil.ReadJSON(filepath.Join(dir, "plan.json"), &plan); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil // no plan: a method without shared-cache artefacts
		}
		return err
	}
	missing := 0
	for _, paths := range plan.Expected {
		for _, p := range paths {
			if _, err := os.Stat(p); err != nil {
				missing++
			}
		}
	}
	if missing > 0 {
		return fmt.Errorf("%d expected embedding files are missing before prediction", missing)
	}
	return nil
}

// engineInput is the generic engine's input file (WIRE §4.7).
type engineInput struct {
	Method   string              `json:"method"`
	Target   string              `json:"target"`
	PublicID string              `json:"public_id"`
	Rows     []map[string]string `json:"rows"`
	Params   map[string]any      `json:"params"`
}

var progressLine = regexp.MustCompile(`^Progress: (\d+)/(\d+)`)

// unsafeFileChars are the runs of characters replaced by "_" when a method
// key names an engine file (WIRE §4.7).
var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// predictCommand runs the method's own program with its file contract
// (WIRE §4.7 for the generic engine, §7.3 for the dedicated ones): an input
// file of the valid rows, an output file of predictions, `Progress: x/y`
// lines on stdout, stdout and stderr kept in the stage's engine.log. It is
// killed on cancellation or timeout.
func (a *Activities) predictCommand(ctx context.Context, ref StageRef, canonicalize bool, d *methods.Descriptor, sr stageRows, valid []int, dir string) ([]*float64, map[int]string, error) {
	if d.Command == nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(
			fmt.Sprintf("%s has no command configured (KINFLOW_PREDICTION_ENGINE=command needs one in KINFLOW_METHODS_FILE)", d.DisplayName), ErrPrediction, nil)
	}
	run, err := a.writeEngineInput(ctx, ref.JobID, canonicalize, d, sr, valid, dir)
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(run.in)
	defer os.Remove(run.out)
	// An output left by an attempt that died before reading it must not
	// pass for this run's.
	if err := os.Remove(run.out); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}

	vars := map[string]string{
		"python": d.Command.Python, "script": d.Command.Script, "input": run.in, "output": run.out,
		"target": sr.Target, "job_id": ref.JobID, "media": a.Config.MediaRoot,
		"sequence_info":           filepath.Join(a.Config.MediaRoot, "sequence_info"),
		"methode_checkpoint_root": a.Config.MethodECheckpointRoot,
		"methodj_cache_dir":       a.Config.MethodJCacheDir,
		// kinflow's Cleanup deletes ephemeral artefacts once no running job
		// needs them; a script deleting them itself could pull files from
		// under another job.
		"methodf_delete_embeddings": "0",
	}
	if kt := d.TargetKwargs[methods.Target(sr.Target)]["kinetics_type"]; kt != "" {
		vars["kinetics_type"] = kt
	}
	for k, v := range run.vars {
		vars[k] = v
	}
	for k, v := range d.Command.Paths {
		vars[k] = v
	}
	argv := d.Command.Render(d.FileContract, vars)
	if len(argv) == 0 {
		return nil, nil, temporal.NewNonRetryableApplicationError(d.DisplayName+" has an empty command", ErrPrediction, nil)
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = d.Command.WorkDir
	cmd.Env = config.ChildEnv(os.Environ())
	var unset []string
	for _, ev := range d.EnvPaths {
		v := renderVars(ev.Value, vars)
		if m := unfilledPlaceholder.FindString(v); m != "" {
			// A path the operator did not configure: leave the variable
			// unset rather than hand the program a literal "{model_dir}".
			unset = append(unset, fmt.Sprintf("%s not set: %s has no value (set it in command.paths)", ev.Name, m))
			continue
		}
		cmd.Env = append(cmd.Env, ev.Name+"="+v)
	}
	for k, v := range d.Command.ExtraEnv {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	// Its own process group, so cancellation kills the whole tree.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second

	logf, err := os.OpenFile(filepath.Join(dir, "engine.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, nil, err
	}
	defer logf.Close()
	var logMu sync.Mutex
	logLine := func(stream, line string) {
		logMu.Lock()
		defer logMu.Unlock()
		fmt.Fprintf(logf, "%s [%s] %s\n", time.Now().UTC().Format("2006-01-02T15:04:05.000000Z"), stream, line)
	}
	// Writers, not pipes we read: Wait then returns when the program exits
	// (plus at most WaitDelay), even if something it started holds its
	// output open, and a line of any length cannot stall the program.
	last := 0
	var lastWrite time.Time
	stdout := &procio.LineWriter{Line: func(line string) {
		logLine("stdout", line)
		if m := progressLine.FindStringSubmatch(line); m != nil {
			done, _ := strconv.Atoi(m[1])
			activity.RecordHeartbeat(ctx, done)
			// Progress is stored at most every half second, and only
			// when it moves forward.
			if done > last && time.Since(lastWrite) > 500*time.Millisecond {
				last, lastWrite = done, time.Now()
				_ = a.Store.UpdateStage(context.WithoutCancel(ctx), ref.JobID, ref.StageIndex, map[string]any{"predictions_made": done})
			}
		}
	}}
	stderr := &procio.LineWriter{Line: func(line string) { logLine("stderr", line) }}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	for _, n := range append(run.notes, unset...) {
		logLine("kinflow", n)
	}
	logLine("kinflow", "$ "+strings.Join(argv, " "))
	if err := cmd.Start(); err != nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(d.DisplayName+" could not be started: "+filepath.Base(argv[0]), ErrPrediction, err)
	}
	// Heartbeat while the program runs even if it prints nothing.
	stopBeat := make(chan struct{})
	go func() {
		t := time.NewTicker(10 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stopBeat:
				return
			case <-t.C:
				activity.RecordHeartbeat(ctx)
			}
		}
	}()
	err = cmd.Wait()
	close(stopBeat)
	stdout.Flush()
	stderr.Flush()
	if errors.Is(err, exec.ErrWaitDelay) {
		// The program exited cleanly; a process it left behind kept its
		// output open and was cut off.
		logLine("kinflow", "the program exited; output of processes it left behind was cut off")
		err = nil
	}
	if ctx.Err() != nil {
		return nil, nil, ctx.Err()
	}
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			if ws, ok := ee.Sys().(syscall.WaitStatus); ok && (ws.Signal() == syscall.SIGKILL || ws.ExitStatus() == 137) {
				return nil, nil, temporal.NewNonRetryableApplicationError(d.DisplayName+" prediction terminated due to insufficient memory.", ErrPrediction, err)
			}
		}
		return nil, nil, temporal.NewNonRetryableApplicationError(d.DisplayName+" prediction failed with an internal error (see the job's engine log).", ErrPrediction, err)
	}
	return readEngineResult(run, len(valid), d.DisplayName)
}

// unfilledPlaceholder finds a {name} left in a rendered env value.
var unfilledPlaceholder = regexp.MustCompile(`\{[a-z0-9_]+\}`)

// readEngineOutput parses the generic engine's output (WIRE §4.7): a bare list
// or {"predictions", "invalid_indices", "invalid_reasons"}.
func readEngineOutput(path string, n int, name string) ([]*float64, map[int]string, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(name+" output file could not be read.", ErrPrediction, err)
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, temporal.NewNonRetryableApplicationError(name+" output file could not be read.", ErrPrediction, err)
	}
	var obj struct {
		Predictions    []json.RawMessage `json:"predictions"`
		InvalidIndices []int             `json:"invalid_indices"`
		InvalidReasons map[string]string `json:"invalid_reasons"`
	}
	if err := json.Unmarshal(raw, &obj.Predictions); err != nil {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, nil, temporal.NewNonRetryableApplicationError(name+" output format is invalid.", ErrPrediction, err)
		}
	}
	if len(obj.Predictions) != n {
		return nil, nil, temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s produced %d prediction(s) for %d valid input row(s).", name, len(obj.Predictions), n), ErrPrediction, nil)
	}
	vals := make([]*float64, n)
	for i, p := range obj.Predictions {
		vals[i] = parsePrediction(p)
	}
	reasons := map[int]string{}
	for _, i := range obj.InvalidIndices {
		if i >= 0 && i < n {
			reasons[i] = reasonNoPrediction
		}
	}
	for k, v := range obj.InvalidReasons {
		if i, err := strconv.Atoi(k); err == nil && i >= 0 && i < n && strings.TrimSpace(v) != "" {
			reasons[i] = v
		}
	}
	return vals, reasons, nil
}

// parsePrediction reads one prediction; null, NaN, empty, "none" and "nan"
// count as missing.
func parsePrediction(raw json.RawMessage) *float64 {
	var v any
	if err := json.Unmarshal(raw, &v); err != nil {
		return nil
	}
	var f float64
	switch x := v.(type) {
	case float64:
		f = x
	case string:
		return parseCell(x)
	default:
		return nil
	}
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return nil
	}
	return &f
}

// renderVars replaces {name} placeholders in s.
func renderVars(s string, vars map[string]string) string {
	for k, v := range vars {
		s = strings.ReplaceAll(s, "{"+k+"}", v)
	}
	return s
}
