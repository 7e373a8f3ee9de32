package main

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/activities"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/store"
)

// checkRow is one of the method check's fixed rows: a real enzyme and a
// substrate it turns over, with the reaction for full-reaction methods.
type checkRow struct {
	name, seq, substrate, substrates, products string
}

// checkRows are the rows every method check predicts.
var checkRows = []checkRow{
	{
		// Escherichia coli dihydrofolate reductase (FolA), 159 residues.
		name:       "DHFR/dihydrofolate",
		seq:        "MISLIAALAVDRVIGMENAMPWNLPADLAWFKRNTLNKPVIMGRHTWESIGRPLPGRKNIILSSQPGTDDRVTWVKSVDEAIAACGDVPEIMVIGGGRVYEQFLPKAQKLYLTHIDAEVEGDTHFPDYEPDDWESVFSEFHDADAQNSHSYCFEILERR",
		substrate:  "C1C(=NC2=C(N1)N=C(NC2=O)N)CNC3=CC=C(C=C3)C(=O)NC(CCC(=O)O)C(=O)O",
		substrates: "C1C(=NC2=C(N1)N=C(NC2=O)N)CNC3=CC=C(C=C3)C(=O)NC(CCC(=O)O)C(=O)O;[H+]",
		products:   "C1C(NC2=C(N1)N=C(NC2=O)N)CNC3=CC=C(C=C3)C(=O)NC(CCC(=O)O)C(=O)O",
	},
	{
		// Human carbonic anhydrase II, 260 residues: CO2 hydration.
		name:       "CA II/CO2",
		seq:        "MSHHWGYGKHNGPEHWHKDFPIAKGERQSPVDIDTHTAKYDPSLKPLSVSYDQATSLRILNNGHAFNVEFDDSQDKAVLKGGPLDGTYRLIQFHFHWGSLDGQGSEHTVDKKKYAAELHLVHWNTKYGDFGKAVQQPDGLAVLGIFLKVGSAKPGLQKVVDVLDSIKTKGKSADFTNFDPRGLLPESLDYWTYPGSLTTPPLLECVTWIVLKEPISVSSEQVLKFRKLNFNGEGEPEELMVDNWRPAQPLKNRQIKASFK",
		substrate:  "O=C=O",
		substrates: "O=C=O;O",
		products:   "OC(=O)[O-];[H+]",
	},
	{
		// TEM-1 beta-lactamase, 286 residues: ampicillin hydrolysis.
		name:       "TEM-1/ampicillin",
		seq:        "MSIQHFRVALIPFFAAFCLPVFAHPETLVKVKDAEDQLGARVGYIELDLNSGKILESFRPEERFPMMSTFKVLLCGAVLSRIDAGQEQLGRRIHYSQNDLVEYSPVTEKHLTDGMTVRELCSAAITMSDNTAANLLLTTIGGPKELTAFLHNMGDHVTRLDRWEPELNEAIPNDERDTTMPVAMATTLRKLLTGELLTLASRQQLIDWMEADKVAGPLLRSALPAGWFIADKSGAGERGSRGIIAALGPDGKPSRIVVIYTTGSQATMDERNRQIAEIGASLIKHW",
		substrate:  "CC1(C(N2C(S1)C(C2=O)NC(=O)C(C3=CC=CC=C3)N)C(=O)O)C",
		substrates: "CC1(C(N2C(S1)C(C2=O)NC(=O)C(C3=CC=CC=C3)N)C(=O)O)C;O",
		products:   "CC1(C(NC(S1)C(C(=O)O)NC(=O)C(C2=CC=CC=C2)N)C(=O)O)C",
	},
}

// defaultMethodCheckTimeout bounds one method's run over one target.
const defaultMethodCheckTimeout = 10 * time.Minute

// methodCheck is one check of the configured method programs.
type methodCheck struct {
	cfg     *config.Config
	cat     *methods.Catalogue
	layout  *embedding.Layout
	st      *store.Store
	log     *slog.Logger
	timeout time.Duration
}

// methodCheckResult is one method's check over one target.
type methodCheckResult struct {
	Key    string
	Target methods.Target
	OK     bool
	Rows   int
	Took   time.Duration
	// Cause is why it failed; Note is said of a pass (rows without a value).
	Cause, Note string
}

// runMethodsCheck is `kinflow methods check [KEY…]`.
func runMethodsCheck(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("methods check", stderr)
	timeout := fs.Duration("timeout", defaultMethodCheckTimeout, "how long one method's program may run for one target")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow methods check [--timeout D] [KEY…]")
		fs.PrintDefaults()
	}
	keys, err := parseWithPositionals(fs, args)
	if err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr, "methods-check")
	if cfg.PredictionEngine != "command" {
		fmt.Fprintf(stdout, "note: KINFLOW_PREDICTION_ENGINE is %s: jobs do not run these programs\n", cfg.PredictionEngine)
	}
	failed, total, err := checkMethods(ctx, cfg, log, keys, *timeout, stdout)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d method check(s) failed", failed, total)
	}
	return nil
}

// checkMethods checks keys (none: every method with a command) on cfg's
// catalogue, printing one line per method and target; it returns how many
// failed of how many ran. An unknown key is a usage error.
func checkMethods(ctx context.Context, cfg *config.Config, log *slog.Logger, keys []string, timeout time.Duration, out io.Writer) (int, int, error) {
	cat, err := methods.Load(cfg.MethodsFile)
	if err != nil {
		return 0, 0, err
	}
	var descs []*methods.Descriptor
	for _, k := range keys {
		d, ok := cat.Get(k)
		if !ok {
			return 0, 0, usageError{fmt.Sprintf("unknown method %q (known: %s)", k, strings.Join(cat.Keys(), ", "))}
		}
		descs = append(descs, d)
	}
	if len(keys) == 0 {
		for _, d := range cat.All() {
			if d.Command != nil {
				descs = append(descs, d)
			}
		}
		if len(descs) == 0 {
			fmt.Fprintln(out, "FAIL no method has a command configured (KINFLOW_METHODS_FILE)")
			return 1, 1, nil
		}
	}
	layout, err := embedding.LayoutFromConfig(cfg)
	if err != nil {
		return 0, 0, err
	}
	st, err := openStore(ctx, cfg)
	if err != nil {
		return 0, 0, err
	}
	defer st.Close()
	c := &methodCheck{cfg: cfg, cat: cat, layout: layout, st: st, log: log, timeout: timeout}
	failed, total := 0, 0
	for _, d := range descs {
		if d.Command == nil {
			fmt.Fprintf(out, "FAIL %s: no command configured\n", d.Key)
			failed++
			total++
			continue
		}
		for _, t := range d.Supports {
			r := c.run(ctx, d, t, total)
			total++
			if r.OK {
				note := ""
				if r.Note != "" {
					note = "; " + r.Note
				}
				fmt.Fprintf(out, "ok   %s %s (%d rows, %.1f s%s)\n", r.Key, r.Target, r.Rows, r.Took.Seconds(), note)
				continue
			}
			failed++
			fmt.Fprintf(out, "FAIL %s %s: %s\n", r.Key, r.Target, r.Cause)
			if ctx.Err() != nil {
				return failed, total, ctx.Err()
			}
		}
	}
	return failed, total, nil
}

// run checks d's program over target t in a scratch stage folder of its
// own, under a fresh job id in the media root's jobs/ (removed after).
func (c *methodCheck) run(ctx context.Context, d *methods.Descriptor, t methods.Target, index int) methodCheckResult {
	res := methodCheckResult{Key: d.Key, Target: t}
	fail := func(format string, a ...any) methodCheckResult {
		res.Cause = fmt.Sprintf(format, a...)
		return res
	}
	rows, err := checkEngineRows(d)
	if err != nil {
		return fail("%v", err)
	}
	res.Rows = len(rows)
	vars := activities.CommandVars(c.cfg)
	if missing := missingFiles(d, vars); len(missing) > 0 {
		return fail("missing file: %s", strings.Join(missing, "; "))
	}
	var b [6]byte
	_, _ = rand.Read(b[:])
	jobID := "methods-check-" + hex.EncodeToString(b[:])
	jobDir, err := jobfiles.Dir(c.cfg.MediaRoot, jobID)
	if err != nil {
		return fail("%v", err)
	}
	dir, _ := jobfiles.StageDir(c.cfg.MediaRoot, jobID, index)
	if err := mediaroot.MkdirAll(dir, 0o755); err != nil {
		return fail("scratch folder: %v", err)
	}
	defer os.RemoveAll(jobDir)

	seqs := make([]string, len(rows))
	for k := range rows {
		seqs[k] = rows[k].Seq
	}
	// The ids of kinflow's id store, as a stage's rows get them; a check
	// counts no use.
	ids, err := c.st.AssignSeqIDs(ctx, seqs, false)
	if err != nil {
		return fail("sequence ids: %v", err)
	}
	if d.RowSeqID {
		for k := range rows {
			rows[k].SeqID = ids[k]
		}
	}
	if err := activities.WriteSeqmapFile(ctx, c.cfg.MediaRoot, string(t), d, rows, ids); err != nil {
		return fail("seqmap file: %v", err)
	}
	folders := c.sharedFolders(d, t)
	before := snapshotFolders(c.layout.SequenceInfo(), folders)

	var unset []string
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	vals, reasons, err := methods.RunCommand(rctx, d, methods.CommandRequest{
		JobID: jobID, Target: string(t), Canonicalize: true, Rows: rows, Dir: dir,
		Vars: vars, Env: activities.CommandEnv(), Chem: newChemistry(c.log),
		Unset:  func(msgs []string) { unset = msgs },
		Folder: c.layout.FolderOf,
	})
	res.Took = time.Since(start)
	after := snapshotFolders(c.layout.SequenceInfo(), folders)

	// The run's own failure first, then what it left unset, then what
	// it did to the shared files.
	var causes []string
	if err != nil {
		causes = append(causes, engineCause(err, rctx, ctx, c.timeout, dir))
	} else if cause, note := judgeAnswers(d.OutputOf(t), vals, reasons); cause != "" {
		causes = append(causes, cause)
	} else {
		res.Note = note
	}
	if len(unset) > 0 {
		causes = append(causes, "unset variable: "+strings.Join(unset, "; "))
	}
	if changed := compareSnapshots(before, after); changed != "" {
		causes = append(causes, changed)
	}
	if len(causes) > 0 {
		return fail("%s", strings.Join(causes, "; "))
	}
	res.OK = true
	return res
}

// checkEngineRows are the check's rows with the kwargs of d's columns.
func checkEngineRows(d *methods.Descriptor) ([]methods.EngineRow, error) {
	out := make([]methods.EngineRow, len(checkRows))
	for k, r := range checkRows {
		out[k] = methods.EngineRow{Seq: r.seq, Kwargs: map[string]string{}}
		for _, ck := range d.ColToKwarg {
			var v string
			switch ck.Column {
			case "Substrate":
				v = r.substrate
			case "Substrates":
				v = r.substrates
				if d.InputFormat != methods.InputMulti {
					v = r.substrate
				}
			case "Products":
				v = r.products
			default:
				return nil, fmt.Errorf("the check has no sample value for column %q", ck.Column)
			}
			out[k].Kwargs[ck.Kwarg] = v
		}
	}
	return out, nil
}

// missingFiles are the interpreter, script, program and configured
// command.paths entries of d that do not exist.
func missingFiles(d *methods.Descriptor, vars map[string]string) []string {
	cmd := d.Command
	var out []string
	resolve := func(p string) string {
		if p != "" && !filepath.IsAbs(p) && cmd.WorkDir != "" {
			return filepath.Join(cmd.WorkDir, p)
		}
		return p
	}
	exists := func(what, p string) {
		if p == "" {
			return
		}
		if !strings.Contains(p, "/") {
			if _, err := exec.LookPath(p); err != nil {
				out = append(out, fmt.Sprintf("%s %s not found in PATH", what, p))
			}
			return
		}
		if _, err := os.Stat(resolve(p)); err != nil {
			out = append(out, fmt.Sprintf("%s %s does not exist", what, p))
		}
	}
	if cmd.WorkDir != "" {
		if _, err := os.Stat(cmd.WorkDir); err != nil {
			out = append(out, fmt.Sprintf("command.workdir %s does not exist", cmd.WorkDir))
		}
	}
	exists("command.python", cmd.Python)
	if cmd.Script != "" {
		if _, err := os.Stat(resolve(cmd.Script)); err != nil {
			out = append(out, fmt.Sprintf("command.script %s does not exist", cmd.Script))
		}
	}
	if argv := cmd.Render(d.FileContract, vars); len(argv) > 0 && argv[0] != cmd.Python && len(cmd.Argv) > 0 {
		exists("program", argv[0])
	}
	for _, k := range slices.Sorted(maps.Keys(cmd.Paths)) {
		if _, err := os.Stat(resolve(cmd.Paths[k])); err != nil {
			out = append(out, fmt.Sprintf("command.paths %s %s does not exist", k, cmd.Paths[k]))
		}
	}
	return out
}

// engineCause names why RunCommand failed: a timeout, a crash with its
// exit status and the last lines it wrote on stderr, a program that could
// not start, or what the engine refused in its output.
func engineCause(err error, rctx, ctx context.Context, timeout time.Duration, dir string) string {
	tail := stderrTail(filepath.Join(dir, "engine.log"), 5)
	withTail := func(s string) string {
		if len(tail) > 0 {
			return s + "; stderr: " + strings.Join(tail, " | ")
		}
		return s
	}
	if errors.Is(rctx.Err(), context.DeadlineExceeded) && ctx.Err() == nil {
		return withTail(fmt.Sprintf("timeout: the program ran past %s", timeout))
	}
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		status := ee.String()
		if ws, ok := ee.Sys().(syscall.WaitStatus); ok && ws.Exited() {
			status = fmt.Sprintf("exit status %d", ws.ExitStatus())
		}
		return withTail("crash: " + status)
	}
	if errors.Is(err, fs.ErrNotExist) || errors.Is(err, exec.ErrNotFound) {
		return "missing file: " + err.Error()
	}
	var me *methods.EngineError
	if errors.As(err, &me) {
		// The engine's row-count messages: "X produced 1 prediction(s)
		// for 3 input(s)." (and uncertainties alike).
		if strings.Contains(me.Msg, " prediction(s) for ") || strings.Contains(me.Msg, " uncertainties for ") {
			return "wrong row count: " + me.Msg
		}
		return withTail("output refused: " + err.Error())
	}
	return err.Error()
}

// stderrTail is the last n stderr lines of an engine log, without their
// time stamps.
func stderrTail(path string, n int) []string {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil
	}
	var out []string
	for _, line := range strings.Split(string(data), "\n") {
		if _, rest, ok := strings.Cut(line, " [stderr] "); ok {
			out = append(out, strings.TrimSpace(rest))
		}
	}
	if len(out) > n {
		out = out[len(out)-n:]
	}
	return out
}

// judgeAnswers checks the program's answers against the declared form: an
// answer Convert refuses fails the check, and so do rows that all lack a
// value. A pass may note the rows without one.
func judgeAnswers(form methods.Output, vals []*float64, reasons map[int]string) (cause, note string) {
	invalid := 0
	first := ""
	for k, v := range vals {
		reason, given := reasons[k]
		switch {
		case given:
		case v == nil:
			reason = methods.ReasonNoPrediction
		default:
			if _, bad := form.Convert(*v); bad != "" {
				return fmt.Sprintf("output not in its declared form (%s): row %d: %s", form.Form, k, bad), ""
			}
			continue
		}
		if invalid == 0 {
			first = fmt.Sprintf("row %d: %s", k, reason)
		}
		invalid++
	}
	switch {
	case len(vals) > 0 && invalid == len(vals):
		return "every row invalid; first: " + first, ""
	case invalid > 0:
		return "", fmt.Sprintf("%d row(s) without a value, first: %s", invalid, first)
	}
	return "", ""
}

// sharedFolders are the folders under sequence_info/ of the families d's
// planner profile uses for t, and of the embeddings it names that are
// folders there, relative to sequence_info.
func (c *methodCheck) sharedFolders(d *methods.Descriptor, t methods.Target) []string {
	seen := map[string]bool{}
	var out []string
	add := func(rel string) {
		rel = filepath.ToSlash(filepath.Clean(rel))
		if rel == "." || rel == ".." || strings.HasPrefix(rel, "../") || filepath.IsAbs(rel) || seen[rel] {
			return
		}
		seen[rel] = true
		out = append(out, rel)
	}
	if d.Profile != methods.ProfileNone {
		steps, err := c.layout.ProfileSteps(d.Profile, t)
		if err == nil {
			for _, s := range steps {
				for _, f := range s.Families {
					add(c.layout.Folder(f))
				}
			}
		} else if p, ok := embedding.MethodEParameter(t); ok && d.Profile == methods.ProfileMethodEEmbed {
			// No checkpoints found: every model key's folder of the target.
			add(c.layout.Folders.Folder(embedding.FamilyMethodEESM2Prefix + "/" + p))
		}
	}
	for _, e := range d.EmbeddingsUsed {
		// A family's name becomes its folder under the operator's naming.
		if e = c.layout.Folders.Folder(e); e == "" {
			continue
		}
		if fi, err := os.Stat(filepath.Join(c.layout.SequenceInfo(), filepath.FromSlash(e))); err == nil && fi.IsDir() {
			add(e)
		}
	}
	sort.Strings(out)
	return out
}

// fileStamp is what a snapshot keeps of a file.
type fileStamp struct {
	size  int64
	mtime time.Time
	ino   uint64
}

// snapshotFolders stamps every file under the folders (relative to root),
// by path relative to root.
func snapshotFolders(root string, folders []string) map[string]fileStamp {
	out := map[string]fileStamp{}
	for _, rel := range folders {
		_ = filepath.WalkDir(filepath.Join(root, filepath.FromSlash(rel)), func(p string, e fs.DirEntry, err error) error {
			if err != nil || e.IsDir() {
				return nil
			}
			fi, err := e.Info()
			if err != nil {
				return nil
			}
			s := fileStamp{size: fi.Size(), mtime: fi.ModTime()}
			if st, ok := fi.Sys().(*syscall.Stat_t); ok {
				s.ino = uint64(st.Ino)
			}
			if r, err := filepath.Rel(root, p); err == nil {
				out[filepath.ToSlash(r)] = s
			}
			return nil
		})
	}
	return out
}

// compareSnapshots says which files of before are gone or changed in
// after (at most a few names each); empty when none.
func compareSnapshots(before, after map[string]fileStamp) string {
	var gone, changed []string
	for p, b := range before {
		a, ok := after[p]
		switch {
		case !ok:
			gone = append(gone, p)
		case a != b:
			changed = append(changed, p)
		}
	}
	list := func(names []string) string {
		sort.Strings(names)
		s := strings.Join(names[:min(3, len(names))], ", ")
		if len(names) > 3 {
			s += fmt.Sprintf(" and %d more", len(names)-3)
		}
		return s
	}
	var parts []string
	if len(gone) > 0 {
		parts = append(parts, fmt.Sprintf("shared file deleted: %d file(s) under sequence_info removed: %s", len(gone), list(gone)))
	}
	if len(changed) > 0 {
		parts = append(parts, fmt.Sprintf("shared file written: %d file(s) under sequence_info changed: %s", len(changed), list(changed)))
	}
	return strings.Join(parts, "; ")
}
