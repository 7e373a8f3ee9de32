package activities

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/temporal"
	"gorm.io/gorm"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/heartbeat"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/seqmapfile"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/units"
)

// Predict runs the stage's method over its prediction units with the
// configured engine and stores one result per unit. A unit that failed
// before the engine (an invalid substrate token) keeps its reason.
func (a *Activities) Predict(ctx context.Context, ref StageRef) (PredictResult, error) {
	release, err := a.turn(ctx)
	if err != nil {
		return PredictResult{}, err
	}
	defer release()
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
	predFile := filepath.Join(dir, jobfiles.PredFile)
	var done jobfiles.StagePredictions
	if fsutil.ReadJSON(predFile, &done) == nil && done.Results != nil && len(done.Results) == len(sr.Units) {
		// A retry after the file was written: nothing to redo.
		return countPredictions(done), nil
	}

	out := jobfiles.StagePredictions{Results: make([]units.Result, len(sr.Units))}
	var send []int
	for i, u := range sr.Units {
		if u.Skip != "" {
			out.Results[i].Error = u.Skip
			continue
		}
		send = append(send, i)
	}
	sendAll := len(send)
	// A round after cached files changed while the method read them:
	// only the units of those files run again (recheckAfterRead).
	partialFile := filepath.Join(dir, jobfiles.PartialFile)
	var partial jobfiles.StagePartial
	redoRound := false
	if fsutil.ReadJSON(partialFile, &partial) == nil && len(partial.Results) == len(sr.Units) {
		out.Results, send, redoRound = partial.Results, partial.Redo, true
	}
	var job *store.Job
	if err := a.storeRetry(ctx, func() (err error) { job, err = a.Store.Job(ctx, ref.JobID); return err }); err != nil {
		return PredictResult{}, err
	}
	log := a.Log.With("job_id", ref.JobID, "stage", ref.StageIndex, "method", d.Key, "target", sr.Target, "step", "predict")
	log.Info("prediction started", "rows", len(sr.Shapes), "units", len(sr.Units), "sent", len(send), "engine", a.Config.PredictionEngine)
	prov, err := a.stageProvenance(ref, d)
	if err != nil {
		return PredictResult{}, err
	}
	cached := 0
	if len(send) > 0 {
		if a.Config.PredictionEngine == "synthetic" {
			out.Synthetic = true
			out.Source = "Synthetic placeholder from " + d.DisplayName + " (not a prediction)"
		} else {
			out.Source = "Prediction from " + d.DisplayName
		}
		applyProvenance(&out, prov, d)
		// The units the cache has are served from it (with the uncertainty
		// they were computed with, for a method that gives one); only the
		// rest go to the engine.
		pc := a.stageCache(ctx, job, d, sr, prov, send, log)
		toSend := send
		if pc != nil {
			toSend = serveFromCache(pc, d, &out, send)
		}
		eng, err := a.runEngine(ctx, ref, job, d, sr, toSend, dir, redoRound)
		if err != nil {
			log.Warn("prediction failed", "error", err)
			// The job's provenance still names what the failed stage ran.
			_ = fsutil.WriteJSONAtomic(filepath.Join(dir, provenanceFile), prov)
			return PredictResult{}, err
		}
		// The method has read its files: any that changed since the plan's
		// check are checked again, and the units of a changed file run
		// again in another round, after the file is computed anew.
		kept := eng.keep(toSend)
		redo, changed, err := a.recheckAfterRead(ctx, ref, sr, kept, log)
		if err != nil {
			return PredictResult{}, err
		}
		eng.apply(&out, toSend, d, methods.Target(sr.Target))
		if len(redo) > 0 {
			kept = dropRedo(&out, kept, redo)
		}
		switch {
		case pc != nil && eng.unconverted:
			// The program saw substrates as given, not in the form the
			// chemistry helper makes of them: values the unit's key (the
			// tokens as sent to kinflow) does not describe.
			log.Warn("prediction cache: not storing this stage's values, its substrates went unconverted")
		case pc != nil:
			a.storeComputed(ctx, pc, d, out.Results, kept, log)
		}
		if len(redo) > 0 {
			if err := writePartial(partialFile, out, send, redo); err != nil {
				return PredictResult{}, err
			}
			return PredictResult{Recheck: changed}, nil
		}
		cached = len(send) - len(toSend)
		prov = withCacheUse(prov, sr, out.Results)
	}
	// One write of the stage's provenance, before its predictions: the
	// predictions file is what marks the stage done, and finalize reads both.
	if err := fsutil.WriteJSONAtomic(filepath.Join(dir, provenanceFile), prov); err != nil {
		return PredictResult{}, err
	}
	if err := fsutil.WriteJSONAtomic(predFile, out); err != nil {
		return PredictResult{}, err
	}
	_ = os.Remove(partialFile)
	res := countPredictions(out)
	log.Info("prediction done", "predicted", res.Predicted, "skipped", res.Skipped, "cached", cached, "synthetic", res.Synthetic)
	return res, a.recordPredictions(ctx, ref, res, cached, sendAll, countInvalidRows(sr))
}

// countInvalidRows is the stage's rows skipped whole.
func countInvalidRows(sr jobfiles.StageRows) int {
	n := 0
	for _, sh := range sr.Shapes {
		if sh.Skip != "" {
			n++
		}
	}
	return n
}

// recordPredictions stores the stage's and the job's prediction counts.
// The database may be away for a while: it waits for it rather
// than lose the work done.
func (a *Activities) recordPredictions(ctx context.Context, ref StageRef, res PredictResult, cached, sendAll, invalidRows int) error {
	if err := a.storeRetry(ctx, func() error {
		return a.Store.UpdateStage(ctx, ref.JobID, ref.StageIndex, map[string]any{"predictions_made": res.Predicted, "predictions_cached": cached})
	}); err != nil {
		return err
	}
	return a.storeRetry(ctx, func() error {
		return a.Store.UpdateJob(ctx, ref.JobID, map[string]any{
			"total_predictions": sendAll, "predictions_made": res.Predicted, "invalid_rows": invalidRows,
			"predictions_cached": gorm.Expr("(SELECT COALESCE(SUM(predictions_cached), 0) FROM job_stages WHERE job_id = ?)", ref.JobID),
		})
	})
}

// serveFromCache fills out's results of the units of send the prediction
// cache has (with the uncertainty they were computed with, for a method
// that gives one) and returns the rest, which go to the engine.
func serveFromCache(pc *stagePredCache, d *methods.Descriptor, out *jobfiles.StagePredictions, send []int) []int {
	toSend := send[:0:0]
	for k, i := range send {
		e, ok := pc.hits[pc.keys[k]]
		if !ok {
			toSend = append(toSend, i)
			continue
		}
		r := &out.Results[i]
		at := e.FirstComputed
		r.Cached = &at
		if e.Value != nil {
			r.Value, r.Source = e.Value, out.Source
			if d.Uncertainty && e.Uncertainty != nil {
				u := *e.Uncertainty
				r.Uncertainty = &u
			}
		} else {
			r.Error = e.Error
		}
	}
	return toSend
}

// engineOutput is what the engine returned for the units sent, by their
// position k in the list sent.
type engineOutput struct {
	vals    []*float64
	reasons map[int]string
	uncs    map[int]units.Uncertainty
	// unconverted: the program saw the substrates as given (the chemistry
	// helper was not used).
	unconverted bool
	// failed are the units whose shared file changed while the program
	// ran (view.go), with their reason: their values are not served.
	failed map[int]string
	// synthetic: the synthetic engine answered, in the column's unit. A
	// method's own program answers in its declared form even when the
	// embeddings it read were synthetic.
	synthetic bool
}

// runEngine predicts the units toSend with the configured engine (none
// when every unit came from the cache); redoRound says the stage's units
// are being predicted again after cached files changed under the method.
func (a *Activities) runEngine(ctx context.Context, ref StageRef, job *store.Job, d *methods.Descriptor, sr jobfiles.StageRows, toSend []int, dir string, redoRound bool) (engineOutput, error) {
	var eng engineOutput
	var err error
	switch {
	case len(toSend) == 0:
		// Every unit came from the cache: the engine is not called.
	case a.Config.PredictionEngine == "synthetic":
		eng.vals, err = a.predictSynthetic(ctx, ref, d, sr, toSend)
		eng.synthetic = true
		if err == nil && d.Uncertainty {
			eng.uncs = syntheticUncertainties(d, sr, toSend)
		}
	default:
		eng, err = a.predictCommand(ctx, ref, job.CanonicalizeSubstrates, d, sr, toSend, dir, redoRound)
	}
	return eng, err
}

// apply writes the engine's answer for each unit of toSend into out: its
// reason, no prediction for a missing or non-finite value, why an answer
// is not in the method's declared form (methods.Output), or the value
// converted into the column's unit.
func (eng engineOutput) apply(out *jobfiles.StagePredictions, toSend []int, d *methods.Descriptor, t methods.Target) {
	form := d.OutputOf(t)
	if eng.synthetic && !form.IsRange() {
		// The synthetic engine's stand-ins are already in the column's
		// unit; its range stand-ins are class midpoints, checked as any.
		// A real program's answer is converted from its declared form
		// whatever embeddings it read (a class index or a log10 served
		// as a value would be a number in no unit, synthetic or not).
		form = methods.Output{Form: methods.FormLinear}
	}
	for k, i := range toSend {
		r := &out.Results[i]
		if reason, ok := eng.failed[k]; ok {
			*r = units.Result{Error: reason}
			continue
		}
		var v float64
		var bad string
		if eng.vals[k] != nil {
			v, bad = form.Convert(*eng.vals[k])
		}
		switch reason, ok := eng.reasons[k]; {
		case ok:
			r.Error = reason
		case eng.vals[k] == nil || math.IsNaN(*eng.vals[k]) || math.IsInf(*eng.vals[k], 0):
			r.Error = methods.ReasonNoPrediction
		case bad != "":
			r.Error = d.DisplayName + ": " + bad
		default:
			r.Value, r.Source = &v, out.Source
			if u, ok := eng.uncs[k]; ok && d.Uncertainty {
				r.Uncertainty = &u
			}
		}
	}
}

// keep is the units of toSend the engine's answer may be used for: all
// but those whose shared file changed while the program ran.
func (eng engineOutput) keep(toSend []int) []int {
	if len(eng.failed) == 0 {
		return toSend
	}
	out := toSend[:0:0]
	for k, i := range toSend {
		if _, ok := eng.failed[k]; !ok {
			out = append(out, i)
		}
	}
	return out
}

// dropRedo clears the results of the units to run again and returns the
// units of toSend that keep theirs.
func dropRedo(out *jobfiles.StagePredictions, toSend []int, redo map[int]bool) []int {
	kept := toSend[:0:0]
	for _, i := range toSend {
		if redo[i] {
			out.Results[i] = units.Result{}
		} else {
			kept = append(kept, i)
		}
	}
	return kept
}

// writePartial writes pred.partial.json: the results so far and the units
// of send to run again.
func writePartial(path string, out jobfiles.StagePredictions, send []int, redo map[int]bool) error {
	p := jobfiles.StagePartial{Results: out.Results}
	for _, i := range send {
		if redo[i] {
			p.Redo = append(p.Redo, i)
		}
	}
	return fsutil.WriteJSONAtomic(path, p)
}

// ReasonCacheFilesChanged is the event reason (kinflow's, tuple F,F,F,F) of
// a stage whose cached files changed after the plan's check, while the
// method read them: `cache_files_changed_after_check:<n>`. The changed
// files are checked again; the units of each bad one are predicted again
// once it is computed anew, before the stage's result is written.
const ReasonCacheFilesChanged = "cache_files_changed_after_check"

// recheckAfterRead stats the plan's files of the units in sent against the
// records the plan's check left (Layout.ChangedSinceCheck); the changed
// ones are checked again (a file with the recorded contents is kept, any
// other set aside). It returns the units whose file was set aside or is
// gone, with the count of such files, and records a job event.
func (a *Activities) recheckAfterRead(ctx context.Context, ref StageRef, sr jobfiles.StageRows, sent []int, log *slog.Logger) (map[int]bool, int, error) {
	if len(sent) == 0 || a.Layout == nil {
		return nil, 0, nil
	}
	dir, err := a.stageDir(ref.JobID, ref.StageIndex)
	if err != nil {
		return nil, 0, err
	}
	var plan struct {
		SeqIDToSeq map[string]string   `json:"seq_id_to_seq"`
		Expected   map[string][]string `json:"expected_paths_by_seq"`
	}
	if err := fsutil.ReadJSON(filepath.Join(dir, jobfiles.PlanFile), &plan); err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, 0, nil
		}
		return nil, 0, err
	}
	sidOf := make(map[string]string, len(plan.SeqIDToSeq))
	for sid, seq := range plan.SeqIDToSeq {
		sidOf[seq] = sid
	}
	seen := map[string]bool{}
	var paths []string
	for _, i := range sent {
		sid := sidOf[sr.Units[i].Seq]
		if sid == "" || seen[sid] {
			continue
		}
		seen[sid] = true
		paths = append(paths, plan.Expected[sid]...)
	}
	changed := a.Layout.ChangedSinceCheck(paths)
	if len(changed) == 0 {
		return nil, 0, nil
	}
	lost, in, err := a.Layout.RecheckChanged(changed)
	if err != nil {
		return nil, 0, err
	}
	moved := len(lost) == 0
	if moved {
		// The files hold their recorded contents now, but their inode or
		// change time moved while the method read them, and nothing of
		// kinflow's touches a cached file in place any more: what the method
		// read is not known (a file overwritten before the read and put back
		// after it looks exactly like this). The units that used them run
		// again; the files, recorded anew, are kept.
		byPath := map[string]string{}
		for sid, ps := range plan.Expected {
			for _, p := range ps {
				byPath[p] = sid
			}
		}
		lost = map[string]bool{}
		for _, p := range changed {
			if sid := byPath[p]; sid != "" {
				lost[sid] = true
			}
		}
	}
	redo := map[int]bool{}
	for _, i := range sent {
		if lost[sidOf[sr.Units[i].Seq]] {
			redo[i] = true
		}
	}
	msg := fmt.Sprintf("%d cached file(s) changed after the check, while the method read them: the %d prediction(s) that used them are made again once the files are computed anew", len(lost), len(redo))
	if moved {
		msg = fmt.Sprintf("%d cached file(s) were changed and put back while the method read them (their contents are the recorded ones again, but what the method read is not known): the %d prediction(s) that used them are made again", len(lost), len(redo))
	}
	if len(in.Bad) > 0 {
		msg += "; " + in.Summary(5)
	}
	log.Warn("cached files changed while the method read them", "files", len(lost), "units", len(redo), "detail", msg)
	st, err := a.Store.Stage(ctx, ref.JobID, ref.StageIndex)
	if err != nil {
		return nil, 0, err
	}
	if _, err := a.Store.AddEvent(ctx, &store.JobEvent{
		JobID: ref.JobID, StageIndex: ref.StageIndex, Kind: store.EventGPUPrecompute, MethodKey: st.MethodKey, Target: st.Target,
		Reason: fmt.Sprintf("%s:%d", ReasonCacheFilesChanged, len(lost)), Message: msg, CreatedAt: time.Now().UTC(),
	}, keepEvents); err != nil {
		return nil, 0, err
	}
	return redo, len(lost), nil
}

// countPredictions counts the stage's units with and without a value.
func countPredictions(p jobfiles.StagePredictions) PredictResult {
	var r PredictResult
	for _, res := range p.Results {
		if res.Value != nil {
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
func (a *Activities) predictSynthetic(ctx context.Context, ref StageRef, d *methods.Descriptor, sr jobfiles.StageRows, send []int) ([]*float64, error) {
	if err := a.checkArtefacts(ref); err != nil {
		return nil, err
	}
	lo, hi := syntheticRange(sr.Target)
	form := d.OutputOf(methods.Target(sr.Target))
	vals := make([]*float64, len(send))
	for k, i := range send {
		if k%500 == 0 {
			activity.RecordHeartbeat(ctx, k)
			if ctx.Err() != nil {
				return nil, ctx.Err()
			}
		}
		r := sr.Units[i]
		keys := slices.Sorted(maps.Keys(r.Kwargs))
		h := sha256.New()
		fmt.Fprintf(h, "%s|%s|%s", d.Key, sr.Target, r.Seq)
		for _, kw := range keys {
			fmt.Fprintf(h, "|%s=%s", kw, r.Kwargs[kw])
		}
		u := float64(binary.BigEndian.Uint64(h.Sum(nil)[:8])>>11) / float64(1<<53)
		v := math.Pow(10, lo+u*(hi-lo))
		v = math.Round(v*1e4) / 1e4
		if form.IsRange() {
			// A range method's program answers a class midpoint.
			v = form.Midpoint(min(int(u*float64(form.Classes())), form.Classes()-1))
		}
		vals[k] = &v
	}
	return vals, nil
}

// syntheticUncertainties are the synthetic engine's stand-in uncertainties
// of a method that gives them, by position in send: deterministic numbers
// (a total SD between 0.2 and 0.8 log10 units, split 0.8:0.6 into its
// aleatoric and epistemic parts) flagged Synthetic, so that the path from
// the engine to the result's columns runs without a model.
func syntheticUncertainties(d *methods.Descriptor, sr jobfiles.StageRows, send []int) map[int]units.Uncertainty {
	out := make(map[int]units.Uncertainty, len(send))
	for k, i := range send {
		u := sr.Units[i]
		h := sha256.Sum256([]byte("uncertainty|" + d.Key + "|" + sr.Target + "|" + u.Seq + "|" + strings.Join(u.Substrates, ".")))
		f := float64(binary.BigEndian.Uint64(h[:8])>>11) / float64(1<<53)
		total := math.Round((0.2+0.6*f)*1e4) / 1e4
		alea, epi := math.Round(total*0.8*1e4)/1e4, math.Round(total*0.6*1e4)/1e4
		out[k] = units.Uncertainty{Total: total, Aleatoric: &alea, Epistemic: &epi, Synthetic: true}
	}
	return out
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
	if err := fsutil.ReadJSON(filepath.Join(dir, jobfiles.PlanFile), &plan); err != nil {
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

// predictCommand runs the method's own program with the command engine
// (methods.RunCommand) over the stage's valid rows: heartbeats while it
// runs, its progress stored on the stage, its failures reported as
// non-retryable PredictionFailed errors. Before the program starts, the
// rows' seq ids are written into the media root's seqmap.sqlite3, where
// the reference's programs look them up (WriteSeqmapFile).
func (a *Activities) predictCommand(ctx context.Context, ref StageRef, canonicalize bool, d *methods.Descriptor, sr jobfiles.StageRows, send []int, dir string, redoRound bool) (engineOutput, error) {
	rows := make([]methods.EngineRow, len(send))
	for k, i := range send {
		rows[k] = methods.EngineRow{Seq: sr.Units[i].Seq, Kwargs: sr.Units[i].Kwargs}
	}
	// Heartbeat while the program runs even if it prints nothing.
	stopBeat := heartbeat.Start(ctx)
	defer stopBeat()
	var ids []string
	if d.RowSeqID || d.Command != nil {
		var err error
		if ids, err = a.rowSeqIDs(ctx, dir, rows); err != nil {
			return engineOutput{}, err
		}
		if d.RowSeqID {
			for k := range rows {
				rows[k].SeqID = ids[k]
			}
		}
		if d.Command != nil {
			if err := WriteSeqmapFile(ctx, a.Config.MediaRoot, sr.Target, d, rows, ids); err != nil {
				return engineOutput{}, err
			}
		}
	}
	// The program sees its own view of the media root (view.go), never
	// the shared cache other jobs planned on.
	var view *stageView
	var mv *methods.MediaView
	if d.Command != nil {
		var err error
		if view, err = a.buildView(ctx, ref, dir, rows, ids); err != nil {
			return engineOutput{}, err
		}
		defer view.remove()
		// Method J's contact maps are its program's own cache, which
		// kinflow does not plan: it stays where the program keeps it.
		mv = &methods.MediaView{MediaRoot: view.media, Root: view.root, Keep: map[string]bool{"methodj_cache_dir": true}}
	}
	last := 0
	var lastWrite time.Time
	eng := engineOutput{uncs: map[int]units.Uncertainty{}}
	var err error
	eng.vals, eng.reasons, err = methods.RunCommand(ctx, d, methods.CommandRequest{
		JobID: ref.JobID, Target: sr.Target, Canonicalize: canonicalize, Rows: rows, Dir: dir,
		Vars: CommandVars(a.Config),
		View: mv,
		Folder: func(family string) (string, bool) {
			if a.Layout == nil {
				return "", false
			}
			return a.Layout.FolderOf(family)
		},
		Env:         CommandEnv(),
		Chem:        a.Chem,
		Unconverted: func() { eng.unconverted = true },
		Uncertainty: func(row int, u units.Uncertainty) { eng.uncs[row] = u },
		Progress: func(done int) {
			activity.RecordHeartbeat(ctx, done)
			// Progress is stored at most every half second, and only
			// when it moves forward.
			if done > last && time.Since(lastWrite) > 500*time.Millisecond {
				last, lastWrite = done, time.Now()
				_ = a.Store.UpdateStage(context.WithoutCancel(ctx), ref.JobID, ref.StageIndex, map[string]any{"predictions_made": done})
			}
		},
	})
	// Whatever the program's end, the shared files it was given are
	// checked: the units of one it changed are not served, and the file
	// goes to the integrity check. In the stage's first round a recorded
	// file changed in place is left to the check after the read
	// (recheckAfterRead), which has it computed anew and its units
	// predicted again: a writer racing the read gets the job its right
	// values. A file changed again in that second round is the program's
	// doing, and its units fail.
	if view != nil {
		if ch := view.check(!redoRound); !ch.empty() {
			bySid := ch.failedSeqs()
			eng.failed = map[int]string{}
			for k := range rows {
				if r, ok := bySid[ids[k]]; ok {
					eng.failed[k] = r
				}
			}
			log := a.Log.With("job_id", ref.JobID, "stage", ref.StageIndex, "method", d.Key, "target", sr.Target, "step", "predict")
			if rerr := a.reportViewChanges(context.WithoutCancel(ctx), ref, ch, len(eng.failed), log); rerr != nil && err == nil {
				return engineOutput{}, rerr
			}
		}
	}
	var ee *methods.EngineError
	if errors.As(err, &ee) {
		// The job's error text starts with the target (`kcat: …`), so a
		// job of several targets says which one failed.
		return engineOutput{}, temporal.NewNonRetryableApplicationError(sr.Target+": "+ee.Msg, ErrPrediction, ee.Err)
	}
	if err != nil {
		return engineOutput{}, err
	}
	return eng, nil
}

// rowSeqIDs returns each row's seq id: the id the stage's plan used for its
// sequence (the id of its files in the shared cache), else the id store's
// (created when new, as planning creates them). A program given seq_id
// never keys its own files by row position, so one job's row can never
// read another job's file.
func (a *Activities) rowSeqIDs(ctx context.Context, dir string, rows []methods.EngineRow) ([]string, error) {
	var plan struct {
		SeqIDToSeq map[string]string `json:"seq_id_to_seq"`
	}
	if err := fsutil.ReadJSON(filepath.Join(dir, jobfiles.PlanFile), &plan); err != nil && !errors.Is(err, os.ErrNotExist) {
		return nil, err
	}
	sidOf := make(map[string]string, len(plan.SeqIDToSeq))
	for sid, seq := range plan.SeqIDToSeq {
		sidOf[seq] = sid
	}
	out := make([]string, len(rows))
	var missing []string
	for k := range rows {
		if out[k] = sidOf[rows[k].Seq]; out[k] == "" {
			missing = append(missing, rows[k].Seq)
		}
	}
	if len(missing) == 0 {
		return out, nil
	}
	ids, err := a.Store.SeqIDs(ctx, missing)
	if err != nil {
		return nil, fmt.Errorf("sequence ids for the method's rows: %w", err)
	}
	for k := range out {
		if out[k] == "" {
			out[k], ids = ids[0], ids[1:]
		}
	}
	return out, nil
}

// CommandVars are the worker's placeholders of a method's command line and
// env_paths: the media root, its shared embedding cache and the folders of
// methods E and J. A stage and `kinflow methods check` use the same.
func CommandVars(cfg *config.Config) map[string]string {
	return map[string]string{
		"media":                   cfg.MediaRoot,
		"sequence_info":           filepath.Join(cfg.MediaRoot, "sequence_info"),
		"methode_checkpoint_root": cfg.MethodECheckpointRoot,
		"methodj_cache_dir":       cfg.MethodJCacheDir,
	}
}

// CommandEnv is a method program's base environment: the worker's own, less
// kinflow's configuration (config.ChildEnv).
func CommandEnv() []string { return config.ChildEnv(os.Environ()) }

// WriteSeqmapFile puts the rows' seq ids into <media>/sequence_info/
// seqmap.sqlite3 before the method's program runs: the reference's
// programs look each sequence's id up there (its seqmap tool, or the file
// read directly) and read the sequence's cached files by that id, so they
// must find kinflow's ids. A file that disagrees with kinflow's ids fails
// the stage (its program would read another sequence's files); a file
// another process kept locked past the busy timeout is a retryable error
// (the next attempt finds it free); any other failure fails the stage. The
// messages name the file by its place under the media root only.
func WriteSeqmapFile(ctx context.Context, mediaRoot, target string, d *methods.Descriptor, rows []methods.EngineRow, ids []string) error {
	es := make([]seqmapfile.Entry, len(rows))
	for k := range rows {
		es[k] = seqmapfile.Entry{ID: ids[k], Seq: rows[k].Seq}
	}
	err := seqmapfile.Write(ctx, mediaRoot, es)
	var ce *seqmapfile.ConflictError
	switch {
	case err == nil:
		return nil
	case errors.As(err, &ce):
		return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %s cannot run: %s; its program would read another sequence's files, so an operator must reconcile that file with kinflow's sequence ids",
			target, d.DisplayName, ce.Error()), ErrPrediction, err)
	case seqmapfile.Busy(err), mediaroot.Unavailable(err), ctx.Err() != nil:
		return fmt.Errorf("%s: %w", seqmapfile.RelPath, err)
	}
	return temporal.NewNonRetryableApplicationError(fmt.Sprintf("%s: %s cannot run: the sequence map its program reads (%s) could not be written (see the worker's log)",
		target, d.DisplayName, seqmapfile.RelPath), ErrPrediction, err)
}
