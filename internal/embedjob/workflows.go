package embedjob

import (
	"errors"
	"strings"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/workflow"
)

// EmbedJob is one GPU embedding job: the steps of its work, in order, each an
// activity whose type is the step key, on the GPU task queue. The backend
// starts it as a child of PredictionWorkflow for every job but a small one
// (RunInline); the GPU service's POST /embed/jobs starts the very same
// workflow. Its status query serves GET /embed/jobs/{job_id}.
func EmbedJob(ctx workflow.Context, in Input) (Status, error) {
	st := newStatus(in)
	if err := workflow.SetQueryHandler(ctx, StatusQuery, func() (Status, error) { return *st, nil }); err != nil {
		return *st, err
	}
	return runJob(ctx, in, st)
}

// RunInline runs a GPU job's steps inside the calling workflow: the same
// activities, options and queues as EmbedJob, without an execution of its
// own. PredictionWorkflow runs a small job's steps so: a child
// workflow per 3-row job was half of the Temporal server's work for it
// (its start, two workflow tasks, three visibility records and its close,
// and a workflow task of the parent for each of its start and end).
func RunInline(ctx workflow.Context, in Input) (Status, error) {
	return runJob(ctx, in, newStatus(in))
}

func newStatus(in Input) *Status {
	st := &Status{State: "queued", Steps: map[string]int{}, StepTotals: map[string]int{}, Written: map[string]int{}}
	for _, s := range in.Steps {
		st.StepTotals[s] = in.StepCounts[s]
	}
	return st
}

// runJob runs in's steps, keeping st up to date.
func runJob(ctx workflow.Context, in Input, st *Status) (Status, error) {
	started := workflow.Now(ctx)
	st.State, st.StartedAt = "running", &started

	heartbeat := time.Minute
	if in.HeartbeatSeconds > 0 {
		heartbeat = time.Duration(in.HeartbeatSeconds) * time.Second
	}
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{
		TaskQueue: in.GPUTaskQueue,
		// A step over 10,000 sequences can run for hours on one GPU; the
		// parent bounds the whole remote phase by GPU_EMBED_JOB_TIMEOUT_SECONDS.
		// Heartbeats (files done) find a dead GPU host, and the retry
		// resumes from the files already written.
		StartToCloseTimeout: 24 * time.Hour,
		HeartbeatTimeout:    heartbeat,
		RetryPolicy: &temporal.RetryPolicy{
			InitialInterval:        2 * time.Second,
			BackoffCoefficient:     2,
			MaximumInterval:        time.Minute,
			MaximumAttempts:        3,
			NonRetryableErrorTypes: []string{ErrTypeInvalidStepInput, ErrTypeStepConfig},
		},
	})
	run := StepsRun{JobID: in.GPUJobID, WorkFile: in.WorkFile, Steps: in.Steps, Counts: in.StepCounts, ShardSeqs: in.ShardSeqs, Rev: in.Rev, CacheFolders: in.CacheFolders}
	if in.SmallStepSeqs > 0 && in.GPUTaskQueue != "" {
		run.SmallTaskQueue, run.SmallSeqs = config.SmallTaskQueue(in.GPUTaskQueue), in.SmallStepSeqs
	}
	err := RunSteps(ctx, actx, run,
		func(step string, res StepResult) {
			// Done counts sequences, like StepTotals: those with no file missing.
			st.Steps[step] += res.Requested - res.MissingSeqs
			st.Written[step] += res.Written
		})
	if err != nil {
		finished := workflow.Now(ctx)
		st.State, st.FinishedAt, st.Error = "failed", &finished, err.Error()
		return *st, temporal.NewApplicationError(st.Error, ErrTypeEmbedStepFailed)
	}
	finished := workflow.Now(ctx)
	st.State, st.FinishedAt = "done", &finished
	return *st, nil
}

// SmallLaneOnly says whether every step of in runs whole (one shard) on the
// GPU hosts' small lane.
func SmallLaneOnly(in Input) bool {
	if in.SmallStepSeqs <= 0 || in.GPUTaskQueue == "" || len(in.Steps) == 0 {
		return false
	}
	for _, s := range in.Steps {
		if n := in.StepCounts[s]; n > in.SmallStepSeqs || ShardCount(n, in.ShardSeqs) > 1 {
			return false
		}
	}
	return true
}

// ShardsVersion names the workflow change that cut large steps into shards
// (docs/workflows.md): histories from before it run each step as one
// activity, and replay the same way.
const ShardsVersion = "step-shards"

// StepsRun is what RunSteps runs.
type StepsRun struct {
	// JobID names the job in the step activities' input ("local-<job id>"
	// for the CPU worker's local steps).
	JobID    string
	WorkFile string
	// Steps are run in this order: a step may need an earlier one's files
	// (method A's weighted vectors need methoda_t5_full's binding sites).
	Steps []string
	// Counts are each step's sequences; ShardSeqs the shard size (0:
	// DefaultShardSeqs).
	Counts    map[string]int
	ShardSeqs int
	// SmallTaskQueue, when set, runs each step of at most SmallSeqs
	// sequences there instead of on actx's queue (the GPU small lane).
	SmallTaskQueue string
	SmallSeqs      int
	// Rev is the run's workflow revision (Input.Rev): from 1, ShardsVersion
	// and SmallLaneVersion are taken at version 1 without a marker.
	Rev int
	// CacheFolders is the submitter's folder naming, passed to every step
	// (StepInput.CacheFolders).
	CacheFolders string
}

// Rev is the workflow revision that new runs of both workflows
// (PredictionWorkflow, EmbedJob) start under. Revision 1 covers every change
// of docs/workflows.md's table up to i35-notify-job.
const Rev = 1

// ChangeVersion is workflow.GetVersion(ctx, change, DefaultVersion, 1) for
// a run started at revision rev: a run at revision 1 or later takes every
// change that revision 1 covers (docs/workflows.md) at version 1 without
// asking, so its history records no version marker and no
// TemporalChangeVersion upsert for it (the SDK upserts one per GetVersion:
// 9 markers and 9 upserts were 18 of a small job's 48 events). A run at
// revision 0 was started before revisions and asks, as it always did; the
// SDK skips a version marker that no GetVersion asks for in replay, so
// either road replays.
func ChangeVersion(ctx workflow.Context, rev int, change string) workflow.Version {
	if rev >= 1 {
		return 1
	}
	return workflow.GetVersion(ctx, change, workflow.DefaultVersion, 1)
}

// SmallLaneVersion names the change that sends small steps to the GPU
// hosts' small lane (SmallTaskQueue).
const SmallLaneVersion = "gpu-small-lane"

// RunSteps runs the steps of r in order with actx's activity options. A step
// of more than ShardSeqs sequences is cut into shards (ShardCount), each its
// own activity, at most MaxConcurrentShards in flight, so that every GPU host
// on the queue takes a share; the next step starts once every shard of the
// one before has ended. done is called with each shard's result. The first
// failure stops the launch of further shards; those in flight are awaited,
// then the failure is returned as "step <key>: <reason>".
func RunSteps(ctx, actx workflow.Context, r StepsRun, done func(step string, res StepResult)) error {
	sharded := ChangeVersion(ctx, r.Rev, ShardsVersion) >= 1
	lane := r.SmallTaskQueue != "" && ChangeVersion(ctx, r.Rev, SmallLaneVersion) >= 1
	for _, step := range r.Steps {
		n := 1
		if sharded {
			n = ShardCount(r.Counts[step], r.ShardSeqs)
		}
		sctx := actx
		if lane && n == 1 && r.Counts[step] <= r.SmallSeqs {
			sctx = workflow.WithTaskQueue(actx, r.SmallTaskQueue)
		}
		var firstErr error
		pending, next := 0, 0
		sel := workflow.NewSelector(ctx)
		launch := func() {
			in := StepInput{GPUJobID: r.JobID, StepKey: step, WorkFile: r.WorkFile, CacheFolders: r.CacheFolders}
			if n > 1 {
				in.Shard, in.Shards = next, n
			}
			next++
			pending++
			sel.AddFuture(workflow.ExecuteActivity(sctx, step, in), func(f workflow.Future) {
				pending--
				var res StepResult
				if err := f.Get(ctx, &res); err != nil {
					if firstErr == nil {
						firstErr = err
					}
					return
				}
				done(step, res)
			})
		}
		for next < n && pending < MaxConcurrentShards {
			launch()
		}
		for pending > 0 {
			sel.Select(ctx)
			if firstErr == nil && next < n {
				launch()
			}
		}
		if firstErr != nil {
			msg := ErrorText(firstErr)
			if !strings.HasPrefix(msg, "step "+step+":") {
				msg = "step " + step + ": " + msg
			}
			return errors.New(msg)
		}
	}
	return nil
}

// ErrorText is the readable text of an error returned to workflow code: an
// application error's own message (not the SDK's wrapping of it), a timeout
// or cancellation in words. Both workflows use it for the messages users and
// operators read.
func ErrorText(err error) string {
	var appErr *temporal.ApplicationError
	if errors.As(err, &appErr) {
		return appErr.Message()
	}
	var tErr *temporal.TimeoutError
	if errors.As(err, &tErr) {
		return "a step timed out (" + tErr.TimeoutType().String() + ")"
	}
	var cErr *temporal.CanceledError
	if errors.As(err, &cErr) {
		return "the job was cancelled"
	}
	return err.Error()
}
