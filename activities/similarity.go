package activities

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"

	"github.com/kinflow/kinflow/internal/experimental"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/heartbeat"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/similarity"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/units"
)

// Annotation states, as written in similarity.json / experimental.json and
// returned to the workflow (they show in the Temporal UI).
// (internal/jobfiles is their home.)
const (
	AnnotationDone          = jobfiles.AnnotationDone
	AnnotationNotRequested  = jobfiles.AnnotationNotRequested
	AnnotationNotConfigured = jobfiles.AnnotationNotConfigured
)

// AnnotationResult says what an annotation activity did.
type AnnotationResult struct {
	State   string `json:"state"`
	Message string `json:"message,omitempty"`
}

// jobInput reads the job row and its input.csv.
func (a *Activities) jobInput(ctx context.Context, jobID string) (*store.Job, *input.Table, string, error) {
	job, err := a.Store.Job(ctx, jobID)
	if err != nil {
		return nil, nil, "", err
	}
	dir, err := a.jobDir(job.ID)
	if err != nil {
		return nil, nil, "", err
	}
	f, err := os.Open(filepath.Join(dir, jobfiles.InputFile))
	if err != nil {
		return nil, nil, "", fmt.Errorf("read input of job %s: %w", job.ID, err)
	}
	defer f.Close()
	t, err := input.ParseCSV(f, 0)
	if err != nil {
		return nil, nil, "", fmt.Errorf("read input of job %s: %w", job.ID, err)
	}
	return job, t, dir, nil
}

// jobTargets returns the job's targets and target → method key.
func jobTargets(job *store.Job) ([]string, map[string]string) {
	chosen := make(map[string]string, len(job.Methods))
	maps.Copy(chosen, job.Methods)
	return job.Targets, chosen
}

// TrainingSimilarity computes the similarity columns of a job (docs/similarity.md):
// the max and mean identity of each row's sequence to the training data of
// the kcat method, by MMseqs2 with results cached per (sequence, dataset
// build). It writes similarity.json for Finalize. A job without kcat or
// with includeSimilarityColumns=false needs nothing; a method without a
// dataset, or a dataset whose FASTA is absent, is recorded as not
// configured (the columns stay blank). Idempotent; heartbeats while mmseqs
// runs.
func (a *Activities) TrainingSimilarity(ctx context.Context, in JobRef) (AnnotationResult, error) {
	release, err := a.turn(ctx)
	if err != nil {
		return AnnotationResult{}, err
	}
	defer release()
	job, t, dir, err := a.jobInput(ctx, in.JobID)
	if err != nil {
		return AnnotationResult{}, err
	}
	targets, chosen := jobTargets(job)
	key := chosen["kcat"]
	if !job.IncludeSimilarityColumns || !slices.Contains(targets, "kcat") {
		return AnnotationResult{State: AnnotationNotRequested}, nil
	}
	path := filepath.Join(dir, jobfiles.SimilarityFile)
	var prev jobfiles.Similarity
	if fsutil.ReadJSON(path, &prev) == nil && prev.State == AnnotationDone && len(prev.Max) == len(t.Rows) {
		return AnnotationResult{State: AnnotationDone}, nil
	}
	out := jobfiles.Similarity{Method: key}
	var ds similarity.Dataset
	ok := false
	if a.Similarity != nil {
		ds, ok = a.Similarity.DatasetFor(key)
	}
	switch {
	case !ok:
		out.State, out.Message = AnnotationNotConfigured, fmt.Sprintf("Method %s has no similarity dataset.", key)
	case !ds.Present():
		out.State, out.Message = AnnotationNotConfigured, fmt.Sprintf("The similarity dataset %s of method %s is not installed on this server.", ds.Label, key)
	}
	if out.State != "" {
		a.Log.Warn("similarity columns left blank", "event", "similarity.not_configured", "job_id", job.ID, "method", key, "reason", out.Message)
		if err := fsutil.WriteJSONAtomic(path, out); err != nil {
			return AnnotationResult{}, err
		}
		return AnnotationResult{State: out.State, Message: out.Message}, nil
	}

	// The reference strips the sequences of the result rows before searching.
	seqs := t.Column(input.ColProteinSequence)
	cands := make([][]string, len(seqs))
	queries := make([]string, 0, len(seqs))
	for i := range seqs {
		if strings.Contains(seqs[i], units.Separator) {
			cands[i] = units.Split(seqs[i])
			seqs[i] = ""
			for _, c := range cands[i] {
				if input.ValidResidues(c) {
					queries = append(queries, c)
				}
			}
			continue
		}
		seqs[i] = strings.TrimSpace(seqs[i])
		queries = append(queries, seqs[i])
	}
	stop := heartbeat.Start(ctx)
	res, err := a.Similarity.Searcher.Search(ctx, ds, queries)
	stop()
	if err != nil {
		return AnnotationResult{}, fmt.Errorf("similarity of job %s: %w", job.ID, err)
	}
	out.State, out.Dataset = AnnotationDone, ds.Label
	out.Max = make([]*float64, len(seqs))
	out.Mean = make([]*float64, len(seqs))
	for i, q := range seqs {
		if q == "" {
			continue
		}
		id := res[q]
		mx, mean := similarity.Round2(id.Max), similarity.Round2(id.Mean)
		out.Max[i], out.Mean[i] = &mx, &mean
	}
	for i, cs := range cands {
		if cs == nil {
			continue
		}
		if out.CandMax == nil {
			out.CandMax, out.CandMean = make([][]*float64, len(seqs)), make([][]*float64, len(seqs))
		}
		out.CandMax[i], out.CandMean[i] = make([]*float64, len(cs)), make([]*float64, len(cs))
		for k, c := range cs {
			if !input.ValidResidues(c) {
				continue
			}
			id := res[c]
			mx, mean := similarity.Round2(id.Max), similarity.Round2(id.Mean)
			out.CandMax[i][k], out.CandMean[i][k] = &mx, &mean
		}
	}
	if err := fsutil.WriteJSONAtomic(path, out); err != nil {
		return AnnotationResult{}, err
	}
	a.Log.Info("similarity columns computed", "event", "similarity.job_done", "job_id", job.ID, "method", key, "dataset", ds.Label, "rows", len(seqs))
	return AnnotationResult{State: AnnotationDone}, nil
}

// LookupExperimental finds measured values for a job with useExperimental
// (docs/similarity.md, "Experimental values"): for kcat (unless the kcat method reads full reactions) and
// Km, each row's substrate as standard InChI and its original, untruncated
// sequence are matched exactly in the operator's table. It writes
// experimental.json; Finalize applies the matches. An absent table is
// recorded as not configured.
func (a *Activities) LookupExperimental(ctx context.Context, in JobRef) (AnnotationResult, error) {
	release, err := a.turn(ctx)
	if err != nil {
		return AnnotationResult{}, err
	}
	defer release()
	job, t, dir, err := a.jobInput(ctx, in.JobID)
	if err != nil {
		return AnnotationResult{}, err
	}
	if !job.UseExperimental {
		return AnnotationResult{State: AnnotationNotRequested}, nil
	}
	path := filepath.Join(dir, jobfiles.ExperimentalFile)
	targets, chosen := jobTargets(job)
	out := jobfiles.Experimental{Targets: map[string]jobfiles.ExperimentalTarget{}}
	var params []experimental.Param
	for _, tg := range targets {
		switch tg {
		case "kcat":
			if d, ok := a.Catalogue.Get(chosen["kcat"]); ok && d.InputFormat != methods.InputMulti {
				params = append(params, experimental.Kcat)
			}
		case "Km":
			params = append(params, experimental.Km)
		}
	}
	if len(params) == 0 || !t.Has(input.ColSubstrate) {
		return AnnotationResult{State: AnnotationNotRequested}, fsutil.WriteJSONAtomic(path, out)
	}
	seqs := t.Column(input.ColProteinSequence)
	subs := t.Column(input.ColSubstrate)
	inchis := make([]string, len(subs))
	var convIdx []int
	var convIn []string
	for i, s := range subs {
		if strings.Contains(s, "InChI=") {
			inchis[i] = s
		} else if strings.TrimSpace(s) != "" {
			convIdx = append(convIdx, i)
			convIn = append(convIn, s)
		}
	}
	if len(convIn) > 0 && a.Chem != nil {
		conv, _, err := a.Chem.Convert(ctx, methods.FormInChI, convIn)
		if err != nil {
			return AnnotationResult{}, fmt.Errorf("experimental look-up of job %s: %w", job.ID, err)
		}
		for k, i := range convIdx {
			// A substrate RDKit could not convert comes back unchanged and
			// can never match.
			if strings.Contains(conv[k], "InChI=") {
				inchis[i] = conv[k]
			}
		}
	}
	res := AnnotationResult{State: AnnotationDone}
	for _, p := range params {
		tab, err := a.experimentalTables().Get(p)
		if errors.Is(err, experimental.ErrNotConfigured) {
			msg := fmt.Sprintf("No experimental %s table is installed on this server.", p)
			out.Targets[string(p)] = jobfiles.ExperimentalTarget{State: AnnotationNotConfigured, Message: msg}
			a.Log.Warn("experimental values not applied", "event", "experimental.not_configured", "job_id", job.ID, "target", string(p))
			res = AnnotationResult{State: AnnotationNotConfigured, Message: msg}
			continue
		}
		if err != nil {
			return AnnotationResult{}, err
		}
		et := jobfiles.ExperimentalTarget{State: AnnotationDone, Rows: map[int]experimental.Record{}}
		for i := range seqs {
			if inchis[i] == "" {
				continue
			}
			if rec, ok := tab.Lookup(inchis[i], seqs[i]); ok {
				et.Rows[i] = rec
			}
		}
		out.Targets[string(p)] = et
		a.Log.Info("experimental values looked up", "event", "experimental.lookup", "job_id", job.ID, "target", string(p), "matches", len(et.Rows))
	}
	if err := fsutil.WriteJSONAtomic(path, out); err != nil {
		return AnnotationResult{}, err
	}
	return res, nil
}

// experimentalTables returns the tables, made on first use under
// MEDIA/experimental when unset.
func (a *Activities) experimentalTables() *experimental.Tables {
	a.experimentalOnce.Do(func() {
		if a.Experimental == nil {
			a.Experimental = &experimental.Tables{Dir: filepath.Join(a.Config.MediaRoot, "experimental")}
		}
	})
	return a.Experimental
}
