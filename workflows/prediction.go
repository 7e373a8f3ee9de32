package workflows

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"strings"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/activities"
	"github.com/kinflow/kinflow/internal/embedjob"
)

// PredictionInput is the input of PredictionWorkflow: everything else is in
// the database and the job's folder, read by PrepareInput.
type PredictionInput struct {
	JobID string `json:"job_id"`
	// Rev is the workflow revision the job was started under: Rev at
	// StartJob, 0 for every job started before revisions. It decides
	// whether the run asks GetVersion for the changes revision 1 covers
	// (embedjob.ChangeVersion, docs/workflows.md).
	Rev int `json:"rev,omitempty"`
}

// Rev is the workflow revision new jobs start under (embedjob.Rev): a job
// started at revision 1 takes every change of docs/workflows.md's table up
// to i35-notify-job at version 1 without a version marker. A later change
// is made behind GetVersion as before (or, with replay tests of both, by
// raising embedjob.Rev and testing the input's Rev).
const Rev = embedjob.Rev

// version is GetVersion(ctx, change, DefaultVersion, 1) for this run's
// revision (embedjob.ChangeVersion).
func (w *prediction) version(ctx workflow.Context, change string) workflow.Version {
	return embedjob.ChangeVersion(ctx, w.in.Rev, change)
}

// PredictionResult is the workflow's result.
type PredictionResult struct {
	Status  string `json:"status"`
	Message string `json:"message,omitempty"`
}

// PredictionStatus is what the status query answers.
type PredictionStatus struct {
	Stage      string `json:"stage"`
	StageIndex int    `json:"stage_index"`
	// GPUJobID is the running remote job, if any.
	GPUJobID string `json:"gpu_job_id,omitempty"`
}

// a is the activities' receiver for method values; never dereferenced.
var a *activities.Activities

// PredictionWorkflow runs one prediction job: every (target, method) stage
// through the precompute flow (plan the embedding files, have the missing
// ones computed, check them again; README.md, "Architecture"), then the
// prediction, then the result.
func PredictionWorkflow(ctx workflow.Context, in PredictionInput) (PredictionResult, error) {
	w := &prediction{in: in}
	if err := w.setup(ctx); err != nil {
		return PredictionResult{}, err
	}
	res, err := w.run(ctx)
	if err == nil && (res.Status == "Completed" || res.Status == "Failed") {
		w.notify(ctx)
	}
	return res, err
}

type prediction struct {
	in     PredictionInput
	prep   activities.PreparedJob
	status PredictionStatus
	// events counts the events this run recorded: with the run id, each
	// event's key, so that one recorded again by a retried workflow task is
	// stored once.
	events int
	// small is set for a job of at most KINFLOW_SMALL_JOB_ROWS rows (since
	// smallJobLocalVersion): its Predict and annotations are local
	// activities.
	small bool
	// rideOut is set since rideOutVersion: the bookkeeping steps retry
	// through an outage of storage or the database for up to
	// KINFLOW_OUTAGE_RIDE_OUT_SECONDS, and a Finalize that still fails
	// records the job as Failed (failureFinalize).
	rideOut bool
	// quiet is set for a small job since quietStagesVersion: the Stage
	// search attribute is upserted only where the job waits on work
	// outside its own workflow task (quietStages).
	quiet bool
}

func (w *prediction) setup(ctx workflow.Context) error {
	return workflow.SetQueryHandler(ctx, StatusQuery, func() (PredictionStatus, error) { return w.status, nil })
}

// Activity options. Every retry policy is bounded: a job fails with a
// message rather than retrying for ever.
var (
	// Bookkeeping and planning: quick database and file work.
	shortRetry = &temporal.RetryPolicy{
		InitialInterval:        time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        30 * time.Second,
		MaximumAttempts:        8,
		NonRetryableErrorTypes: []string{activities.ErrInvalidInput, activities.ErrUnknownMethod, activities.ErrJobNotFound},
	}
	// Long work (embedding steps, predictions): fewer attempts, each resumes
	// from what the earlier one wrote.
	longRetry = &temporal.RetryPolicy{
		InitialInterval:        2 * time.Second,
		BackoffCoefficient:     2,
		MaximumInterval:        time.Minute,
		MaximumAttempts:        3,
		NonRetryableErrorTypes: []string{activities.ErrInvalidInput, activities.ErrUnknownMethod, activities.ErrPrediction},
	}
)

// shortOptions run the short steps (PrepareInput, BuildPlan, Cleanup,
// Finalize) as local activities: on the workflow's own worker, without a
// round trip through the task queue. They are bounded — parsing and planning
// 10,000 rows takes about a second — and idempotent, so a retry after a
// crash simply runs them again; the long steps (embedding, Predict) stay
// regular activities with heartbeats.
func (w *prediction) shortOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, w.rideOutOptions(workflow.LocalActivityOptions{
		// 10 minutes covers parsing and planning 10,000 rows on slow shared storage.
		StartToCloseTimeout: 10 * time.Minute,
		RetryPolicy:         shortRetry,
	}))
}

func (w *prediction) localOptions(ctx workflow.Context) workflow.Context {
	return workflow.WithLocalActivityOptions(ctx, w.rideOutOptions(workflow.LocalActivityOptions{
		// Single-row database writes.
		StartToCloseTimeout: 30 * time.Second,
		RetryPolicy:         shortRetry,
	}))
}

// rideOutOptions bounds o's retries by time instead of attempts when
// w.rideOut is set: every attempt as shortRetry, at most 30 s apart, until
// KINFLOW_OUTAGE_RIDE_OUT_SECONDS (DefaultOutageRideOut before PrepareInput
// has read it), or the step's own time limit if longer, have passed since
// the first. shortRetry's 8 attempts gave up
// after about 100 s, less than an operator needs to free a disk or restart a
// database.
func (w *prediction) rideOutOptions(o workflow.LocalActivityOptions) workflow.LocalActivityOptions {
	if !w.rideOut {
		return o
	}
	d := DefaultOutageRideOut
	if s := w.prep.Policy.OutageRideOutSeconds; s > 0 {
		d = time.Duration(s) * time.Second
	}
	p := *o.RetryPolicy
	p.MaximumAttempts = 0 // unlimited within ScheduleToCloseTimeout
	o.RetryPolicy = &p
	// Never shorter than one attempt's own limit: a long parse or plan is
	// not cut off by a short ride-out.
	o.ScheduleToCloseTimeout = max(d, o.StartToCloseTimeout)
	return o
}

// DefaultOutageRideOut is the ride-out of the steps that run before
// PrepareInput has read KINFLOW_OUTAGE_RIDE_OUT_SECONDS (its default).
const DefaultOutageRideOut = 10 * time.Minute

func (w *prediction) run(ctx workflow.Context) (PredictionResult, error) {
	w.rideOut = w.version(ctx, rideOutVersion) >= 1
	w.setStage(ctx, 0, "prepare")
	if err := workflow.ExecuteLocalActivity(w.shortOptions(ctx), a.PrepareInput, activities.JobRef{JobID: w.in.JobID}).Get(ctx, &w.prep); err != nil {
		return w.finalize(ctx, err)
	}
	if w.prep.AlreadyDone {
		return PredictionResult{Status: "AlreadyDone"}, nil
	}
	if n := w.prep.Policy.SmallJobRows; n > 0 && w.prep.Rows <= n {
		w.small = w.version(ctx, smallJobLocalVersion) >= 1
		w.quiet = w.small && w.version(ctx, quietStagesVersion) >= 1
	}
	keys := make([]string, 0, len(w.prep.Stages))
	for _, st := range w.prep.Stages {
		keys = append(keys, st.MethodKey)
	}
	// StartJob sets Method at the start where it can, and the upsert stays:
	// a run that an older worker began upserted it, and the upsert is a
	// command that replay checks.
	_ = workflow.UpsertTypedSearchAttributes(ctx, SearchAttrMethod.ValueSet(strings.Join(keys, ",")))

	for _, st := range w.prep.Stages {
		if err := w.stage(ctx, st); err != nil {
			return w.finalize(ctx, err)
		}
	}
	// Histories recorded before the annotation step replay without it.
	if w.version(ctx, annotateChange) == 1 {
		w.annotate(ctx)
	}
	return w.finalize(ctx, nil)
}

// stageError is a failure with a message meant for the user.
type stageError struct{ msg string }

func (e *stageError) Error() string { return e.msg }

// stage runs one (target, method) stage: plan, precompute (remote or local),
// predict, clean up.
func (w *prediction) stage(ctx workflow.Context, st activities.StageInfo) error {
	ref := activities.StageRef{JobID: w.in.JobID, StageIndex: st.Index}
	w.setStage(ctx, st.Index, "plan")
	if err := w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "running"}); err != nil {
		return err
	}
	if st.ValidRows > 0 {
		if err := w.precompute(ctx, st); err != nil {
			_ = w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "failed", Message: userMessage(err), EmbeddingState: "error"})
			return err
		}
	}
	w.setStage(ctx, st.Index, "predict")
	var pr activities.PredictResult
	popts := workflow.ActivityOptions{
		// A method over 10,000 rows on CPU can take hours; the heartbeat
		// timeout finds a dead worker quickly.
		StartToCloseTimeout: 12 * time.Hour,
		HeartbeatTimeout:    w.heartbeat(),
		RetryPolicy:         longRetry,
	}
	if err := w.heavy(ctx, popts, a.Predict, ref).Get(ctx, &pr); err != nil {
		_ = w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "failed", Message: userMessage(err)})
		return err
	}
	// Cached files changed while the method read them (Predict found it
	// and kept its results back): have them computed again, then predict
	// their units again. An older history never has Recheck set, so the
	// version marker is only met on this road.
	for round := 0; pr.Recheck > 0; round++ {
		if w.version(ctx, recheckAfterReadVersion) < 1 {
			break
		}
		if round == maxRecheckRounds {
			err := &stageError{fmt.Sprintf("method %s (%s): cached embedding files kept changing while the method read them", st.MethodKey, st.Target)}
			_ = w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "failed", Message: userMessage(err)})
			return err
		}
		w.setStage(ctx, st.Index, "plan")
		if err := w.precompute(ctx, st); err != nil {
			_ = w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "failed", Message: userMessage(err), EmbeddingState: "error"})
			return err
		}
		w.setStage(ctx, st.Index, "predict")
		pr = activities.PredictResult{}
		if err := w.heavy(ctx, popts, a.Predict, ref).Get(ctx, &pr); err != nil {
			_ = w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "failed", Message: userMessage(err)})
			return err
		}
	}
	w.setStage(ctx, st.Index, "cleanup")
	if err := workflow.ExecuteLocalActivity(w.shortOptions(ctx), a.Cleanup, ref).Get(ctx, nil); err != nil {
		if w.version(ctx, cleanupMarkVersion) >= 1 {
			_ = w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "failed", Message: userMessage(err)})
		}
		return err
	}
	return w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "completed"})
}

// precompute makes sure every artefact the stage's method reads exists: it
// plans; with files missing it starts the progress tracker and, where a GPU
// service is configured and the method can use it, reads its health, sends
// only the missing work, waits for it and plans again (the post-check, which
// trusts files, not the remote job's word). What is still missing is
// computed locally: after a GPU failure too (fail-open, the default), unless
// GPU_EMBED_FAIL_CLOSED makes that failure fail the job.
func (w *prediction) precompute(ctx workflow.Context, st activities.StageInfo) error {
	pol := w.prep.Policy
	plan, err := w.plan(ctx, st, false)
	if err != nil {
		return err
	}
	// A method that reads no embeddings (method J), or no sequence to embed:
	// no shared cache, no GPU, no tracker.
	if plan.NoPlan || plan.NoSequences {
		state := "not_required"
		return w.mark(ctx, activities.StageMark{JobID: w.in.JobID, StageIndex: st.Index, Status: "running", EmbeddingState: state})
	}
	if plan.Complete {
		return w.event(ctx, st, false, false, true, false, "cache_complete", "")
	}

	// From here files are missing: the tracker runs until the stage's
	// embedding phase ends, whichever road computes them.
	stopTracker := w.startTracker(ctx, st, plan)
	defer stopTracker()

	local := true
	switch {
	case w.prep.DisableGPU:
		err = w.event(ctx, st, false, false, false, false, "disabled_by_request", "")
	case !st.GPUEligible:
		err = w.event(ctx, st, false, false, false, false, "gpu_offload_not_applicable", "")
	case !pol.GPUConfigured:
		err = w.event(ctx, st, false, false, false, false, "not_configured", "")
	default:
		local, plan, err = w.remote(ctx, st, plan)
	}
	if err != nil {
		return err
	}
	if local && !plan.Complete {
		if err := w.local(ctx, st, plan); err != nil {
			return err
		}
	}
	return nil
}

// remote runs the GPU road. It returns whether local computation must still
// run (fail-open), and the latest plan.
func (w *prediction) remote(ctx workflow.Context, st activities.StageInfo, plan activities.PlanSummary) (bool, activities.PlanSummary, error) {
	pol := w.prep.Policy
	// failOrFallback records the failure and either fails the job
	// (fail-closed) or hands the work to local computation (fail-open).
	failOrFallback := func(attempted, usedGPU bool, reason string, msg ...string) (bool, activities.PlanSummary, error) {
		if err := w.event(ctx, st, attempted, usedGPU, false, true, reason, strings.Join(msg, "")); err != nil {
			return false, plan, err
		}
		if pol.FailClosed {
			return false, plan, &stageError{fmt.Sprintf("GPU precompute for method %s (%s) failed: %s (GPU_EMBED_FAIL_CLOSED=1)", st.MethodKey, st.Target, reason)}
		}
		return true, plan, w.event(ctx, st, attempted, usedGPU, false, true, "fallback_local", "computing the missing embeddings on the CPU worker")
	}

	w.setStage(ctx, st.Index, "gpu-health")
	var h activities.Health
	var hf workflow.Future
	if w.version(ctx, gpuHealthLocalVersion) >= 1 {
		hf = workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			// One HTTP GET with a 5 s client timeout, retried a little.
			StartToCloseTimeout: 30 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 2},
		}), a.GPUHealth)
	} else {
		hf = workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
			StartToCloseTimeout: 30 * time.Second,
			RetryPolicy:         &temporal.RetryPolicy{MaximumAttempts: 2},
		}), a.GPUHealth)
	}
	if err := hf.Get(ctx, &h); err != nil {
		return failOrFallback(true, false, "unreachable: "+userMessage(err))
	}
	if !h.Online {
		return failOrFallback(true, false, h.Reason)
	}
	if len(plan.Steps) == 0 {
		return false, plan, w.event(ctx, st, true, false, true, false, "no_missing_gpu_steps", "")
	}

	gpuJobID := gpuJobID(w.in.JobID, st.Index, workflow.GetInfo(ctx).Attempt)
	w.status.GPUJobID = gpuJobID
	in := embedjob.Input{
		HeartbeatSeconds: pol.HeartbeatSeconds,
		GPUJobID:         gpuJobID, MethodKey: st.MethodKey, Target: st.Target, Profile: plan.Profile,
		WorkFile: plan.WorkFile, GPUTaskQueue: pol.GPUTaskQueue, StepCounts: map[string]int{},
		ShardSeqs: pol.ShardSeqs, SmallStepSeqs: pol.GPUSmallStepSeqs, Rev: w.in.Rev, CacheFolders: pol.CacheFolders,
	}
	for _, s := range plan.Steps {
		in.Steps = append(in.Steps, s.StepKey)
		in.StepCounts[s.StepKey] = s.Count
	}
	if err := w.event(ctx, st, true, true, false, false, "submitted", fmt.Sprintf("GPU job %s: %d files in %d steps", gpuJobID, plan.Need, len(plan.Steps))); err != nil {
		return false, plan, err
	}
	w.setStage(ctx, st.Index, "gpu")
	cctx, cancel := workflow.WithCancel(ctx)
	var remoteJob workflow.Future // the GPU job: inline steps or an EmbedJob child
	if w.small && embedjob.SmallLaneOnly(in) && w.version(ctx, smallJobInlineGPUVersion) >= 1 {
		// A small job's small steps run in this workflow: the same
		// activities on the same queues, without a child of their own.
		f, set := workflow.NewFuture(cctx)
		workflow.Go(cctx, func(gctx workflow.Context) {
			set.Set(embedjob.RunInline(gctx, in))
		})
		remoteJob = f
	} else {
		cctx = workflow.WithChildOptions(cctx, workflow.ChildWorkflowOptions{
			WorkflowID:        embedjob.WorkflowID(gpuJobID),
			TaskQueue:         pol.GPUTaskQueue,
			ParentClosePolicy: enumspb.PARENT_CLOSE_POLICY_REQUEST_CANCEL,
			// A remote job that outlives our wait is cancelled, never left running.
			WaitForCancellation: false,
		})
		remoteJob = workflow.ExecuteChildWorkflow(cctx, embedjob.WorkflowName, in)
	}
	timeout := time.Duration(pol.JobTimeoutSeconds) * time.Second
	timer := workflow.NewTimer(cctx, timeout)

	var (
		remoteErr error
		timedOut  bool
		status    embedjob.Status
	)
	sel := workflow.NewSelector(ctx)
	sel.AddFuture(remoteJob, func(f workflow.Future) { remoteErr = f.Get(ctx, &status) })
	sel.AddFuture(timer, func(workflow.Future) { timedOut = true })
	sel.Select(ctx)
	cancel()
	w.status.GPUJobID = ""
	switch {
	case timedOut:
		if w.version(ctx, pollTimeoutPostCheckVersion) >= 1 {
			// At the deadline the files decide: a remote job that wrote
			// everything but did not report in time is done.
			w.setStage(ctx, st.Index, "post-check")
			if post, err := w.plan(ctx, st, true); err == nil {
				plan = post
				msg := fmt.Sprintf("remote job did not finish within GPU_EMBED_JOB_TIMEOUT_SECONDS=%d", pol.JobTimeoutSeconds)
				if post.Complete {
					return false, plan, w.event(ctx, st, true, true, true, false, "done_after_poll_timeout", msg+"; every file is there")
				}
				return failOrFallback(true, true, fmt.Sprintf("timeout_incomplete_remote_outputs:%d", post.Need), msg+fmt.Sprintf("; %d files missing", post.Need))
			}
		}
		return failOrFallback(true, true, fmt.Sprintf("gpu_request_failed: remote job did not finish within GPU_EMBED_JOB_TIMEOUT_SECONDS=%d", pol.JobTimeoutSeconds))
	case remoteErr != nil:
		// The reason is the wire's fixed word for a failed remote job,
		// which clients match; what failed goes in the event's message.
		return failOrFallback(true, true, "failed", "GPU job failed: "+shortReason(userMessage(remoteErr)))
	}

	// Post-check: trust files, not the remote job's word.
	w.setStage(ctx, st.Index, "post-check")
	post, err := w.plan(ctx, st, true)
	if err != nil {
		return failOrFallback(true, true, "postcheck_failed: "+userMessage(err))
	}
	plan = post
	if !post.Complete {
		if err := w.event(ctx, st, true, true, false, true, fmt.Sprintf("incomplete_remote_outputs:%d", post.Need), "remote job done, "+fmt.Sprint(post.Need)+" files missing"); err != nil {
			return false, plan, err
		}
		if pol.FailClosed {
			return false, plan, &stageError{fmt.Sprintf("GPU precompute for method %s (%s): remote job done but %d files are missing (GPU_EMBED_FAIL_CLOSED=1)", st.MethodKey, st.Target, post.Need)}
		}
		return true, plan, w.event(ctx, st, true, true, false, true, "fallback_local", "computing the missing embeddings on the CPU worker")
	}
	return false, plan, w.event(ctx, st, true, true, true, false, "done", "")
}

// local computes the plan's missing steps on the CPU queue with the same step
// activities the GPU host runs, then verifies the files.
func (w *prediction) local(ctx workflow.Context, st activities.StageInfo, plan activities.PlanSummary) error {
	w.setStage(ctx, st.Index, "embed-local")
	lctx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: w.prep.Policy.CPUTaskQueue,
		// Embedding 10,000 sequences on a CPU takes hours; heartbeats (files
		// done) find a dead worker, and the retry resumes from the files
		// already written.
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    w.heartbeat(),
		RetryPolicy:         longRetry,
	})
	run := embedjob.StepsRun{JobID: "local-" + w.in.JobID, WorkFile: plan.WorkFile, Counts: map[string]int{}, ShardSeqs: w.prep.Policy.ShardSeqs, Rev: w.in.Rev, CacheFolders: w.prep.Policy.CacheFolders}
	for _, s := range plan.Steps {
		run.Steps = append(run.Steps, s.StepKey)
		run.Counts[s.StepKey] = s.Count
	}
	if err := embedjob.RunSteps(ctx, lctx, run, func(string, embedjob.StepResult) {}); err != nil {
		return err
	}
	post, err := w.plan(ctx, st, true)
	if err != nil {
		return err
	}
	if !post.Complete {
		return &stageError{fmt.Sprintf("method %s (%s): %d embedding files are still missing after local computation", st.MethodKey, st.Target, post.Need)}
	}
	return w.event(ctx, st, false, false, true, false, "computed_locally", "")
}

// heavy runs a CPU-bound step (Predict, an annotation) with ao: a regular
// activity on the CPU queue, or, for a small job, a local activity in the
// workflow's own task with ao's retry policy, which saves the two Temporal
// round trips of an activity. A small job's steps are bounded (at most
// KINFLOW_SMALL_JOB_ROWS rows), and they take turns for the CPU
// (Activities.turn), so that running them locally never oversubscribes the
// worker. Idempotent either way: a retry finds the step's file and returns.
func (w *prediction) heavy(ctx workflow.Context, ao workflow.ActivityOptions, fn any, args ...any) workflow.Future {
	if w.small {
		return workflow.ExecuteLocalActivity(workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{
			// A small job's step: a method's program loading its model and
			// predicting 50 rows takes minutes at most.
			StartToCloseTimeout: 30 * time.Minute,
			RetryPolicy:         ao.RetryPolicy,
		}), fn, args...)
	}
	return workflow.ExecuteActivity(workflow.WithActivityOptions(ctx, ao), fn, args...)
}

// startTracker starts TrackProgress for the stage and returns a function that
// stops it.
//
// Since trackerQueueVersion the tracker runs on its own task queue
// (activities.TrackTaskQueue) with its own slots, and a stage missing fewer
// than KINFLOW_TRACK_MIN_FILES files runs none (its post-check records the
// count). No step of the job waits for its tracker, and stopping it waits at
// most trackerStopWait for its answer, so a tracker pool that is full or
// slow delays live progress, never a job (docs/workflows.md, "Slot pools
// and waits"). Before it, the tracker held a slot of the CPU queue for the
// whole embedding phase: enough concurrent jobs filled every slot with
// trackers whose own jobs then waited for a slot, for ever.
func (w *prediction) startTracker(ctx workflow.Context, st activities.StageInfo, plan activities.PlanSummary) func() {
	pol := w.prep.Policy
	own := w.version(ctx, trackerQueueVersion) >= 1
	if own && plan.Need < pol.TrackMinFiles {
		return func() {}
	}
	tctx, cancel := workflow.WithCancel(ctx)
	ao := workflow.ActivityOptions{
		// The tracker runs as long as the embedding phase; heartbeats every
		// second show it alive, and a retry resumes the same stage.
		StartToCloseTimeout: 48 * time.Hour,
		HeartbeatTimeout:    w.heartbeat(),
		WaitForCancellation: true,
		// Bounded like every policy: 20 attempts 30 s apart outlast any
		// worker restart; a tracker that still fails only loses live
		// progress, never the job (its error is ignored below).
		RetryPolicy: &temporal.RetryPolicy{MaximumAttempts: 20, MaximumInterval: 30 * time.Second},
	}
	if own {
		ao.TaskQueue = pol.TrackTaskQueue
		if ao.TaskQueue == "" {
			ao.TaskQueue = activities.TrackTaskQueue(pol.CPUTaskQueue)
		}
		// Waiting for a tracker slot longer than this is pointless: the
		// embedding phase it would watch is usually over by then.
		// (A schedule-to-start timeout is never retried.)
		ao.ScheduleToStartTimeout = 10 * time.Minute
	}
	f := workflow.ExecuteActivity(workflow.WithActivityOptions(tctx, ao), a.TrackProgress, activities.TrackInput{JobID: w.in.JobID, StageIndex: st.Index, PlanFile: plan.PlanFile})
	return func() {
		cancel()
		if !own {
			_ = f.Get(ctx, nil)
			return
		}
		// Its answer usually comes at once: a tracker not started yet is
		// cancelled by the server, a running one ends as soon as its last
		// file is there. Taking that answer here keeps it from arriving in
		// the middle of the job's last workflow task, which the server
		// would then refuse to complete (an unhandled event), running that
		// task's local activities (Predict, Finalize…) a second time. A
		// tracker slower than trackerStopWait is left behind: nothing
		// depends on it.
		tctx, stop := workflow.WithCancel(ctx)
		sel := workflow.NewSelector(ctx)
		sel.AddFuture(f, func(workflow.Future) {})
		sel.AddFuture(workflow.NewTimer(tctx, trackerStopWait), func(workflow.Future) {})
		sel.Select(ctx)
		stop()
	}
}

// trackerStopWait bounds how long a stage waits for its stopped tracker's
// answer (startTracker).
const trackerStopWait = 5 * time.Second

func (w *prediction) plan(ctx workflow.Context, st activities.StageInfo, post bool) (activities.PlanSummary, error) {
	var p activities.PlanSummary
	err := workflow.ExecuteLocalActivity(w.shortOptions(ctx), a.BuildPlan, activities.PlanInput{JobID: w.in.JobID, StageIndex: st.Index, PostCheck: post}).Get(ctx, &p)
	return p, err
}

func (w *prediction) event(ctx workflow.Context, st activities.StageInfo, attempted, usedGPU, completed, failed bool, reason, msg string) error {
	w.events++
	ev := activities.Event{JobID: w.in.JobID, StageIndex: st.Index, Attempted: attempted, UsedGPU: usedGPU, Completed: completed, Failed: failed, Reason: reason, Message: msg,
		Key: fmt.Sprintf("%s:%d", workflow.GetInfo(ctx).WorkflowExecution.RunID, w.events), MethodKey: st.MethodKey, Target: st.Target}
	return workflow.ExecuteLocalActivity(w.localOptions(ctx), a.RecordEvent, ev).Get(ctx, nil)
}

func (w *prediction) mark(ctx workflow.Context, m activities.StageMark) error {
	return workflow.ExecuteLocalActivity(w.localOptions(ctx), a.MarkStage, m).Get(ctx, nil)
}

// finalize ends the job: Completed when cause is nil, else Failed with a
// message meant for the user.
func (w *prediction) finalize(ctx workflow.Context, cause error) (PredictionResult, error) {
	w.setStage(ctx, w.status.StageIndex, "finalize")
	in := activities.FinalizeInput{JobID: w.in.JobID}
	if cause != nil {
		in.Failed = true
		in.Message = userMessage(cause)
	}
	// Finalize must run even when the workflow was cancelled.
	fctx, _ := workflow.NewDisconnectedContext(ctx)
	var res activities.FinalizeResult
	if err := workflow.ExecuteLocalActivity(w.shortOptions(fctx), a.Finalize, in).Get(fctx, &res); err != nil {
		if !w.rideOut || in.Failed {
			return PredictionResult{}, err
		}
		return w.failureFinalize(fctx, in, err)
	}
	w.setStage(ctx, w.status.StageIndex, strings.ToLower(res.Status))
	return PredictionResult{Status: res.Status, Message: in.Message}, nil
}

// failureFinalize is the workflow's own failure path (since rideOutVersion):
// Finalize failed even after riding out an outage, so the job is recorded
// as Failed with what stopped it — a result that could not be written is no
// reason to leave the job Processing and its rows charged. Finalize on
// failure needs only the database (it refunds the rows and writes no
// result). Should that fail too, the workflow fails and the API's job
// reconciler (api/reconcile_jobs.go) finishes the job once the database is
// back.
func (w *prediction) failureFinalize(fctx workflow.Context, in activities.FinalizeInput, cause error) (PredictionResult, error) {
	fin := activities.FinalizeInput{JobID: in.JobID, Failed: true, Message: userMessage(cause)}
	var res activities.FinalizeResult
	if err := workflow.ExecuteLocalActivity(w.shortOptions(fctx), a.Finalize, fin).Get(fctx, &res); err != nil {
		return PredictionResult{}, err
	}
	w.setStage(fctx, w.status.StageIndex, strings.ToLower(res.Status))
	return PredictionResult{Status: res.Status, Message: fin.Message}, nil
}

// heartbeat is the heartbeat timeout of long activities (KINFLOW_HEARTBEAT_TIMEOUT_SECONDS).
func (w *prediction) heartbeat() time.Duration {
	if s := w.prep.Policy.HeartbeatSeconds; s > 0 {
		return time.Duration(s) * time.Second
	}
	return time.Minute
}

// setStage records the job's current step for the status query and the
// Temporal UI's Stage search attribute (for a quiet job, only the steps of
// quietStages).
func (w *prediction) setStage(ctx workflow.Context, index int, stage string) {
	w.status.StageIndex, w.status.Stage = index, stage
	if w.quiet && !quietStages[stage] {
		return
	}
	label := stage
	if index < len(w.prep.Stages) && stage != "prepare" {
		s := w.prep.Stages[index]
		label = fmt.Sprintf("%d %s/%s %s", index, s.Target, s.MethodKey, stage)
	}
	_ = workflow.UpsertTypedSearchAttributes(ctx, SearchAttrStage.ValueSet(label))
}

// gpuJobID derives the remote job's 32-hex id from the job, the stage and the
// workflow attempt: deterministic on replay, fresh for a reset run.
func gpuJobID(jobID string, stage int, attempt int32) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s:%d:%d", jobID, stage, attempt)))
	return hex.EncodeToString(sum[:16])
}

// pollTimeoutPostCheckVersion names the change that runs the post-check
// when the remote phase reaches GPU_EMBED_JOB_TIMEOUT_SECONDS, giving the
// reasons done_after_poll_timeout and timeout_incomplete_remote_outputs:<n>
// (docs/workflows.md); before it, a timeout went straight to
// gpu_request_failed.
const pollTimeoutPostCheckVersion = "poll-timeout-post-check"

// trackerQueueVersion names the change that moved the progress tracker to
// its own task queue, skips it for small stages and, when stopping it,
// waits at most trackerStopWait for its answer (startTracker).
const trackerQueueVersion = "tracker-own-queue"

// recheckAfterReadVersion names the change that runs a stage's embedding
// phase and Predict again when Predict found cached files that changed while
// the method read them.
const recheckAfterReadVersion = "i34-recheck-after-read"

// maxRecheckRounds bounds those rounds: a file rewritten under every read
// (a broken writer, an attack) fails the stage rather than loop for ever;
// three is more than a race between two writers ever needs.
const maxRecheckRounds = 3

// smallJobLocalVersion names the change that runs a small job's Predict and
// annotations as local activities (prediction.heavy).
const smallJobLocalVersion = "small-job-local"

// smallJobInlineGPUVersion names the change that runs a small job's GPU steps
// inside PredictionWorkflow (embedjob.RunInline) when every one of them fits
// the GPU hosts' small lane whole, instead of in an EmbedJob child: the child
// cost the Temporal server about half its work for such a job
// (docs/BENCHMARKS.md). Histories from before it start the child, and replay
// the same way.
const smallJobInlineGPUVersion = "small-job-inline-gpu"

// quietStagesVersion names the change that upserts a small job's Stage search
// attribute only at the steps in quietStages. Every other step of a small job
// runs inside one workflow task (local activities), so its Stage value was
// never seen by anyone while it lasted, yet each upsert cost the Temporal
// server a command, an event, a search-attribute validation and a visibility
// write: 13 of a small job's 17 upserts (docs/BENCHMARKS.md, "The profile").
// The status query still names every step.
const quietStagesVersion = "i35-quiet-stages"

// quietStages are the steps whose Stage a quiet job upserts: where it waits
// for a child workflow or regular activities, and its end.
var quietStages = map[string]bool{"gpu": true, "embed-local": true, "completed": true, "failed": true}

// gpuHealthLocalVersion names the change that reads the GPU service's
// health as a local activity (one cached HTTP GET): one Temporal round trip
// less per stage that goes to the GPU.
const gpuHealthLocalVersion = "gpu-health-local"

// rideOutVersion names the change that bounds the bookkeeping steps' retries
// by KINFLOW_OUTAGE_RIDE_OUT_SECONDS instead of 8 attempts (rideOutOptions)
// and, when Finalize still fails, records the job as Failed
// (failureFinalize).
const rideOutVersion = "i33-ride-out"

// cleanupMarkVersion names the change that marks a stage failed when its
// Cleanup fails (docs/workflows.md).
const cleanupMarkVersion = "cleanup-marks-stage"

// shortReason is the first clause of a remote failure, at most 200
// characters, for the message of the job's gpuPrecompute event: the rest (missing-file
// lists, log paths) is the GPU host's detail, in its job log.
func shortReason(msg string) string {
	msg, _, _ = strings.Cut(msg, "; ")
	msg, _, _ = strings.Cut(msg, "\n")
	if len(msg) > 200 {
		msg = msg[:200] + "…"
	}
	return msg
}

// userMessage extracts the message an activity or child failure carries,
// without Temporal's wrapping.
func userMessage(err error) string {
	var se *stageError
	if errors.As(err, &se) {
		return se.msg
	}
	return embedjob.ErrorText(err)
}
