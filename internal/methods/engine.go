package methods

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"maps"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/procio"
	"github.com/kinflow/kinflow/internal/units"
)

// ReasonNoPrediction is the skip reason of a row the program gave no value
// for, verbatim (the reference's text).
const ReasonNoPrediction = "Prediction could not be made"

// SubstrateForm is what a substrate text is converted to for an engine
// (canonicalizeSubstrates).
type SubstrateForm string

// Conversion forms.
const (
	// FormCanonicalSMILES is RDKit's canonical SMILES (engines C, F, A with
	// canonicalizeSubstrates=true).
	FormCanonicalSMILES SubstrateForm = "canonical"
	// FormSMILES is the raw text when it parses as SMILES, else a
	// non-canonical SMILES from the InChI (C, F, A with false).
	FormSMILES SubstrateForm = "smiles"
	// FormInChI is standard InChI (engine D with true).
	FormInChI SubstrateForm = "inchi"
)

// Chemistry converts substrate texts for the dedicated file contracts
// (input.Chemistry: RDKit, InChI through Open Babel). The second result
// says whether the helper did the conversion (else the texts come back
// trimmed but unchanged).
type Chemistry interface {
	Convert(ctx context.Context, form SubstrateForm, texts []string) ([]string, bool, error)
}

// EngineRow is one row handed to a method's program: its protein sequence
// and its kwargs (the method's CSV columns, by kwarg name).
type EngineRow struct {
	Seq    string
	Kwargs map[string]string
	// SeqID is the sequence's id in kinflow's id store, sent as the JSON
	// row's `seq_id` when the descriptor asks for it (RowSeqID).
	SeqID string
}

// CommandRequest is one run of a method's program by RunCommand.
type CommandRequest struct {
	JobID  string
	Target string
	// Canonicalize is the job's canonicalizeSubstrates option.
	Canonicalize bool
	// Rows are the rows to predict, in order.
	Rows []EngineRow
	// Dir is the stage's work folder: the input and output files and
	// engine.log are there.
	Dir string
	// Vars are the worker's placeholders for the command line and EnvPaths
	// (media, sequence_info, methode_checkpoint_root, methodj_cache_dir).
	Vars map[string]string
	// Folder is the absolute folder of a cache family by name, under the
	// worker's folder naming: it fills {folder:<family>} (nil: those stay
	// unfilled, and a variable holding one is left unset).
	Folder func(family string) (string, bool)
	// Env is the program's base environment (config.ChildEnv).
	Env []string
	// Chem converts substrates for the dedicated contracts.
	Chem Chemistry
	// Unconverted, when set, is called when a dedicated contract's
	// substrates or products were passed as given because the chemistry
	// helper could not convert them (none configured, or it failed): the
	// program then saw other text than a converting helper would send.
	Unconverted func()
	// Progress is called on each `Progress: x/y` line with x, and, for a
	// method whose progress is tqdm, with the rows its bars say are done
	// (may be nil; never called concurrently).
	// Keeping the activity alive while the program is silent is the
	// caller's (internal/heartbeat).
	Progress func(done int)
	// Unset, when set, is called before the program starts with the
	// env_paths variables left unset (commandEnv), one message each.
	Unset func(msgs []string)
	// Uncertainty, when set, is called for each row the program gave an
	// uncertainty for (the JSON contract's optional `uncertainties`).
	Uncertainty func(row int, u units.Uncertainty)
	// View, when set, is the stage's private view of the media root: every
	// placeholder value that names the media root or a path in its shared
	// cache is rendered into it (ViewVars), so the program never gets a
	// path to a file another job planned on.
	View *MediaView
}

// MediaView maps the media root onto a stage's private view of it.
type MediaView struct {
	// MediaRoot is the absolute media root.
	MediaRoot string
	// Root is the view's folder, which stands in for MediaRoot.
	Root string
	// Keep names placeholders left as they are: a program's own writable
	// cache that kinflow neither plans nor reads (method J's contact maps,
	// by default under sequence_info/).
	Keep map[string]bool
}

// ViewVars rewrites, in place, every value of vars that is the media root,
// its sequence_info/ folder or a path below that folder (the shared
// embedding cache: {media}, {sequence_info}, {folder:<family>}, an
// operator's path into the cache) into the same place under the view's
// root. Other paths under the media root (checkpoints an operator keeps
// there) are left as they are: they are not the shared cache.
func ViewVars(vars map[string]string, v MediaView) {
	root := filepath.Clean(v.MediaRoot)
	cache := filepath.Join(root, "sequence_info")
	for k, val := range vars {
		c := filepath.Clean(val)
		switch {
		case val == "" || v.Keep[k]:
		case c == root:
			vars[k] = v.Root
		case c == cache || strings.HasPrefix(c, cache+string(filepath.Separator)):
			vars[k] = filepath.Join(v.Root, strings.TrimPrefix(c, root))
		}
	}
}

// EngineError is a failure of a method's program or of its files that
// retrying cannot fix. Msg is for the user (no server paths); Err is the
// cause. The Predict activity reports it as a non-retryable
// PredictionFailed error.
type EngineError struct {
	Msg string
	Err error
}

// Error implements error.
func (e *EngineError) Error() string {
	if e.Err != nil {
		return e.Msg + ": " + e.Err.Error()
	}
	return e.Msg
}

// Unwrap returns the cause.
func (e *EngineError) Unwrap() error { return e.Err }

// EngineInput is the generic engine's input file (README.md, "Adding a method").
type EngineInput struct {
	Method   string              `json:"method"`
	Target   string              `json:"target"`
	PublicID string              `json:"public_id"`
	Rows     []map[string]string `json:"rows"`
	Params   map[string]any      `json:"params"`
}

var progressLine = regexp.MustCompile(`^Progress: (\d+)/(\d+)`)

// unsafeFileChars are the runs of characters replaced by "_" when a method
// key names an engine file, as the reference names them.
var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9_-]+`)

// RunCommand is the command engine: it runs d's own program with its file
// contract (README.md, "Adding a method")
// over req.Rows: an input file of the rows, an output file of predictions,
// `Progress: x/y` lines on stdout, stdout and stderr kept in
// req.Dir/engine.log. The program is killed, with every process it
// started, on cancellation of ctx. It returns one value (nil: no
// prediction) per row and the skip reasons the program gave by row index.
func RunCommand(ctx context.Context, d *Descriptor, req CommandRequest) ([]*float64, map[int]string, error) {
	if d.Command == nil {
		return nil, nil, &EngineError{Msg: fmt.Sprintf("%s has no command configured (KINFLOW_PREDICTION_ENGINE=command needs one in KINFLOW_METHODS_FILE)", d.DisplayName)}
	}
	// Every row must carry every mapped column ("Missing column required
	// for <L>: <col>" otherwise); the
	// submit checks make this a safeguard, not a user path.
	for _, ck := range d.ColToKwarg {
		for _, r := range req.Rows {
			if _, ok := r.Kwargs[ck.Kwarg]; !ok {
				return nil, nil, &EngineError{Msg: fmt.Sprintf("Missing column required for %s: %s", d.DisplayName, ck.Column)}
			}
		}
	}
	// The program's stdout and stderr are read in goroutines of their
	// own: progress is passed on one call at a time.
	var progMu sync.Mutex
	progress := func(done int) {
		if req.Progress != nil {
			progMu.Lock()
			defer progMu.Unlock()
			req.Progress(done)
		}
	}
	dir := req.Dir
	run, err := writeEngineInput(ctx, d, req)
	if err != nil {
		return nil, nil, err
	}
	defer os.Remove(run.in)
	defer os.Remove(run.out)
	if run.sent != nil && len(run.sent) == 0 {
		// The contract left every row out: nothing for the program.
		vals, reasons := run.spread(nil, nil, len(req.Rows))
		return vals, reasons, nil
	}
	// An output left by an attempt that died before reading it must not
	// pass for this run's.
	if err := os.Remove(run.out); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, nil, err
	}

	vars := commandVars(d, req, run)
	argv := d.Command.Render(d.FileContract, vars)
	if len(argv) == 0 {
		return nil, nil, &EngineError{Msg: d.DisplayName + " has an empty command"}
	}
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Dir = d.Command.WorkDir
	var unset []string
	cmd.Env, unset = commandEnv(d, req.Env, vars)
	if req.Unset != nil && len(unset) > 0 {
		req.Unset(unset)
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
	stdout := &procio.LineWriter{Line: func(line string) {
		logLine("stdout", line)
		if m := progressLine.FindStringSubmatch(line); m != nil {
			done, _ := strconv.Atoi(m[1])
			progress(done)
		}
	}}
	stderr := &procio.LineWriter{Line: func(line string) { logLine("stderr", line) }}
	cmd.Stdout, cmd.Stderr = stdout, stderr
	var bars []*tqdmScanner
	if d.Progress == ProgressTqdm {
		// Each stream has its own cursor; one fraction for the run, as a
		// count of its rows.
		est := &tqdmProgress{}
		onBar := func(b tqdmBar) {
			if f, ok := est.Add(b); ok {
				progress(int(f * float64(len(req.Rows))))
			}
		}
		bars = []*tqdmScanner{{Bar: onBar}, {Bar: onBar}}
		cmd.Stdout, cmd.Stderr = io.MultiWriter(stdout, bars[0]), io.MultiWriter(stderr, bars[1])
	}
	for _, n := range append(run.notes, unset...) {
		logLine("kinflow", n)
	}
	logLine("kinflow", "$ "+strings.Join(argv, " "))
	if err := cmd.Start(); err != nil {
		return nil, nil, &EngineError{Msg: d.DisplayName + " could not be started: " + filepath.Base(argv[0]), Err: err}
	}
	err = cmd.Wait()
	stdout.Flush()
	stderr.Flush()
	for _, b := range bars {
		b.Flush()
	}
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
		return nil, nil, exitError(d, err)
	}
	n := len(req.Rows)
	if run.sent != nil {
		n = len(run.sent)
	}
	vals, reasons, uncs, err := readEngineResult(run, n, d.DisplayName)
	if err != nil {
		return nil, nil, err
	}
	if run.sent != nil {
		vals, reasons = run.spread(vals, reasons, len(req.Rows))
		return vals, reasons, nil
	}
	if req.Uncertainty != nil {
		for i, u := range uncs {
			if u != nil && vals[i] != nil {
				req.Uncertainty(i, *u)
			}
		}
	}
	return vals, reasons, err
}

// commandVars are the placeholders of the method's command: kinflow's
// (python, script, input, output, target, job_id), the request's, the file
// contract's and the operator's command.paths, later ones winning.
func commandVars(d *Descriptor, req CommandRequest, run *engineRun) map[string]string {
	vars := map[string]string{
		"python": d.Command.Python, "script": d.Command.Script, "input": run.in, "output": run.out,
		"target": req.Target, "job_id": req.JobID,
	}
	maps.Copy(vars, req.Vars)
	if req.Folder != nil {
		for _, name := range d.FolderFamilies() {
			if dir, ok := req.Folder(name); ok {
				vars[FolderVar(name)] = dir
			}
		}
	}
	// kinflow's Cleanup deletes ephemeral artefacts once no running job
	// needs them; a script deleting them itself could pull files from
	// under another job.
	vars["methodf_delete_embeddings"] = "0"
	if kt := d.TargetKwargs[Target(req.Target)]["kinetics_type"]; kt != "" {
		vars["kinetics_type"] = kt
	}
	maps.Copy(vars, run.vars)
	maps.Copy(vars, d.Command.Paths)
	if req.View != nil {
		ViewVars(vars, *req.View)
	}
	return vars
}

// commandEnv is the program's environment: base, the method's path
// variables rendered (one with a placeholder left unfilled is left unset,
// and said in unset) and its extra variables.
func commandEnv(d *Descriptor, base []string, vars map[string]string) (env, unset []string) {
	env = slices.Clone(base)
	for _, ev := range d.EnvPaths {
		v := renderVars(ev.Value, vars)
		if m := unfilledPlaceholder.FindString(v); m != "" {
			// A path the operator did not configure: leave the variable
			// unset rather than hand the program a literal "{model_dir}".
			unset = append(unset, fmt.Sprintf("%s not set: %s has no value (set it in command.paths)", ev.Name, m))
			continue
		}
		env = append(env, ev.Name+"="+v)
	}
	for k, v := range d.Command.ExtraEnv {
		env = append(env, k+"="+v)
	}
	return env, unset
}

// exitError is the error of a program that failed: out of memory when it
// was killed (SIGKILL or status 137), else an internal error.
func exitError(d *Descriptor, err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && (ws.Signal() == syscall.SIGKILL || ws.ExitStatus() == 137) {
			return &EngineError{Msg: d.DisplayName + " prediction terminated due to insufficient memory.", Err: err}
		}
	}
	return &EngineError{Msg: d.DisplayName + " prediction failed with an internal error (see the job's engine log).", Err: err}
}

// unfilledPlaceholder finds a {name} or {folder:<family>} left in a
// rendered env value.
var unfilledPlaceholder = regexp.MustCompile(`\{[a-z0-9_]+\}|\{folder:[^{}\s]+\}`)

// readEngineOutput parses the generic engine's output: a bare list
// or {"predictions", "invalid_indices", "invalid_reasons"}, and kinflow's
// optional "uncertainties" (one entry per prediction, null or
// {"sd_total", "sd_aleatoric", "sd_epistemic"}: standard deviations of log10
// of the value, CatPred's own three numbers).
//
// When src is set, the uncertainties are read from the lists it names
// instead, and `uncertainties` is not read.
func readEngineOutput(path string, n int, name string, src *UncertaintySource) ([]*float64, map[int]string, []*units.Uncertainty, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, nil, nil, &EngineError{Msg: name + " output file could not be read.", Err: err}
	}
	defer f.Close()
	raw, err := io.ReadAll(f)
	if err != nil {
		return nil, nil, nil, &EngineError{Msg: name + " output file could not be read.", Err: err}
	}
	var obj struct {
		Predictions    []json.RawMessage `json:"predictions"`
		InvalidIndices []int             `json:"invalid_indices"`
		InvalidReasons map[string]string `json:"invalid_reasons"`
		Uncertainties  []json.RawMessage `json:"uncertainties"`
	}
	if err := json.Unmarshal(raw, &obj.Predictions); err != nil {
		if err := json.Unmarshal(raw, &obj); err != nil {
			return nil, nil, nil, &EngineError{Msg: name + " returned an invalid prediction result.", Err: err}
		}
	}
	if len(obj.Predictions) != n {
		return nil, nil, nil, &EngineError{Msg: fmt.Sprintf("%s produced %d prediction(s) for %d input(s).", name, len(obj.Predictions), n)}
	}
	var uncs []*units.Uncertainty
	if src != nil {
		var err error
		if uncs, err = src.read(raw, n, name); err != nil {
			return nil, nil, nil, err
		}
	} else if obj.Uncertainties != nil {
		if len(obj.Uncertainties) != n {
			return nil, nil, nil, &EngineError{Msg: fmt.Sprintf("%s produced %d uncertainties for %d input(s).", name, len(obj.Uncertainties), n)}
		}
		uncs = make([]*units.Uncertainty, n)
		for i, u := range obj.Uncertainties {
			uncs[i] = parseUncertainty(u)
		}
	}
	vals := make([]*float64, n)
	for i, p := range obj.Predictions {
		vals[i] = parsePrediction(p)
	}
	reasons := map[int]string{}
	for _, i := range obj.InvalidIndices {
		if i >= 0 && i < n {
			reasons[i] = ReasonNoPrediction
		}
	}
	for k, v := range obj.InvalidReasons {
		if i, err := strconv.Atoi(k); err == nil && i >= 0 && i < n && strings.TrimSpace(v) != "" {
			reasons[i] = v
		}
	}
	return vals, reasons, uncs, nil
}

// parseUncertainty reads one entry of "uncertainties": nil for null, an
// entry without a finite, non-negative sd_total, or anything unreadable. A
// part that is not a finite, non-negative number is left out.
func parseUncertainty(raw json.RawMessage) *units.Uncertainty {
	var e struct {
		Total     *float64 `json:"sd_total"`
		Aleatoric *float64 `json:"sd_aleatoric"`
		Epistemic *float64 `json:"sd_epistemic"`
	}
	if err := json.Unmarshal(raw, &e); err != nil || !finiteSD(e.Total) {
		return nil
	}
	u := &units.Uncertainty{Total: *e.Total}
	if finiteSD(e.Aleatoric) {
		u.Aleatoric = e.Aleatoric
	}
	if finiteSD(e.Epistemic) {
		u.Epistemic = e.Epistemic
	}
	return u
}

func finiteSD(v *float64) bool {
	return v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) && *v >= 0
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
