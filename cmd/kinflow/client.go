package main

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/kinflow/kinflow/internal/client"
	"github.com/kinflow/kinflow/internal/fsutil"
)

// Client subcommands: they talk to a running API over HTTP, never to the
// database. The base URL and the key come from --url/--key, else from
// KINFLOW_URL and KINFLOW_API_KEY.

const (
	envURL = "KINFLOW_URL"
	envKey = "KINFLOW_API_KEY"
)

// pollInterval paces --wait: client.Wait rides the API's long poll (one
// request per change, at most four a second, which keeps the bar lively)
// and polls once a second only against a server without it.
const pollInterval = time.Second

// clientFlags adds --url and --key to fs.
func clientFlags(fs *flag.FlagSet) (baseURL, key *string) {
	baseURL = fs.String("url", "", "API base URL (default $"+envURL+", else "+client.DefaultBaseURL+")")
	key = fs.String("key", "", "API key (default $"+envKey+")")
	return
}

func newClient(baseURL, key string) *client.Client {
	if baseURL == "" {
		baseURL = os.Getenv(envURL)
	}
	if key == "" {
		key = os.Getenv(envKey)
	}
	return client.New(baseURL, key)
}

// runKey is `kinflow key status|generate|revoke`.
func runKey(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && keyAdminCommands[args[0]] {
		return runKeyAdmin(ctx, args, stdout, stderr)
	}
	fs := newFlags("key", stderr)
	baseURL, _ := clientFlags(fs)
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow key status|generate|revoke [--url URL]")
		fmt.Fprintln(stderr, "       kinflow key limit KEY N|default, key weight KEY W|default, key usage, key block|unblock KEY (operator, on the database)")
		fmt.Fprintln(stderr, "  Keys belong to the caller's IP address: one active key per address.")
		fmt.Fprintln(stderr, "  generate prints the full key once, alone on stdout (KEY=$(kinflow key generate)).")
		fs.PrintDefaults()
	}
	pos, err := parseWithPositionals(fs, args)
	if err != nil {
		return err
	}
	if len(pos) != 1 {
		return usageError{"want one of: status, generate, revoke"}
	}
	c := newClient(*baseURL, "")
	switch pos[0] {
	case "status":
		st, err := c.KeyStatus(ctx)
		if err != nil {
			return err
		}
		if st.HasKey {
			fmt.Fprintf(stdout, "active key %s\n", st.KeySuffix)
		} else {
			fmt.Fprintln(stdout, "no active key for this address")
		}
		return nil
	case "generate":
		k, err := c.GenerateKey(ctx)
		if err != nil {
			return err
		}
		fmt.Fprintln(stdout, k.Key)
		fmt.Fprintln(stderr, k.Message)
		return nil
	case "revoke":
		if err := c.RevokeKey(ctx); err != nil {
			return err
		}
		fmt.Fprintln(stdout, "revoked")
		return nil
	default:
		return usageError{fmt.Sprintf("unknown key action %q: want status, generate or revoke", pos[0])}
	}
}

// runMethods is `kinflow methods`: the catalogue by target.
func runMethods(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && args[0] == "check" {
		return runMethodsCheck(ctx, args[1:], stdout, stderr)
	}
	fs := newFlags("methods", stderr)
	baseURL, _ := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print the catalogue as JSON")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() != 0 {
		return usageError{"no arguments expected"}
	}
	m, err := newClient(*baseURL, "").Methods(ctx)
	if err != nil {
		return err
	}
	if *asJSON {
		return writeJSON(stdout, m)
	}
	anyUncertainty := false
	for _, t := range m.PredictionTypes {
		fmt.Fprintf(stdout, "%s:\n", t)
		for _, d := range m.Methods[t] {
			// The mark column: which methods give an uncertainty with each
			// value, readable at a glance instead of at the line's end.
			mark := " "
			if d.Uncertainty != nil {
				mark, anyUncertainty = uncertaintyMark, true
			}
			limit := "no length limit"
			if d.MaxSeqLen != nil {
				limit = fmt.Sprintf("max %d residues", *d.MaxSeqLen)
			}
			input := ""
			if b := d.InputBehaviorByTarget[t]; b != "" {
				input = "; Substrates lists: " + b
			}
			if u := d.Uncertainty; u != nil {
				input += fmt.Sprintf("; gives uncertainty (%s: %s)", u.Measure, strings.Join(u.Parts, ", "))
			}
			if rc, ok := d.RangeClasses[t]; ok {
				input += fmt.Sprintf("; answers a range class, not a value (%d classes: %s)", len(rc.Classes), strings.Join(rc.Classes, " | "))
			}
			fmt.Fprintf(stdout, "  %-5s %s %-24s columns: %s; %s%s\n", d.ID, mark, d.DisplayName, strings.Join(d.Required, ", "), limit, input)
		}
	}
	if anyUncertainty {
		fmt.Fprintf(stdout, "%s: the method gives an uncertainty with each value (its Uncertainty columns in the result)\n", uncertaintyMark)
	}
	return nil
}

// uncertaintyMark marks, in `kinflow methods`, a method that gives an
// uncertainty (the catalogue's `uncertainty` object).
const uncertaintyMark = "±"

// readInput opens FILE ("-" is stdin) for upload.
func readInput(path string, stdin io.Reader) (name string, data []byte, err error) {
	if path == "-" {
		data, err = io.ReadAll(stdin)
		if err != nil {
			return "", nil, fmt.Errorf("read stdin: %w", err)
		}
		return "input.csv", data, nil
	}
	data, err = os.ReadFile(path)
	if err != nil {
		return "", nil, fmt.Errorf("read input: %w", err)
	}
	return filepath.Base(path), data, nil
}

// runValidate is `kinflow validate FILE`: exit 1 when any row is flagged.
func runValidate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("validate", stderr)
	baseURL, key := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print the API's report as JSON")
	var targets, methodsList listFlag
	fs.Var(&targets, "target", "report only the methods chosen: target (repeatable; paired in order with --method)")
	fs.Var(&methodsList, "method", "method id for the --target at the same position (repeatable)")
	methodsSpec := fs.String("methods", "", "targets and methods at once: kcat=B,Km=C (as for submit)")
	similarity := fs.Bool("similarity", false, "also compare the sequences with the training data (runSimilarity)")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow validate [--json] [--methods kcat=B,Km=C] [--similarity] FILE   (a .csv; - reads stdin)")
		fmt.Fprintln(stderr, "  Checks every row without submitting (no quota used); exit 1 when a row is flagged.")
		fmt.Fprintln(stderr, "  With --methods (or --target/--method) only the chosen methods' limits are reported.")
		fs.PrintDefaults()
	}
	arg, err := oneArg(fs, args, "FILE")
	if err != nil {
		return err
	}
	vopts := client.ValidateOptions{RunSimilarity: *similarity}
	if len(targets) > 0 || len(methodsList) > 0 || *methodsSpec != "" {
		vopts.Targets, vopts.Methods, err = selection(targets, methodsList, *methodsSpec)
		if err != nil {
			return err
		}
	}
	name, data, err := readInput(arg, os.Stdin)
	if err != nil {
		return err
	}
	rep, err := newClient(*baseURL, *key).Validate(ctx, name, bytes.NewReader(data), vopts)
	if err != nil {
		return err
	}
	if *asJSON {
		var v any
		_ = json.Unmarshal(rep.Raw, &v)
		if err := writeJSON(stdout, v); err != nil {
			return err
		}
	} else {
		printReport(stdout, rep)
	}
	if n := rep.Problems(); n > 0 {
		return fmt.Errorf("%d row problem(s) in %s", n, name)
	}
	return nil
}

func printReport(w io.Writer, rep *client.ValidateReport) {
	fmt.Fprintf(w, "%d rows\n", rep.RowCount)
	if rep.Messages != nil {
		// The server's own sentences, rows in order: the same wording as
		// the web page and the Python client.
		for _, m := range rep.Messages {
			fmt.Fprintln(w, m.Text)
		}
		if rep.Problems() == 0 {
			fmt.Fprintln(w, "no row problems")
		}
		return
	}
	for _, p := range rep.InvalidProteins {
		extra := ""
		if len(p.InvalidChars) > 0 {
			extra = " (" + strings.Join(p.InvalidChars, " ") + ")"
		}
		where := "protein"
		if p.Position > 0 {
			where = fmt.Sprintf("protein (candidate %d)", p.Position)
		}
		fmt.Fprintf(w, "row %d: %s: %s%s\n", p.Row, where, p.Reason, extra)
	}
	for _, s := range rep.InvalidSubstrates {
		if s.InvalidSubstrates != nil || s.InvalidProducts != nil {
			// A `Substrates` list: each bad token with its position.
			var toks []string
			add := func(kind string, issues []client.TokenIssue) {
				for _, t := range issues {
					v := "(empty list)"
					if t.Value != nil {
						v = *t.Value
					}
					if t.Position != nil {
						v = fmt.Sprintf("%s %d %s", kind, *t.Position, v)
					} else {
						v = kind + "s " + v
					}
					toks = append(toks, v)
				}
			}
			add("substrate", s.InvalidSubstrates)
			add("product", s.InvalidProducts)
			fmt.Fprintf(w, "row %d: substrates: %s: %s\n", s.Row, s.Reason, strings.Join(toks, "; "))
			continue
		}
		fmt.Fprintf(w, "row %d: substrate: %s: %v\n", s.Row, s.Reason, s.Value)
	}
	for _, k := range slices.Sorted(maps.Keys(rep.LengthViolations)) {
		if n := rep.LengthViolations[k]; n > 0 {
			fmt.Fprintf(w, "method %s: %d sequence(s) longer than its limit\n", k, n)
		}
	}
	if rep.Problems() == 0 {
		fmt.Fprintln(w, "no row problems")
	}
}

// listFlag collects a repeated flag.
type listFlag []string

func (l *listFlag) String() string     { return strings.Join(*l, ",") }
func (l *listFlag) Set(v string) error { *l = append(*l, v); return nil }

// selection turns --target/--method pairs and --methods into targets and a
// target→method map. Pairs match by position; --methods is
// "target=method,target=method".
func selection(targets, methodsList []string, methodsSpec string) ([]string, map[string]string, error) {
	sel := map[string]string{}
	var order []string
	add := func(t, m string) error {
		t, m = strings.TrimSpace(t), strings.TrimSpace(m)
		if t == "" || m == "" {
			return usageError{"empty target or method"}
		}
		if _, dup := sel[t]; dup {
			return usageError{fmt.Sprintf("target %q given twice", t)}
		}
		sel[t] = m
		order = append(order, t)
		return nil
	}
	if len(targets) != len(methodsList) {
		return nil, nil, usageError{fmt.Sprintf("%d --target but %d --method: give them in pairs (--target kcat --method B)", len(targets), len(methodsList))}
	}
	for i := range targets {
		if err := add(targets[i], methodsList[i]); err != nil {
			return nil, nil, err
		}
	}
	if methodsSpec != "" {
		for _, part := range strings.Split(methodsSpec, ",") {
			t, m, ok := strings.Cut(part, "=")
			if !ok {
				return nil, nil, usageError{fmt.Sprintf("--methods %q: want target=method pairs such as kcat=B,Km=C", methodsSpec)}
			}
			if err := add(t, m); err != nil {
				return nil, nil, err
			}
		}
	}
	if len(order) == 0 {
		return nil, nil, usageError{"choose what to predict: --target kcat --method B (repeatable), or --methods kcat=B,Km=C (`kinflow methods` lists them)"}
	}
	return order, sel, nil
}

// runSubmit is `kinflow submit FILE --target T --method M [--wait]`.
func runSubmit(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("submit", stderr)
	baseURL, key := clientFlags(fs)
	var targets, methodsList listFlag
	fs.Var(&targets, "target", "target to predict: kcat, Km or kcat/Km (repeatable; paired in order with --method)")
	fs.Var(&methodsList, "method", "method id for the --target at the same position (repeatable)")
	methodsSpec := fs.String("methods", "", "targets and methods at once: kcat=B,Km=C")
	wait := fs.Bool("wait", false, "wait for the job to finish, with a progress bar on stderr; exit 1 when it fails")
	out := fs.String("o", "", "with --wait: write the result CSV to this file")
	long := fs.String("long", "", "sequences longer than a method's limit: truncate (API default) or skip")
	canon := fs.String("canonicalize", "", "canonicalize substrates: true (API default) or false")
	similarity := fs.Bool("similarity", false, "include similarity columns (includeSimilarityColumns)")
	noGPU := fs.Bool("no-gpu", false, "skip the GPU precompute; embeddings are computed on the CPU worker (disableGpuPrecompute)")
	noCache := fs.Bool("no-prediction-cache", false, "predict every row afresh instead of reusing cached predictions (usePredictionCache=false)")
	bulk := fs.Bool("bulk", false, "submit as bulk work: served after interactive and normal jobs when the service is busy (priority=bulk)")
	idem := fs.String("idempotency-key", "", "Idempotency-Key of this submit (default: a new random one, resent on retries); rerun with the same key to get the same job, never a second")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow submit FILE --target T --method M [--target T2 --method M2] [--wait [-o OUT]]")
		fmt.Fprintln(stderr, "       kinflow submit FILE --methods kcat=B,Km=C [--wait]")
		fmt.Fprintln(stderr, "  Prints the job id on stdout. FILE is a .csv (- reads stdin).")
		fs.PrintDefaults()
	}
	arg, err := oneArg(fs, args, "FILE")
	if err != nil {
		return err
	}
	if *out != "" && !*wait {
		return usageError{"-o needs --wait"}
	}
	order, sel, err := selection(targets, methodsList, *methodsSpec)
	if err != nil {
		return err
	}
	opts := client.SubmitOptions{Targets: order, Methods: sel, IncludeSimilarityColumns: *similarity, DisableGPUPrecompute: *noGPU, IdempotencyKey: *idem}
	if *noCache {
		f := false
		opts.UsePredictionCache = &f
	}
	if *bulk {
		opts.Priority = "bulk"
	}
	switch *long {
	case "", "truncate", "skip":
		opts.HandleLongSequences = *long
	default:
		return usageError{fmt.Sprintf("--long %q: want truncate or skip", *long)}
	}
	switch *canon {
	case "":
	case "true", "false":
		b := *canon == "true"
		opts.CanonicalizeSubstrates = &b
	default:
		return usageError{fmt.Sprintf("--canonicalize %q: want true or false", *canon)}
	}
	name, data, err := readInput(arg, os.Stdin)
	if err != nil {
		return err
	}
	c := newClient(*baseURL, *key)
	job, err := c.Submit(ctx, name, bytes.NewReader(data), opts)
	if err != nil {
		return err
	}
	fmt.Fprintln(stdout, job.JobID)
	if !*wait {
		return nil
	}
	bar := newProgressBar(stderr)
	st, err := c.Wait(ctx, job.JobID, pollInterval, bar.update)
	bar.finish()
	if err != nil {
		return err
	}
	if st.Status == "Failed" {
		return fmt.Errorf("job %s failed: %s", st.JobID, st.Error)
	}
	if *out != "" {
		return writeResult(ctx, c, job.JobID, false, *out, stderr)
	}
	return nil
}

// runJobs is `kinflow jobs [--status S] [--limit N] [--all] [--json]`.
func runJobs(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("jobs", stderr)
	baseURL, key := clientFlags(fs)
	status := fs.String("status", "", "only jobs in this status: Pending, Processing, Completed or Failed (comma-separated for several)")
	limit := fs.Int("limit", 20, "jobs per page (1 to 100)")
	all := fs.Bool("all", false, "every page, not only the newest")
	asJSON := fs.Bool("json", false, "print the jobs as a JSON array")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow jobs [--status S] [--limit N] [--all] [--json]")
		fmt.Fprintln(stderr, "  Lists this key's jobs, newest first.")
		fs.PrintDefaults()
	}
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{"jobs takes no arguments"}
	}
	c := newClient(*baseURL, *key)
	var jobs []client.Job
	cursor := ""
	for {
		page, err := c.Jobs(ctx, *status, *limit, cursor)
		if err != nil {
			return err
		}
		jobs = append(jobs, page.Jobs...)
		if !*all || page.NextCursor == nil {
			break
		}
		cursor = *page.NextCursor
	}
	if *asJSON {
		if jobs == nil {
			jobs = []client.Job{}
		}
		return writeJSON(stdout, jobs)
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "JOB\tSTATUS\tTARGETS\tROWS\tSUBMITTED\tCOMPLETED\tTOOK")
	for _, j := range jobs {
		var tm []string
		for _, t := range j.Targets {
			tm = append(tm, t+"="+j.Methods[t])
		}
		done, took := "-", "-"
		if j.CompletedAt != nil {
			done = listTime(*j.CompletedAt)
			took = listDuration(j.SubmittedAt, *j.CompletedAt)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%d\t%s\t%s\t%s\n", j.JobID, j.Status, strings.Join(tm, ","), j.Rows, listTime(j.SubmittedAt), done, took)
	}
	return tw.Flush()
}

// listTime is an API time (ISO 8601 with microseconds) as `kinflow jobs`
// lists it: to the second, in UTC; a time it cannot read is shown as sent.
func listTime(s string) string {
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return s
	}
	return t.UTC().Format("2006-01-02 15:04:05Z")
}

// listDuration is how long a job took, submitted to completed, as `kinflow
// jobs` lists it: rounded to whole seconds ("1m54s", not the microseconds
// the API's times carry); "-" when either time cannot be read.
func listDuration(from, to string) string {
	a, errA := time.Parse(time.RFC3339Nano, from)
	b, errB := time.Parse(time.RFC3339Nano, to)
	if errA != nil || errB != nil {
		return "-"
	}
	return max(0, b.Sub(a)).Round(time.Second).String()
}

// runStatus is `kinflow status JOB`.
func runStatus(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("status", stderr)
	baseURL, key := clientFlags(fs)
	asJSON := fs.Bool("json", false, "print the API's status payload as JSON")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow status [--json] JOB")
		fs.PrintDefaults()
	}
	arg, err := oneArg(fs, args, "JOB id")
	if err != nil {
		return err
	}
	st, err := newClient(*baseURL, *key).Status(ctx, arg)
	if err != nil {
		return err
	}
	if *asJSON {
		var v any
		_ = json.Unmarshal(st.Raw, &v)
		return writeJSON(stdout, v)
	}
	fmt.Fprintf(stdout, "job %s: %s (%s)\n", st.JobID, st.Status, time.Duration(max(0, st.ElapsedSeconds))*time.Second)
	if st.Overall != nil {
		fmt.Fprintln(stdout, st.Overall.Text)
	}
	if st.QueuePosition != nil && st.Status == "Pending" {
		fmt.Fprintf(stdout, "queue position %d\n", *st.QueuePosition)
	}
	if st.Sharing != nil {
		fmt.Fprintf(stdout, "sharing: %s\n", st.Sharing.Text)
	}
	for _, s := range st.Stages {
		fmt.Fprintln(stdout, stageLine(s))
		if s.Message != "" {
			fmt.Fprintf(stdout, "  note: %s\n", s.Message)
		}
	}
	if n := st.Similarity; n != nil {
		fmt.Fprintf(stdout, "similarity: %s\n", n.Message)
	}
	if g := st.GPUPrecompute; g != nil && g.Reason != nil {
		fmt.Fprintf(stdout, "GPU precompute: %s\n", *g.Reason)
	}
	if st.Charge != nil {
		fmt.Fprintln(stdout, chargeLine(st.Charge))
	}
	if st.Error != "" {
		fmt.Fprintf(stdout, "error: %s\n", st.Error)
	}
	return nil
}

// chargeLine is what a finished job cost, as the Python client's status
// says it: "charged 10000 rows, refunded 10000 (10000 from the prediction
// cache): 0 rows from the daily quota".
func chargeLine(c *client.Charge) string {
	line := fmt.Sprintf("charged %d rows, refunded %d", c.RowsCharged, c.RowsRefunded)
	if c.CachedRowsRefunded > 0 {
		line += fmt.Sprintf(" (%d from the prediction cache)", c.CachedRowsRefunded)
	}
	return line + fmt.Sprintf(": %d rows from the daily quota", c.RowsCharged-c.RowsRefunded)
}

// stageLine is one stage of `kinflow status`: rows, sequences, then the
// embedding files as detail, then predictions.
func stageLine(s client.Stage) string {
	e := s.Embedding
	cached := ""
	if n := s.Prediction.PredictionsCached; n > 0 {
		cached = fmt.Sprintf(" (%d from the prediction cache)", n)
	}
	units := ""
	if s.Sequences != nil {
		emb := ""
		if s.SequencesEmbedded != nil {
			emb = fmt.Sprintf(", %d embedded", *s.SequencesEmbedded)
		}
		units = fmt.Sprintf(" %d rows, %d sequences%s;", s.Rows, *s.Sequences, emb)
	}
	took := ""
	if s.Seconds != nil {
		took = fmt.Sprintf("; %s", clock(*s.Seconds))
	}
	return fmt.Sprintf("stage %d %s·%s: %s;%s predictions %d/%d%s; embedding files %d/%d (cached %d, computed %d, remaining %d)%s",
		s.Index+1, s.Target, s.MethodKey, s.Status, units, s.Prediction.PredictionsMade, s.Prediction.PredictionsTotal, cached,
		e.CachedAlready+e.Computed, e.Total, e.CachedAlready, e.Computed, e.Remaining, took)
}

// runResult is `kinflow result JOB [-o FILE] [--json]`.
func runResult(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("result", stderr)
	baseURL, key := clientFlags(fs)
	asJSON := fs.Bool("json", false, "the JSON form instead of CSV")
	out := fs.String("o", "", "write to this file (atomically) instead of stdout")
	fs.Usage = func() {
		fmt.Fprintln(stderr, "usage: kinflow result JOB [-o FILE] [--json]")
		fmt.Fprintln(stderr, "  Fails (HTTP 409) until the job is Completed.")
		fs.PrintDefaults()
	}
	arg, err := oneArg(fs, args, "JOB id")
	if err != nil {
		return err
	}
	c := newClient(*baseURL, *key)
	if *out == "" {
		var buf bytes.Buffer
		if err := c.Result(ctx, arg, *asJSON, &buf); err != nil {
			return err
		}
		warnSynthetic(stderr, buf.Bytes())
		noteRanges(stderr, buf.Bytes())
		if _, err := stdout.Write(buf.Bytes()); err != nil {
			return err
		}
		noteColumns(ctx, c, arg, stderr)
		return nil
	}
	return writeResult(ctx, c, arg, *asJSON, *out, stderr)
}

// writeResult downloads a result into path atomically, so that a failed
// download never leaves a partial file behind.
func writeResult(ctx context.Context, c *client.Client, jobID string, asJSON bool, path string, stderr io.Writer) error {
	var buf bytes.Buffer
	if err := c.Result(ctx, jobID, asJSON, &buf); err != nil {
		return err
	}
	warnSynthetic(stderr, buf.Bytes())
	noteRanges(stderr, buf.Bytes())
	if err := fsutil.WriteFileAtomic(path, buf.Bytes(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	where := path
	if abs, err := filepath.Abs(path); err == nil {
		where = abs
	}
	// One line on stderr says how much was written and where, so that a
	// user who gave -o knows which file to open; stdout stays empty.
	fmt.Fprintf(stderr, "wrote %s to %s (%d bytes)\n", rowsWord(resultRows(buf.Bytes(), asJSON)), where, buf.Len())
	noteColumns(ctx, c, jobID, stderr)
	return nil
}

// resultRows counts the rows of a result: the JSON form's rowCount, or the
// CSV's records after its header (a quoted cell may hold a newline, so
// lines are not rows). -1 when the body cannot be read as either.
func resultRows(body []byte, asJSON bool) int {
	if asJSON {
		var r struct {
			RowCount *int `json:"rowCount"`
		}
		if json.Unmarshal(body, &r) != nil || r.RowCount == nil {
			return -1
		}
		return *r.RowCount
	}
	cr := csv.NewReader(bytes.NewReader(body))
	cr.FieldsPerRecord = -1
	n := -1 // the header is no row
	for {
		if _, err := cr.Read(); err == io.EOF {
			return max(n, 0)
		} else if err != nil {
			return -1
		}
		n++
	}
}

// rowsWord is "1 row", "3 rows", or "the result" for an unknown count.
func rowsWord(n int) string {
	switch {
	case n < 0:
		return "the result"
	case n == 1:
		return "1 row"
	}
	return fmt.Sprintf("%d rows", n)
}

// noteColumns tells the user on stderr what the similarity columns hold
// (unit: % identity), or why they are blank: a CSV has no room for it.
func noteColumns(ctx context.Context, c *client.Client, jobID string, stderr io.Writer) {
	st, err := c.Status(ctx, jobID)
	if err != nil || st.Similarity == nil {
		return
	}
	fmt.Fprintf(stderr, "note: %s\n", st.Similarity.Message)
}

// rangeMidpoint matches the column a range-class column puts its midpoint
// in ("Derived kcat range midpoint (1/s)").
var rangeMidpoint = regexp.MustCompile(`"?Derived ([^,"]+) range midpoint \(([^)"]*)\)"?`)

// noteRanges tells the user on stderr which targets of a result hold range
// classes: their cells are texts such as "1 to 10 s^-1", to be read as
// categories, never parsed as numbers.
func noteRanges(stderr io.Writer, result []byte) {
	head, _, _ := bytes.Cut(result, []byte("\n"))
	if bytes.HasPrefix(head, []byte("{")) {
		head = result // the JSON form: its "columns" list
	}
	seen := map[string]bool{}
	for _, m := range rangeMidpoint.FindAllSubmatch(head, -1) {
		if p := string(m[1]); !seen[p] {
			seen[p] = true
			fmt.Fprintf(stderr, "note: %s is given as a range class (e.g. \"1 to 10 s^-1\"), not a value and not a confidence interval; its class midpoint is in \"Derived %s range midpoint (%s)\"\n", p, p, m[2])
		}
	}
}

// syntheticMarker is how the synthetic prediction backend labels every
// number it makes (the Source column of each target).
var syntheticMarker = []byte("Synthetic placeholder")

// warnSynthetic tells the user on stderr when a result holds synthetic
// stand-in numbers, so that they are never mistaken for predictions.
func warnSynthetic(stderr io.Writer, result []byte) {
	if bytes.Contains(result, syntheticMarker) {
		fmt.Fprintln(stderr, "note: this result comes from kinflow's synthetic backend: its numbers are stand-ins, not predictions (see the Source columns)")
	}
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return fmt.Errorf("write JSON: %w", err)
	}
	return nil
}

// progressBar draws a job's progress on stderr: redrawn in place on a
// terminal, one line per change otherwise (logs, CI).
type progressBar struct {
	w    io.Writer
	tty  bool
	last string
}

func newProgressBar(w io.Writer) *progressBar {
	tty := false
	if f, ok := w.(*os.File); ok {
		if fi, err := f.Stat(); err == nil && fi.Mode()&os.ModeCharDevice != 0 {
			tty = true
		}
	}
	return &progressBar{w: w, tty: tty}
}

// barWidth fits the bar and its counters in 100 columns.
const barWidth = 24

// progressLine renders one status: the job's percentage, elapsed time and
// ETA from the server's `overall` object, then where it is in the user's
// units (sequences embedded, predictions made). A server without `overall`
// gets the older line (the running stage's files or predictions).
func progressLine(st *client.Status) string {
	o := st.Overall
	if o == nil {
		return legacyProgressLine(st)
	}
	frac := min(1, max(0, o.Percent/100))
	n := int(frac * barWidth)
	bar := strings.Repeat("#", n) + strings.Repeat("-", barWidth-n)
	eta := "-"
	if o.ETASeconds != nil {
		eta = clock(*o.ETASeconds)
	}
	where := ""
	if o.Stage != nil && *o.Stage-1 < len(st.Stages) && o.Phase != "completed" && o.Phase != "queued" {
		s := st.Stages[*o.Stage-1]
		where = fmt.Sprintf("  stage %d/%d %s·%s", *o.Stage, o.Stages, s.Target, s.MethodKey)
		switch {
		case o.Phase == "embedding" && s.Sequences != nil && s.SequencesEmbedded != nil:
			where += fmt.Sprintf(" embedding %d/%d sequences", *s.SequencesEmbedded, *s.Sequences)
		case o.Phase == "predicting":
			where += fmt.Sprintf(" predicting %d/%d", s.Prediction.PredictionsMade, s.Prediction.PredictionsTotal)
		}
	}
	if o.Phase == "queued" && st.QueuePosition != nil {
		where = fmt.Sprintf("  queue position %d", *st.QueuePosition)
	}
	return fmt.Sprintf("%-10s [%s] %5.1f%%  elapsed %s  ETA %s  %d rows%s", st.Status, bar, o.Percent, clock(st.ElapsedSeconds), eta, o.Rows, where)
}

// clock writes seconds as m:ss, or h:mm:ss from an hour.
func clock(sec int64) string {
	sec = max(0, sec)
	if sec >= 3600 {
		return fmt.Sprintf("%d:%02d:%02d", sec/3600, sec%3600/60, sec%60)
	}
	return fmt.Sprintf("%d:%02d", sec/60, sec%60)
}

// legacyProgressLine is the bar for a server without `overall`: the
// running stage's embedding files when it has any, else its predictions.
func legacyProgressLine(st *client.Status) string {
	done, total, what := 0, 0, "predictions"
	if e := st.Progress.Embedding; e != nil && e.Total > 0 && (st.Status != "Completed" || e.Remaining == 0) {
		done, total, what = e.CachedAlready+e.Computed, e.Total, "embeddings"
	} else {
		done, total = st.Progress.PredictionsMade, st.Progress.PredictionsTotal
	}
	if st.Status == "Completed" && total > 0 {
		done = total
	}
	frac := 0.0
	if total > 0 {
		frac = min(1, float64(done)/float64(total))
	}
	n := int(frac * barWidth)
	bar := strings.Repeat("#", n) + strings.Repeat("-", barWidth-n)
	stage := ""
	if st.ActiveStageIndex != nil && *st.ActiveStageIndex < len(st.Stages) {
		s := st.Stages[*st.ActiveStageIndex]
		stage = fmt.Sprintf("  stage %d/%d %s·%s", s.Index+1, st.TotalStageCount, s.Target, s.MethodKey)
	}
	return fmt.Sprintf("%-9s [%s] %d/%d %s%s", st.Status, bar, done, total, what, stage)
}

func (b *progressBar) update(st *client.Status) {
	line := progressLine(st)
	if line == b.last {
		return
	}
	b.last = line
	if b.tty {
		fmt.Fprintf(b.w, "\r%s\x1b[K", line)
		return
	}
	fmt.Fprintln(b.w, line)
}

func (b *progressBar) finish() {
	if b.tty && b.last != "" {
		fmt.Fprintln(b.w)
	}
}
