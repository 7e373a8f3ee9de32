package workflows

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/mock"
	"github.com/stretchr/testify/require"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/activities"
	"github.com/kinflow/kinflow/internal/embedjob"
)

// harness runs PredictionWorkflow with every activity mocked and records the
// order in which things happen.
type harness struct {
	testsuite.WorkflowTestSuite
	env *testsuite.TestWorkflowEnvironment
	// sched is the order in which the workflow scheduled activities and
	// child workflows, recorded by an interceptor on the workflow thread.
	sched     []string
	mu        sync.Mutex
	log       []string
	events    []activities.Event
	childIn   *embedjob.Input
	finalized activities.FinalizeInput
	localRuns []string
	childFn   func(ctx workflow.Context) error
	// predictErr, when set, is Predict's answer.
	predictErr error
	// annotated are the annotation activities that ran, in order.
	annotated []string
	// finalizeErr, when set, is asked before each Finalize: a database that
	// fails at the job's end.
	finalizeErr func(activities.FinalizeInput) error
}

func newHarness(t *testing.T, policy activities.Policy, stage activities.StageInfo) *harness {
	h := &harness{}
	h.env = h.NewTestWorkflowEnvironment()
	env := h.env
	env.SetWorkerOptions(worker.Options{Interceptors: []interceptor.WorkerInterceptor{&orderInterceptor{h: h}}})
	env.RegisterWorkflowWithOptions(PredictionWorkflow, workflow.RegisterOptions{Name: PredictionWorkflowName})
	env.RegisterActivity(&activities.Activities{})
	for _, step := range []string{"prot_t5_mean", "methoda_t5_full", "methoda_esm2_layers"} {
		env.RegisterActivityWithOptions(func(_ context.Context, in embedjob.StepInput) (embedjob.StepResult, error) {
			h.note("local:" + in.StepKey)
			h.localRuns = append(h.localRuns, in.StepKey)
			return embedjob.StepResult{StepKey: in.StepKey}, nil
		}, activity.RegisterOptions{Name: step})
	}
	env.RegisterWorkflowWithOptions(func(ctx workflow.Context, in embedjob.Input) (embedjob.Status, error) {
		h.childIn = &in
		h.note("child-start")
		return embedjob.Status{State: "done"}, h.childFn(ctx)
	}, workflow.RegisterOptions{Name: embedjob.WorkflowName})
	env.OnActivity(a.PrepareInput, mock.Anything, mock.Anything).Return(activities.PreparedJob{
		Rows: 3, Stages: []activities.StageInfo{stage}, Policy: policy,
	}, nil)
	env.OnActivity(a.MarkStage, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(a.RecordEvent, mock.Anything, mock.Anything).Return(func(_ context.Context, ev activities.Event) error {
		h.events = append(h.events, ev)
		h.note("event:" + ev.Reason)
		return nil
	})
	// The tracker returns at once: an activity blocking in real time would
	// stop the test environment from skipping workflow time.
	env.OnActivity(a.TrackProgress, mock.Anything, mock.Anything).Return(func(ctx context.Context, _ activities.TrackInput) error {
		h.note("tracker-start")
		return nil
	})
	env.OnActivity(a.Predict, mock.Anything, mock.Anything).Return(func(context.Context, activities.StageRef) (activities.PredictResult, error) {
		h.note("predict")
		if h.predictErr != nil {
			return activities.PredictResult{}, h.predictErr
		}
		return activities.PredictResult{Predicted: 3}, nil
	})
	env.OnActivity(a.Cleanup, mock.Anything, mock.Anything).Return(nil)
	env.OnActivity(a.TrainingSimilarity, mock.Anything, mock.Anything).Return(func(context.Context, activities.JobRef) (activities.AnnotationResult, error) {
		h.annotated = append(h.annotated, "similarity")
		return activities.AnnotationResult{State: activities.AnnotationDone}, nil
	})
	env.OnActivity(a.LookupExperimental, mock.Anything, mock.Anything).Return(func(context.Context, activities.JobRef) (activities.AnnotationResult, error) {
		h.annotated = append(h.annotated, "experimental")
		return activities.AnnotationResult{}, errors.New("table unreadable")
	})
	env.OnActivity(a.Finalize, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.FinalizeInput) (activities.FinalizeResult, error) {
		if h.finalizeErr != nil {
			if err := h.finalizeErr(in); err != nil {
				return activities.FinalizeResult{}, err
			}
		}
		h.finalized = in
		if in.Failed {
			return activities.FinalizeResult{Status: "Failed"}, nil
		}
		return activities.FinalizeResult{Status: "Completed"}, nil
	})
	return h
}

// plans makes BuildPlan answer first, then post-check plans in turn.
func (h *harness) plans(first activities.PlanSummary, posts ...activities.PlanSummary) {
	h.env.OnActivity(a.BuildPlan, mock.Anything, mock.Anything).Return(func(_ context.Context, in activities.PlanInput) (activities.PlanSummary, error) {
		if !in.PostCheck {
			h.note("plan")
			return first, nil
		}
		h.note("post-check")
		p := posts[0]
		if len(posts) > 1 {
			posts = posts[1:]
		}
		return p, nil
	})
}

// child sets what the fake EmbedJob does after recording its input.
func (h *harness) child(fn func(ctx workflow.Context) error) { h.childFn = fn }

// note records what a mocked activity did; activities run on goroutines.
func (h *harness) note(what string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.log = append(h.log, what)
}

func (h *harness) health(hl activities.Health) {
	h.env.OnActivity(a.GPUHealth, mock.Anything).Return(hl, nil)
}

func (h *harness) run(t *testing.T) PredictionResult {
	h.env.ExecuteWorkflow(PredictionWorkflowName, PredictionInput{JobID: "JobJobJobJobJobJobJob1"})
	require.True(t, h.env.IsWorkflowCompleted())
	require.NoError(t, h.env.GetWorkflowError())
	var res PredictionResult
	require.NoError(t, h.env.GetWorkflowResult(&res))
	return res
}

func (h *harness) reasons() []string {
	var out []string
	for _, e := range h.events {
		out = append(out, e.Reason)
	}
	return out
}

var (
	gpuPolicy = activities.Policy{GPUConfigured: true, JobTimeoutSeconds: 600, GPUTaskQueue: "gpu", CPUTaskQueue: "cpu"}
	stageB    = activities.StageInfo{Index: 0, Target: "kcat", MethodKey: "B", Profile: "prot_t5_mean", GPUEligible: true, ValidRows: 3}
	missing   = activities.PlanSummary{Profile: "prot_t5_mean", Total: 3, Cached: 1, Need: 2,
		Steps: []activities.StepCount{{StepKey: "prot_t5_mean", Count: 2}}, WorkFile: "/m/jobs/x/work.json", PlanFile: "/m/jobs/x/plan.json"}
	complete = activities.PlanSummary{Profile: "prot_t5_mean", Total: 3, Cached: 3, Complete: true, PlanFile: "/m/jobs/x/plan.json"}
)

func TestCacheCompleteSkipsEmbedding(t *testing.T) {
	h := newHarness(t, gpuPolicy, stageB)
	h.plans(complete)
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.Equal(t, []string{"cache_complete"}, h.reasons())
	require.Empty(t, h.localRuns)
	require.NotContains(t, h.sched, "activity:TrackProgress")
	// The annotations run after the stages; a failing one is retried (5
	// attempts), then leaves the job Completed.
	require.Equal(t, []string{"similarity", "experimental", "experimental", "experimental", "experimental", "experimental"}, h.annotated)
	require.Nil(t, h.childIn)
}

func TestTrackerStartsBeforeRemoteSubmissionAndWorkIsSparse(t *testing.T) {
	h := newHarness(t, gpuPolicy, stageB)
	h.plans(missing, complete)
	h.health(activities.Health{Configured: true, Online: true})
	h.child(func(ctx workflow.Context) error { return workflow.Sleep(ctx, time.Second) })
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)

	tracker := indexOf(h.sched, "activity:TrackProgress")
	child := indexOf(h.sched, "child:EmbedJob")
	require.GreaterOrEqual(t, tracker, 0, "tracker never scheduled: %v", h.sched)
	require.Greater(t, child, tracker, "the tracker must start before the remote submission: %v", h.sched)

	// The child gets exactly the plan's missing steps, by reference.
	require.NotNil(t, h.childIn)
	require.Equal(t, []string{"prot_t5_mean"}, h.childIn.Steps)
	require.Equal(t, map[string]int{"prot_t5_mean": 2}, h.childIn.StepCounts)
	require.Equal(t, missing.WorkFile, h.childIn.WorkFile)
	require.Equal(t, "gpu", h.childIn.GPUTaskQueue)
	require.Len(t, h.childIn.GPUJobID, 32)

	require.Equal(t, []string{"submitted", "done"}, h.reasons())
	require.Empty(t, h.localRuns)
	require.Less(t, lastIndexOf(h.sched, "activity:BuildPlan"), indexOf(h.sched, "activity:Predict"))
}

func TestRemoteFailureFallsBackToLocal(t *testing.T) {
	h := newHarness(t, gpuPolicy, stageB)
	h.plans(missing, complete)
	h.health(activities.Health{Configured: true, Online: true})
	h.child(func(ctx workflow.Context) error {
		return temporal.NewApplicationError("step prot_t5_mean: GPU exploded; 3 of 3 files missing: /media/a.npy", "EmbedStepFailed")
	})
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.Equal(t, []string{"submitted", "failed", "fallback_local", "computed_locally"}, h.reasons())
	require.Equal(t, []string{"prot_t5_mean"}, h.localRuns)
	require.True(t, h.events[1].Failed)
	// The child's own words reach the event, without the paths after them.
	require.Equal(t, "GPU job failed: step prot_t5_mean: GPU exploded", h.events[1].Message)
}

func TestPostCheckCatchesRemoteDoneWithMissingFiles(t *testing.T) {
	h := newHarness(t, gpuPolicy, stageB)
	stillMissing := missing
	stillMissing.Need, stillMissing.Steps = 1, []activities.StepCount{{StepKey: "prot_t5_mean", Count: 1}}
	h.plans(missing, stillMissing, complete)
	h.health(activities.Health{Configured: true, Online: true})
	h.child(func(ctx workflow.Context) error { return nil })
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.Equal(t, []string{"submitted", "incomplete_remote_outputs:1", "fallback_local", "computed_locally"}, h.reasons())
	require.Equal(t, []string{"prot_t5_mean"}, h.localRuns)
}

func TestFailClosedFailsFast(t *testing.T) {
	pol := gpuPolicy
	pol.FailClosed = true
	h := newHarness(t, pol, stageB)
	h.plans(missing, complete)
	h.health(activities.Health{Configured: true, Online: false, Reason: "unreachable: connection refused"})
	res := h.run(t)
	require.Equal(t, "Failed", res.Status)
	require.True(t, h.finalized.Failed)
	require.Contains(t, h.finalized.Message, "GPU_EMBED_FAIL_CLOSED=1")
	require.Contains(t, h.finalized.Message, "unreachable")
	require.Empty(t, h.localRuns)
	require.NotContains(t, h.sched, "activity:Predict")
	require.Nil(t, h.childIn)
}

func TestFailOpenOnOfflineGPU(t *testing.T) {
	h := newHarness(t, gpuPolicy, stageB)
	h.plans(missing, complete)
	h.health(activities.Health{Configured: true, Online: false, Reason: "remote_offline"})
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.Equal(t, []string{"remote_offline", "fallback_local", "computed_locally"}, h.reasons())
	require.True(t, h.events[0].Attempted)
	require.True(t, h.events[0].Failed)
	require.Equal(t, []string{"prot_t5_mean"}, h.localRuns)
}

func TestRemoteTimeoutFallsBackToLocal(t *testing.T) {
	pol := gpuPolicy
	pol.JobTimeoutSeconds = 30
	h := newHarness(t, pol, stageB)
	h.plans(missing, missing, complete)
	h.health(activities.Health{Configured: true, Online: true})
	h.child(func(ctx workflow.Context) error { return workflow.Sleep(ctx, time.Hour) })
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	reasons := h.reasons()
	// The post-check at the deadline finds the files still missing.
	require.Equal(t, []string{"submitted", "timeout_incomplete_remote_outputs:2", "fallback_local", "computed_locally"}, reasons)
	require.True(t, h.events[1].Failed && h.events[1].Attempted && h.events[1].UsedGPU && !h.events[1].Completed)
	require.Contains(t, h.events[1].Message, "GPU_EMBED_JOB_TIMEOUT_SECONDS=30")
	require.Equal(t, []string{"prot_t5_mean"}, h.localRuns)
}

func TestRemoteTimeoutWithEveryFileIsDone(t *testing.T) {
	pol := gpuPolicy
	pol.JobTimeoutSeconds = 30
	h := newHarness(t, pol, stageB)
	h.plans(missing, complete)
	h.health(activities.Health{Configured: true, Online: true})
	h.child(func(ctx workflow.Context) error { return workflow.Sleep(ctx, time.Hour) })
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.Equal(t, []string{"submitted", "done_after_poll_timeout"}, h.reasons())
	ev := h.events[1]
	require.True(t, ev.Attempted && ev.UsedGPU && ev.Completed && !ev.Failed)
	require.Empty(t, h.localRuns)
}

func TestGPUNotConfiguredComputesLocally(t *testing.T) {
	h := newHarness(t, activities.Policy{CPUTaskQueue: "cpu"}, stageB)
	h.plans(missing, complete)
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.Equal(t, []string{"not_configured", "computed_locally"}, h.reasons())
	require.Less(t, indexOf(h.sched, "activity:TrackProgress"), indexOf(h.sched, "activity:prot_t5_mean"))
}

func TestMethodJHasNoPlanNoGPUNoTracker(t *testing.T) {
	h := newHarness(t, gpuPolicy, activities.StageInfo{Index: 0, Target: "Km", MethodKey: "J", ValidRows: 3})
	h.plans(activities.PlanSummary{NoPlan: true})
	res := h.run(t)
	require.Equal(t, "Completed", res.Status)
	require.Empty(t, h.events)
	require.NotContains(t, h.sched, "activity:TrackProgress")
	require.Contains(t, h.sched, "activity:Predict")
}

func TestPredictionErrorFailsTheJobWithItsMessage(t *testing.T) {
	h := newHarness(t, gpuPolicy, stageB)
	h.plans(complete)
	h.predictErr = temporal.NewNonRetryableApplicationError("Method B prediction failed with an internal error.", activities.ErrPrediction, errors.New("exit 1"))
	res := h.run(t)
	require.Equal(t, "Failed", res.Status)
	require.Equal(t, "Method B prediction failed with an internal error.", h.finalized.Message)
	require.Empty(t, h.annotated, "a failed job is not annotated")
}

func indexOf(s []string, v string) int {
	for i, x := range s {
		if x == v {
			return i
		}
	}
	return -1
}

func lastIndexOf(s []string, v string) int {
	for i := len(s) - 1; i >= 0; i-- {
		if s[i] == v {
			return i
		}
	}
	return -1
}

// orderInterceptor records, on the workflow thread, every activity and child
// workflow PredictionWorkflow schedules, in order.
type orderInterceptor struct {
	interceptor.WorkerInterceptorBase
	h *harness
}

func (o *orderInterceptor) InterceptWorkflow(ctx workflow.Context, next interceptor.WorkflowInboundInterceptor) interceptor.WorkflowInboundInterceptor {
	if workflow.GetInfo(ctx).WorkflowType.Name != PredictionWorkflowName {
		return next
	}
	return &orderInbound{WorkflowInboundInterceptorBase: interceptor.WorkflowInboundInterceptorBase{Next: next}, h: o.h}
}

type orderInbound struct {
	interceptor.WorkflowInboundInterceptorBase
	h *harness
}

func (i *orderInbound) Init(out interceptor.WorkflowOutboundInterceptor) error {
	return i.Next.Init(&orderOutbound{WorkflowOutboundInterceptorBase: interceptor.WorkflowOutboundInterceptorBase{Next: out}, h: i.h})
}

type orderOutbound struct {
	interceptor.WorkflowOutboundInterceptorBase
	h *harness
}

func (o *orderOutbound) ExecuteActivity(ctx workflow.Context, activityType string, args ...interface{}) workflow.Future {
	o.h.sched = append(o.h.sched, "activity:"+activityType)
	return o.Next.ExecuteActivity(ctx, activityType, args...)
}

func (o *orderOutbound) ExecuteLocalActivity(ctx workflow.Context, activityType string, args ...interface{}) workflow.Future {
	o.h.sched = append(o.h.sched, "activity:"+activityType)
	return o.Next.ExecuteLocalActivity(ctx, activityType, args...)
}

func (o *orderOutbound) ExecuteChildWorkflow(ctx workflow.Context, childWorkflowType string, args ...interface{}) workflow.ChildWorkflowFuture {
	o.h.sched = append(o.h.sched, "child:"+childWorkflowType)
	return o.Next.ExecuteChildWorkflow(ctx, childWorkflowType, args...)
}
