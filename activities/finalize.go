package activities

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/experimental"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/units"
	"github.com/kinflow/kinflow/internal/usermsg"
)

// syntheticExtraInfo is the Extra Info cell of every synthetic value.
const syntheticExtraInfo = "synthetic backend: stand-in number, not a prediction"

// Finalize ends the job: on success it writes output.csv (WIRE §3) and marks
// the job Completed; on failure it marks it Failed with the message. Either
// way the rows that got no prediction are refunded (kinflow difference 8),
// and so are the rows whose every prediction came from the prediction cache
// (they cost the service nothing: issue 28).
// It is idempotent: a finished job is left as it is.
func (a *Activities) Finalize(ctx context.Context, in FinalizeInput) (FinalizeResult, error) {
	job, err := a.Store.Job(ctx, in.JobID)
	if err != nil {
		return FinalizeResult{}, err
	}
	if job.Status == store.JobCompleted || job.Status == store.JobFailed {
		return FinalizeResult{Status: job.Status, Refunded: job.RefundedRows}, nil
	}
	now := time.Now().UTC()
	if in.Failed {
		var refund store.Refund
		if out, err := a.assemble(job); err == nil {
			refund = out.refund(job.RequestedRows)
		} else {
			refund.Rows = job.RequestedRows
		}
		if store.UnavailableText(in.Message) {
			// Longer than KINFLOW_OUTAGE_RIDE_OUT_SECONDS without the
			// database (issue 33): say so, without its address.
			in.Message = DatabaseUnavailableMessage
			refund = store.Refund{Rows: job.RequestedRows}
		}
		if fsutil.NoSpaceText(in.Message) {
			// The disk filled (issue 33): the owner gets no result, so
			// every row is given back, and the message says why without
			// the server's paths.
			in.Message = StorageFullMessage
			refund = store.Refund{Rows: job.RequestedRows}
		}
		if _, err := a.writeJobProvenance(job); err != nil {
			a.Log.Warn("job provenance", "job_id", job.ID, "error", err)
		}
		msg := in.Message
		if strings.TrimSpace(msg) == "" {
			msg = "The prediction failed with an unknown error."
		}
		// The job's message is shown to its user: the failing part named,
		// no connection string or address (the full text is logged here,
		// with the job id).
		if _, err := a.Store.FinishJob(ctx, job.ID, store.JobFailed, usermsg.Redact(msg), refund, a.Config.PredictionEngine == "synthetic", "", now); err != nil {
			return FinalizeResult{}, err
		}
		a.Log.Info("job failed", "job_id", job.ID, "error", msg, "refunded", refund.Rows, "refunded_cached", refund.Cached)
		return FinalizeResult{Status: store.JobFailed, Refunded: refund.Rows}, nil
	}

	out, err := a.assemble(job)
	if err != nil {
		return FinalizeResult{}, err
	}
	dir, err := a.jobDir(job.ID)
	if err != nil {
		return FinalizeResult{}, err
	}
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, "output.csv"), out.csv, 0o644); err != nil {
		return FinalizeResult{}, err
	}
	if err := a.noteUnappliedAnnotations(ctx, job, out.annotations); err != nil {
		return FinalizeResult{}, err
	}
	if _, err := a.writeJobProvenance(job); err != nil {
		return FinalizeResult{}, err
	}
	a.recordCachedRows(ctx, job, out)
	refund := out.refund(job.RequestedRows)
	if _, err := a.Store.FinishJob(ctx, job.ID, store.JobCompleted, out.skipSummary, refund, out.synthetic, "jobs/"+job.ID+"/output.csv", now); err != nil {
		return FinalizeResult{}, err
	}
	a.Log.Info("job completed", "job_id", job.ID, "rows", out.rows, "predicted", out.fullyPredicted, "refunded", refund.Rows, "refunded_cached", refund.Cached)
	return FinalizeResult{Status: store.JobCompleted, Refunded: refund.Rows}, nil
}

// recordCachedRows adds the job's fully predicted rows to the cached-rows
// ledger the quota check at submit reads (predcache.RowsHeld): their units
// are in the prediction cache now. Only with a prediction cache wired; a
// failed write is logged, the job stands.
func (a *Activities) recordCachedRows(ctx context.Context, job *store.Job, out *assembled) {
	if a.PredCache == nil || len(out.cachedRows) == 0 {
		return
	}
	version := func(m string) string {
		if d, ok := a.Catalogue.Get(m); ok {
			return d.ModelVersion
		}
		return ""
	}
	specs := predcache.RowSpecs(out.targets, out.methods, version, job.CanonicalizeSubstrates, job.HandleLongSequences)
	if err := predcache.RecordJobRows(context.WithoutCancel(ctx), a.Store, specs, out.columns, out.cachedRows, time.Now()); err != nil {
		a.Log.Warn("cached rows ledger write failed", "job_id", job.ID, "error", err)
	}
}
// DatabaseUnavailableMessage is a job's message when a step failed because
// the application database stayed unreachable past the ride-out.
const DatabaseUnavailableMessage = "database unavailable: the server's database could not be reached for longer than it waits. Its rows were refunded; please submit it again later."

// StorageFullMessage is a job's message when it failed because the media
// root (or the database's disk) was full: the reason "storage full".
const StorageFullMessage = "storage full: the server ran out of disk space while running this job. Its rows were refunded; please submit it again later."

// noteUnappliedAnnotations reports, in the message of each stage whose
// target asked for them, a similarity dataset or experimental table that is
// not configured on this server (WIRE-CONTRACT difference 18: reported as
// such, never silently blank cells). A stage's own message wins.
func (a *Activities) noteUnappliedAnnotations(ctx context.Context, job *store.Job, an annotations) error {
	stages, err := a.Store.JobStages(ctx, job.ID)
	if err != nil {
		return err
	}
	for _, st := range stages {
		var notes []string
		// Not-configured states are written only for jobs that asked.
		if st.Target == "kcat" && an.sim.State == AnnotationNotConfigured {
			notes = append(notes, "Similarity columns left blank: "+an.sim.Message)
		}
		if et, ok := an.exp.Targets[st.Target]; ok && et.State == AnnotationNotConfigured {
			notes = append(notes, "Experimental values not applied: "+et.Message)
		}
		if len(notes) == 0 || st.Message != "" {
			continue
		}
		if err := a.Store.UpdateStage(ctx, job.ID, st.Index, map[string]any{"message": strings.Join(notes, " ")}); err != nil {
			return err
		}
	}
	return nil
}

type assembled struct {
	// annotations are the similarity and experimental results it applied.
	annotations    annotations
	csv            []byte
	rows           int
	fullyPredicted int
	// fullyCached counts the fully predicted rows whose every prediction
	// unit was served from the prediction cache.
	fullyCached int
	// cachedRows are the cells of each fully predicted row whose units
	// all went to the engine or the cache (so the cache now holds them),
	// and columns the input's columns: the cached-rows ledger (issue 36).
	cachedRows  [][]string
	columns     []string
	targets     []string
	methods     map[string]string
	skipSummary string
	synthetic   bool
}

// refund is what the job gives back of its requested rows: the rows
// without a full prediction and the rows served wholly from the cache.
func (r *assembled) refund(requested int) store.Refund {
	cached := min(r.fullyCached, requested)
	return store.Refund{Rows: min(requested, max(0, requested-r.fullyPredicted)+cached), Cached: cached}
}

// assemble builds output.csv from the input and every stage's predictions
// (WIRE §3.1–3.2). A stage without predictions (a failed job) leaves its
// cells blank.
func (a *Activities) assemble(job *store.Job) (*assembled, error) {
	dir, err := a.jobDir(job.ID)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(filepath.Join(dir, "input.csv"))
	if err != nil {
		return nil, fmt.Errorf("read input of job %s: %w", job.ID, err)
	}
	table, err := input.ParseCSV(f, 0)
	f.Close()
	if err != nil {
		return nil, fmt.Errorf("read input of job %s: %w", job.ID, err)
	}
	var targets []string
	_ = json.Unmarshal([]byte(job.Targets), &targets)
	var chosen map[string]any
	_ = json.Unmarshal([]byte(job.Methods), &chosen)

	n := len(table.Rows)
	type triple struct {
		valueCol string
		target   string
		display  string
		sr       stageRows
		pred     stagePredictions
		has      bool
		// unc is true when the method gives uncertainties: the result
		// then has its uncertainty columns.
		unc bool
		// first[r] is the index of row r's first unit in sr.Units.
		first []int
	}
	triples := make([]triple, len(targets))
	res := &assembled{rows: n, columns: table.Columns, targets: targets, methods: map[string]string{}}
	for _, t := range targets {
		res.methods[t], _ = chosen[t].(string)
	}
	for i, t := range targets {
		key, _ := chosen[t].(string)
		col, display, unc := "kcat (1/s)", key, false
		if d, ok := a.Catalogue.Get(key); ok {
			col, display, unc = d.OutputCols[methods.Target(t)], d.DisplayName, d.Uncertainty
		}
		tr := triple{valueCol: col, target: t, display: display, unc: unc}
		if sr, err := a.loadStageRowsLite(job.ID, i); err == nil && len(sr.Shapes) == n {
			tr.sr = sr
			sd, _ := a.stageDir(job.ID, i)
			if fsutil.ReadJSON(filepath.Join(sd, "pred.json"), &tr.pred) == nil && upgradePredictions(&tr.pred, sr) {
				tr.has = true
				res.synthetic = res.synthetic || tr.pred.Synthetic
				tr.first = make([]int, n+1)
				k := 0
				for r := 0; r < n; r++ {
					tr.first[r] = k
					for k < len(sr.Units) && sr.Units[k].Row == r {
						k++
					}
				}
				tr.first[n] = k
			}
		}
		triples[i] = tr
	}
	// Cross-target rule (WIRE §13.3): only a sequence-level skip blanks a
	// row in every target; any other failure blanks its own target only.
	skip := make([]string, n)
	for _, tr := range triples {
		if !tr.has {
			continue
		}
		for r := 0; r < n; r++ {
			if sh := tr.sr.Shapes[r]; sh.SequenceSkip && sh.Skip != "" {
				skip[r] = sh.Skip
			}
		}
	}

	generated := map[string]bool{}
	var header []string
	for _, tr := range triples {
		for _, c := range []string{tr.valueCol, "Source " + tr.target, "Extra Info " + tr.target} {
			header = append(header, c)
			generated[c] = true
		}
	}
	var inputCols []int
	for c, name := range table.Columns {
		if !generated[name] {
			header = append(header, name)
			inputCols = append(inputCols, c)
		}
	}
	simCols := 0
	if job.IncludeSimilarityColumns && len(targets) > 0 {
		for _, t := range targets {
			if t == "kcat" {
				key, _ := chosen["kcat"].(string)
				header = append(header, "mean similarity to "+key+" training data", "max similarity to "+key+" training data")
				simCols = 2
			}
		}
	}

	// Uncertainty columns (issue 28) come after every other column, so
	// that the positions an older client reads do not move.
	for _, tr := range triples {
		if tr.unc {
			header = append(header, UncertaintyColumns(tr.target)...)
		}
	}
	uncCells := make([]*units.Uncertainty, len(triples))

	// Similarity columns and experimental values (similarity.go), written
	// by the annotation activities when the job asked for them.
	an := a.readAnnotations(dir)
	res.annotations = an

	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	_ = w.Write(header)
	record := make([]string, 0, len(header))
	skipped := map[string][]int{}
	for r := 0; r < n; r++ {
		record = record[:0]
		full := true
		// fromCache stays true while every unit of the row that went to
		// the engine or the cache (not skipped before it) came from the cache.
		fromCache, sent := true, false
		failed := skip[r]
		kcatSelected := -1
		clear(uncCells)
		for ti, tr := range triples {
			var cell units.Cell
			legacy := false
			var model *float64
			if !tr.has {
				fromCache = false
			}
			if tr.has {
				shape := tr.sr.Shapes[r]
				lo, hi := tr.first[r], tr.first[r+1]
				for k := lo; k < hi; k++ {
					if tr.sr.Units[k].Skip != "" {
						continue
					}
					sent = true
					if tr.pred.Results[k].Cached == nil {
						fromCache = false
					}
				}
				legacy = !tr.sr.CandidateMode && !shape.PerSubstrate
				if legacy && hi-lo == 1 {
					model = tr.pred.Results[lo].Value
				}
				opts := units.Options{CandidateMode: tr.sr.CandidateMode}
				if tr.pred.Synthetic {
					opts.LegacyExtra = syntheticExtraInfo
				}
				cell = units.Reduce(tr.target, shape, tr.sr.Units[lo:hi], tr.pred.Results[lo:hi], opts)
				if tr.target == "kcat" {
					kcatSelected = cell.Selected
				}
			}
			// Experimental values apply to rows of the older shape (one
			// sequence, one substrate input), looked up per row (§3.5).
			if legacy || !tr.has {
				if cells, ok := experimentalCells(an, tr.target, tr.display, r, model, skip[r]); ok {
					record = append(record, cells[:]...)
					continue
				}
			}
			switch {
			case skip[r] != "":
				record = append(record, "", skip[r], "")
				full = false
			case !tr.has:
				record = append(record, "", "", "")
				full = false
			default:
				record = append(record, cell.Value, cell.Source, cell.Extra)
				if cell.Filled && tr.unc {
					uncCells[ti] = cellUncertainty(tr.sr.Units[tr.first[r]:tr.first[r+1]], tr.pred.Results[tr.first[r]:tr.first[r+1]], cell.Selected)
				}
				if !cell.Filled {
					full = false
					if failed == "" {
						failed = cell.Source
					}
				}
			}
		}
		if failed != "" {
			skipped[failed] = append(skipped[failed], r)
		}
		if full && len(triples) > 0 {
			res.fullyPredicted++
			if fromCache && sent {
				res.fullyCached++
			}
			if sent {
				res.cachedRows = append(res.cachedRows, table.Rows[r].Cells)
			}
		}
		for _, c := range inputCols {
			record = append(record, table.Rows[r].Cells[c])
		}
		if simCols == 2 {
			mean, mx := an.similarityCells(r, kcatSelected)
			record = append(record, mean, mx)
		}
		for ti, tr := range triples {
			if tr.unc {
				record = append(record, uncertaintyCells(uncCells[ti])...)
			}
		}
		_ = w.Write(record)
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return nil, err
	}
	res.csv = buf.Bytes()
	if len(skipped) > 0 {
		type group struct {
			Rows   []int  `json:"rows"`
			Reason string `json:"reason"`
		}
		var groups []group
		for reason, rows := range skipped {
			groups = append(groups, group{Rows: rows, Reason: reason})
		}
		sort.Slice(groups, func(i, j int) bool { return groups[i].Rows[0] < groups[j].Rows[0] })
		b, _ := json.Marshal(groups)
		res.skipSummary = string(b)
	}
	return res, nil
}

// UncertaintyColumns are the result columns of a target's uncertainty, in
// order: the total and its aleatoric and epistemic parts, each a standard
// deviation of log10 of the value.
func UncertaintyColumns(target string) []string {
	return []string{
		"Uncertainty " + target + " total (SD, log10)",
		"Uncertainty " + target + " aleatoric (SD, log10)",
		"Uncertainty " + target + " epistemic (SD, log10)",
	}
}

// cellUncertainty is the uncertainty of a row's scalar value cell: the
// uncertainty of its one unit, or of the unit of the selected candidate
// (kcat's best candidate). An array cell (one value per substrate or
// candidate) has none in these columns.
func cellUncertainty(us []units.Unit, rs []units.Result, selected int) *units.Uncertainty {
	if len(us) == 1 {
		return rs[0].Uncertainty
	}
	if selected < 0 {
		return nil
	}
	var found *units.Uncertainty
	n := 0
	for k, u := range us {
		if u.Candidate == selected {
			found, n = rs[k].Uncertainty, n+1
		}
	}
	if n != 1 {
		return nil
	}
	return found
}

// uncertaintyCells are the three uncertainty cells of u (blank when nil or
// for a part the method did not give).
func uncertaintyCells(u *units.Uncertainty) []string {
	if u == nil {
		return []string{"", "", ""}
	}
	f := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	}
	return []string{f(&u.Total), f(u.Aleatoric), f(u.Epistemic)}
}

// experimentalCells are the (value, Source, Extra Info) cells of row r for
// target when the job's experimental look-up matched it (WIRE §3.5): the
// measured value, the table's Source label and the Extra Info sentences,
// which name the model's own value when it made one. A row skipped for its
// sequence keeps its skip reason instead (the cross-target rule blanks after
// the overrides).
func experimentalCells(an annotations, target, display string, r int, model *float64, skip string) ([3]string, bool) {
	if skip != "" {
		return [3]string{}, false
	}
	rec, ok := an.experimentalMatch(target, r)
	if !ok {
		return [3]string{}, false
	}
	param := experimental.Param(target)
	v, ok := rec.Value(param)
	if !ok {
		return [3]string{}, false
	}
	return [3]string{experimental.FormatFloat(v), rec.Source(), rec.ExtraInfo(param, model, display)}, true
}

// upgradePredictions fills p.Results from the per-row form an older worker
// wrote (one unit per valid row), and reports whether p matches sr's units.
func upgradePredictions(p *stagePredictions, sr stageRows) bool {
	if p.Results == nil && len(p.Values) == len(sr.Shapes) {
		p.Results = make([]units.Result, len(sr.Units))
		for i, u := range sr.Units {
			if v := p.Values[u.Row]; v != nil {
				p.Results[i] = units.Result{Value: v, Source: p.Source}
			} else if p.Reasons[u.Row] != "" {
				p.Results[i].Error = p.Reasons[u.Row]
			}
		}
	}
	return p.Results != nil && len(p.Results) == len(sr.Units)
}

// loadStageRowsLite reads a stage's rows.json for Finalize: the reductions
// need each unit's row, candidate and substrate, not the sequence sent or
// the engine arguments, which are most of the file (a 10,000-row job with
// three substrates per row has 33,000 units per stage).
func (a *Activities) loadStageRowsLite(jobID string, index int) (stageRows, error) {
	dir, err := a.stageDir(jobID, index)
	if err != nil {
		return stageRows{}, err
	}
	var lite struct {
		stageRows
		Units []struct {
			Row        int      `json:"row"`
			Candidate  int      `json:"candidate"`
			Substrate  int      `json:"substrate"`
			Substrates []string `json:"substrates"`
			Skip       string   `json:"skip"`
			Shared     bool     `json:"shared"`
		} `json:"units"`
	}
	if err := fsutil.ReadJSON(filepath.Join(dir, "rows.json"), &lite); err != nil {
		return stageRows{}, err
	}
	if lite.Shapes == nil && lite.Legacy != nil {
		// An older worker's per-row file: the full reader converts it.
		return a.loadStageRows(jobID, index)
	}
	sr := lite.stageRows
	sr.Units = make([]units.Unit, len(lite.Units))
	for i, u := range lite.Units {
		sr.Units[i] = units.Unit{Row: u.Row, Target: sr.Target, Candidate: u.Candidate, Substrate: u.Substrate, Substrates: u.Substrates, Skip: u.Skip, Shared: u.Shared}
	}
	units.RestoreInputs(sr.Inputs, sr.Units)
	sr.Inputs = nil
	return sr, nil
}
