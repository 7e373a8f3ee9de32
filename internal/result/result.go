// Package result builds a job's result table: its header, one
// row per input row and the job's summary (rows fully predicted, rows
// served wholly from the prediction cache, the skip summary), from the
// job's input and every stage's rows.json and pred.json, with the
// similarity and experimental annotations. Finalize writes it as
// output.csv; the api names its columns from here.
package result

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

// SyntheticExtraInfo is the Extra Info cell of every synthetic value.
const SyntheticExtraInfo = "synthetic backend: stand-in number, not a prediction"

// Catalogue looks methods up by key (*methods.Catalogue).
type Catalogue interface {
	Get(key string) (*methods.Descriptor, bool)
}

// Job is what a result is built from.
type Job struct {
	MediaRoot string
	ID        string
	// Targets are the job's targets in stage order; Methods the method
	// key chosen for each.
	Targets []string
	Methods map[string]string
	// IncludeSimilarity: the job asked for the similarity columns.
	IncludeSimilarity bool
	Catalogue         Catalogue
}

// Table is a job's result: output.csv's bytes and what the job's
// bookkeeping needs from it.
type Table struct {
	Header []string
	CSV    []byte
	// Rows is the number of input rows; FullyPredicted those with a value
	// in every target; FullyCached those of them whose every prediction
	// unit was served from the prediction cache.
	Rows, FullyPredicted, FullyCached int
	// CachedRows are the cells of each fully predicted row whose units
	// all went to the engine or the cache (so the cache now holds them),
	// and Columns the input's columns: the cached-rows ledger, which lets
	// a later submit of the same rows be admitted without their quota.
	CachedRows [][]string
	Columns    []string
	// SkipSummary is the JSON list of {rows, reason} groups of the rows
	// left without a value ("" when none).
	SkipSummary string
	Synthetic   bool
	// Annotations are the similarity and experimental results it applied.
	Annotations jobfiles.Annotations
}

// Refund is what the job gives back of its requested rows: the rows
// without a full prediction and the rows served wholly from the cache
// (cached counts the latter).
func (t *Table) Refund(requested int) (rows, cached int) {
	cached = min(t.FullyCached, requested)
	return min(requested, max(0, requested-t.FullyPredicted)+cached), cached
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

// SimilarityColumns are the (mean, max) similarity columns of the kcat
// method method.
func SimilarityColumns(method string) []string {
	return []string{"mean similarity to " + method + " training data", "max similarity to " + method + " training data"}
}

// TargetColumns are a target's three generated columns: its value column
// (the method's), Source and Extra Info.
func TargetColumns(valueCol, target string) []string {
	return []string{valueCol, "Source " + target, "Extra Info " + target}
}

// Build builds the result from the input and every stage's predictions
// (each target's value, Source and Extra Info cells, then the input's
// columns). A stage without predictions (a failed job) leaves its
// cells blank.
func Build(j Job) (*Table, error) {
	dir, err := jobfiles.Dir(j.MediaRoot, j.ID)
	if err != nil {
		return nil, err
	}
	table, err := readInput(filepath.Join(dir, jobfiles.InputFile))
	if err != nil {
		return nil, fmt.Errorf("read input of job %s: %w", j.ID, err)
	}
	b := &builder{job: j, table: table, an: jobfiles.ReadAnnotations(dir), skipped: map[string][]int{}}
	b.out = &Table{Rows: len(table.Rows), Columns: table.Columns, Annotations: b.an}
	b.loadStages()
	b.sequenceSkips()
	b.header()
	if err := b.write(); err != nil {
		return nil, err
	}
	if err := b.summary(); err != nil {
		return nil, err
	}
	return b.out, nil
}

func readInput(path string) (*input.Table, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return input.ParseCSV(f, 0)
}

// stage is one target's stage as the result reads it.
type stage struct {
	target, valueCol, display string
	// unc is true when the method gives uncertainties: the result then
	// has its uncertainty columns.
	unc bool
	// rng is the method's range classes for the target (a numeric form
	// when it answers values): the result then has the target's range
	// midpoint and experimental columns.
	rng  methods.Output
	rows jobfiles.StageRows
	pred jobfiles.StagePredictions
	// has: the stage's rows and predictions were read and match.
	has bool
	// first[r] is the index of row r's first unit in rows.Units.
	first []int
}

// unitsOf are row r's units and their results.
func (s *stage) unitsOf(r int) ([]units.Unit, []units.Result) {
	lo, hi := s.first[r], s.first[r+1]
	return s.rows.Units[lo:hi], s.pred.Results[lo:hi]
}

type builder struct {
	job    Job
	table  *input.Table
	an     jobfiles.Annotations
	stages []stage
	// skip[r] is row r's sequence-level skip reason in some stage.
	skip      []string
	inputCols []int
	simCols   bool
	skipped   map[string][]int
	out       *Table
}

// loadStages reads each target's stage; a stage whose files are absent or
// do not match the input (a job that failed before it) has has == false.
func (b *builder) loadStages() {
	n := len(b.table.Rows)
	b.stages = make([]stage, len(b.job.Targets))
	for i, t := range b.job.Targets {
		key := b.job.Methods[t]
		st := stage{target: t, valueCol: "kcat (1/s)", display: key}
		if d, ok := b.job.Catalogue.Get(key); ok {
			st.valueCol, st.display, st.unc = d.OutputCols[methods.Target(t)], d.DisplayName, d.Uncertainty
			st.rng = d.OutputOf(methods.Target(t))
		}
		sd, err := jobfiles.StageDir(b.job.MediaRoot, b.job.ID, i)
		if err == nil {
			st.read(sd, n)
		}
		b.out.Synthetic = b.out.Synthetic || st.has && st.pred.Synthetic
		b.stages[i] = st
	}
}

// read loads the stage's rows.json and pred.json from sd; st.has tells
// whether both were read and match n input rows.
func (s *stage) read(sd string, n int) {
	sr, err := jobfiles.ReadStageRowsLite(sd)
	if err != nil || len(sr.Shapes) != n {
		return
	}
	s.rows = sr
	if err := fsutil.ReadJSON(filepath.Join(sd, jobfiles.PredFile), &s.pred); err != nil || !s.pred.Upgrade(sr) {
		return
	}
	s.has = true
	s.first = make([]int, n+1)
	k := 0
	for r := 0; r < n; r++ {
		s.first[r] = k
		for k < len(sr.Units) && sr.Units[k].Row == r {
			k++
		}
	}
	s.first[n] = k
}

// sequenceSkips applies the cross-target rule: only a
// sequence-level skip blanks a row in every target; any other failure
// blanks its own target only.
func (b *builder) sequenceSkips() {
	b.skip = make([]string, len(b.table.Rows))
	for _, st := range b.stages {
		if !st.has {
			continue
		}
		for r, sh := range st.rows.Shapes {
			if sh.SequenceSkip && sh.Skip != "" {
				b.skip[r] = sh.Skip
			}
		}
	}
}

// header is the result's header: each target's three columns, the input's
// columns the result does not generate, the similarity columns, and last
// the uncertainty columns, so that the positions an older
// client reads do not move.
func (b *builder) header() {
	generated := map[string]bool{}
	var h []string
	for _, st := range b.stages {
		cols := TargetColumns(st.valueCol, st.target)
		if st.rng.IsRange() {
			mid, exp := methods.RangeColumns(methods.Target(st.target))
			cols = append(cols, mid, exp)
		}
		for _, c := range cols {
			h = append(h, c)
			generated[c] = true
		}
	}
	for c, name := range b.table.Columns {
		if !generated[name] {
			h = append(h, name)
			b.inputCols = append(b.inputCols, c)
		}
	}
	if b.job.IncludeSimilarity && slices.Contains(b.job.Targets, "kcat") {
		h = append(h, SimilarityColumns(b.job.Methods["kcat"])...)
		b.simCols = true
	}
	for _, st := range b.stages {
		if st.unc {
			h = append(h, UncertaintyColumns(st.target)...)
		}
	}
	b.out.Header = h
}

// write writes the header and every row as CSV into b.out.CSV.
func (b *builder) write() error {
	var buf bytes.Buffer
	w := csv.NewWriter(&buf)
	if err := w.Write(b.out.Header); err != nil {
		return err
	}
	record := make([]string, 0, len(b.out.Header))
	for r := range b.table.Rows {
		record = b.row(r, record[:0])
		if err := w.Write(record); err != nil {
			return err
		}
	}
	w.Flush()
	if err := w.Error(); err != nil {
		return err
	}
	b.out.CSV = buf.Bytes()
	return nil
}

// summary groups the rows left without a value by reason, in order of
// their first row, as the job's message (a JSON list).
func (b *builder) summary() error {
	if len(b.skipped) == 0 {
		return nil
	}
	type group struct {
		Rows   []int  `json:"rows"`
		Reason string `json:"reason"`
	}
	var groups []group
	for reason, rows := range b.skipped {
		groups = append(groups, group{Rows: rows, Reason: reason})
	}
	sort.Slice(groups, func(i, j int) bool { return groups[i].Rows[0] < groups[j].Rows[0] })
	s, err := json.Marshal(groups)
	if err != nil {
		return err
	}
	b.out.SkipSummary = string(s)
	return nil
}
