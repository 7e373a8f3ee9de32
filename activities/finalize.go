package activities

import (
	"context"
	"path/filepath"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/predcache"
	"github.com/kinflow/kinflow/internal/result"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/usermsg"
)

// Finalize ends the job: on success it writes output.csv (internal/result) and marks
// the job Completed; on failure it marks it Failed with the message. Either
// way the rows that got no prediction are refunded (a user pays only for
// what was delivered),
// and so are the rows whose every prediction came from the prediction cache
// (they cost the service nothing).
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
			refund = tableRefund(out, job.RequestedRows)
		} else {
			refund.Rows = job.RequestedRows
		}
		if store.UnavailableText(in.Message) {
			// Longer than KINFLOW_OUTAGE_RIDE_OUT_SECONDS without the
			// database: say so, without its address.
			in.Message = DatabaseUnavailableMessage
			refund = store.Refund{Rows: job.RequestedRows}
		}
		if mediaroot.UnavailableText(in.Message) {
			// The media root stayed away (renamed, unmounted) past the
			// steps' ride-out: say so in one sentence, without its
			// paths, and give every row back.
			in.Message = StorageUnavailableMessage
			refund = store.Refund{Rows: job.RequestedRows}
		}
		if fsutil.NoSpaceText(in.Message) {
			// The disk filled: the owner gets no result, so
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
	if err := fsutil.WriteFileAtomic(filepath.Join(dir, jobfiles.OutputFile), out.CSV, 0o644); err != nil {
		return FinalizeResult{}, err
	}
	if err := a.noteUnappliedAnnotations(ctx, job, out.Annotations); err != nil {
		return FinalizeResult{}, err
	}
	if _, err := a.writeJobProvenance(job); err != nil {
		return FinalizeResult{}, err
	}
	a.recordCachedRows(ctx, job, out)
	refund := tableRefund(out, job.RequestedRows)
	if _, err := a.Store.FinishJob(ctx, job.ID, store.JobCompleted, out.SkipSummary, refund, out.Synthetic, jobfiles.OutputRel(job.ID), now); err != nil {
		return FinalizeResult{}, err
	}
	a.Log.Info("job completed", "job_id", job.ID, "rows", out.Rows, "predicted", out.FullyPredicted, "refunded", refund.Rows, "refunded_cached", refund.Cached)
	return FinalizeResult{Status: store.JobCompleted, Refunded: refund.Rows}, nil
}

// recordCachedRows adds the job's fully predicted rows to the cached-rows
// ledger the quota check at submit reads (predcache.RowsHeld): their units
// are in the prediction cache now. Only with a prediction cache wired; a
// failed write is logged, the job stands.
func (a *Activities) recordCachedRows(ctx context.Context, job *store.Job, out *assembled) {
	if a.PredCache == nil || len(out.CachedRows) == 0 {
		return
	}
	version := func(m string) string {
		if d, ok := a.Catalogue.Get(m); ok {
			return d.ModelVersion
		}
		return ""
	}
	specs := predcache.RowSpecs(out.targets, out.methods, version, job.CanonicalizeSubstrates, job.HandleLongSequences)
	if err := predcache.RecordJobRows(context.WithoutCancel(ctx), a.Store, specs, out.Columns, out.CachedRows, time.Now()); err != nil {
		a.Log.Warn("cached rows ledger write failed", "job_id", job.ID, "error", err)
	}
}

// DatabaseUnavailableMessage is a job's message when a step failed because
// the application database stayed unreachable past the ride-out.
const DatabaseUnavailableMessage = "database unavailable: the server's database could not be reached for longer than it waits. Its rows were refunded; please submit it again later."

// StorageFullMessage is a job's message when it failed because the media
// root (or the database's disk) was full: the reason "storage full".
const StorageFullMessage = "storage full: the server ran out of disk space while running this job. Its rows were refunded; please submit it again later."

// StorageUnavailableMessage is a job's message when it failed because the
// media root was unavailable (mediaroot: renamed away, a lost mount) for
// longer than its steps wait.
const StorageUnavailableMessage = "storage unavailable: the server's storage was unavailable for longer than it waits. Its rows were refunded; please submit it again later."

// noteUnappliedAnnotations reports, in the message of each stage whose
// target asked for them, a similarity dataset or experimental table that is
// not configured on this server: reported as such, never as silently blank
// cells. A stage's own message wins.
func (a *Activities) noteUnappliedAnnotations(ctx context.Context, job *store.Job, an jobfiles.Annotations) error {
	stages, err := a.Store.JobStages(ctx, job.ID)
	if err != nil {
		return err
	}
	for _, st := range stages {
		var notes []string
		// Not-configured states are written only for jobs that asked.
		if st.Target == "kcat" && an.Sim.State == AnnotationNotConfigured {
			notes = append(notes, "Similarity columns left blank: "+an.Sim.Message)
		}
		if et, ok := an.Exp.Targets[st.Target]; ok && et.State == AnnotationNotConfigured {
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

// assembled is the job's result (internal/result) with the targets and
// methods it was built for (the cached-rows ledger keys on them).
type assembled struct {
	*result.Table
	targets []string
	methods map[string]string
}

// tableRefund is the store's refund of the result's rows.
func tableRefund(t *assembled, requested int) store.Refund {
	rows, cached := t.Refund(requested)
	return store.Refund{Rows: rows, Cached: cached}
}

// assemble builds the job's result table (internal/result) from its input
// and every stage's predictions.
func (a *Activities) assemble(job *store.Job) (*assembled, error) {
	targets, chosen := job.Targets, job.Methods
	picked := make(map[string]string, len(targets))
	for _, t := range targets {
		picked[t] = chosen[t]
	}
	t, err := result.Build(result.Job{
		MediaRoot: a.Config.MediaRoot, ID: job.ID, Targets: targets, Methods: picked,
		IncludeSimilarity: job.IncludeSimilarityColumns, Catalogue: a.Catalogue,
	})
	if err != nil {
		return nil, err
	}
	return &assembled{Table: t, targets: targets, methods: picked}, nil
}

// UncertaintyColumns are the result columns of a target's uncertainty
// (result.UncertaintyColumns).
func UncertaintyColumns(target string) []string { return result.UncertaintyColumns(target) }

// loadStageRowsLite reads a stage's rows.json without the sequences and
// engine arguments (jobfiles.ReadStageRowsLite).
func (a *Activities) loadStageRowsLite(jobID string, index int) (jobfiles.StageRows, error) {
	dir, err := a.stageDir(jobID, index)
	if err != nil {
		return jobfiles.StageRows{}, err
	}
	return jobfiles.ReadStageRowsLite(dir)
}
