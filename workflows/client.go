package workflows

import (
	"time"

	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"
)

// Starter starts prediction jobs on Temporal; it implements the API's
// JobStarter.
type Starter struct {
	Client    client.Client
	TaskQueue string
	// Describe, when set, reads what the job's start needs from its row:
	// its summary for the workflow's memo (shown by the Temporal UI and
	// `temporal workflow describe`) and its priority and fairness key
	// (internal/fairness), which its activities and child workflows
	// inherit. A job that cannot be described starts without a memo, at
	// Temporal's default priority, under no fairness key: the memo is for
	// operators' eyes only, and the job is still served.
	Describe func(ctx context.Context, jobID string) (JobStart, error)
	// Log, when set, hears of a job that could not be described.
	Log *slog.Logger
	// Eager asks the server to hand the workflow's first task straight to
	// a worker of this process in the start's answer (eager workflow
	// start), saving the task's dispatch through the matching service. Set
	// only where a worker of TaskQueue runs on Client in this process
	// (`kinflow dev`); the server falls back to a normal start otherwise.
	Eager bool
}

// JobStart is what Describe reads about a job for its start.
type JobStart struct {
	Summary  JobSummary
	Priority temporal.Priority
}

// MemoSummary is the memo key of a prediction workflow's JobSummary.
const MemoSummary = "summary"

// JobSummary is what an operator reads about a job at a glance in the
// Temporal UI: the targets, the method of each, and the rows submitted.
type JobSummary struct {
	// Targets are the canonical targets joined with "+" (kcat+Km).
	Targets string `json:"targets"`
	// Methods maps each target to its method key.
	Methods map[string]string `json:"methods"`
	Rows    int               `json:"rows"`
}

// StartJob starts PredictionWorkflow for jobID with the ID prediction:<jobID>.
// The reuse policy refuses a second run of the same job id, so a repeated
// call can never run a job twice.
func (s Starter) StartJob(ctx context.Context, jobID string) error {
	var memo map[string]any
	in := PredictionInput{JobID: jobID, Rev: Rev}
	attrs := []temporal.SearchAttributeUpdate{SearchAttrJobID.ValueSet(jobID), SearchAttrStage.ValueSet("queued")}
	var prio temporal.Priority
	if s.Describe != nil {
		d, err := s.Describe(ctx, jobID)
		if err != nil && s.Log != nil {
			s.Log.Warn("job.describe_failed: started without memo and priority", "job_id", jobID, "error", err)
		}
		if err == nil {
			sum := d.Summary
			prio = d.Priority
			memo = map[string]any{MemoSummary: sum}
			// The methods in stage order, as the workflow upserts them
			// after PrepareInput: an operator sees them while the job
			// waits in the queue.
			var keys []string
			for _, t := range strings.Split(sum.Targets, "+") {
				keys = append(keys, sum.Methods[t])
			}
			attrs = append(attrs, SearchAttrMethod.ValueSet(strings.Join(keys, ",")))
		}
	}
	_, err := s.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
		Memo:                     memo,
		ID:                       PredictionWorkflowID(jobID),
		TaskQueue:                s.TaskQueue,
		WorkflowIDReusePolicy:    enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
		WorkflowIDConflictPolicy: enumspb.WORKFLOW_ID_CONFLICT_POLICY_FAIL,
		TypedSearchAttributes:    temporal.NewSearchAttributes(attrs...),
		WorkflowTaskTimeout:      WorkflowTaskTimeout,
		EnableEagerStart:         s.Eager,
		Priority:                 prio,
	}, PredictionWorkflowName, in)
	if err != nil {
		return fmt.Errorf("start workflow for job %s: %w", jobID, err)
	}
	return nil
}

// RegisterCPU registers the workflows of the CPU task queue.
func RegisterCPU(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(PredictionWorkflow, workflow.RegisterOptions{Name: PredictionWorkflowName})
}

// WorkflowTaskTimeout bounds one workflow task of a prediction job, and so
// how long a task the Temporal server loses keeps its job waiting. Under a
// burst on a starved host the server loses one now and then: its matching
// service gives history's RecordWorkflowTaskStarted 1 s for a task matched at
// once to a waiting poller (recordTaskStartedSyncMatchTimeout, not
// configurable in server v1.30); a write that commits after that leaves the
// task recorded as started by a worker that never receives it, and only this
// timeout frees it (docs/BENCHMARKS.md, "Why the topology loses a
// workflow task, and a 10 s timeout"). It was 30 s while a stopped tracker's
// answer could land in a job's last task (its local activities then ran
// twice); since the tracker's stop is bounded (trackerStopWait) a task took
// about a second at most even at a burst's busiest (0.4–1.0 s in the
// production topology's test), and the SDK heartbeats a task whose local
// activities run longer (at 80 % of this). Temporal's own default.
const WorkflowTaskTimeout = 10 * time.Second

// Workflow states as JobWorkflowState reports them.
const (
	WorkflowRunning  = "Running"
	WorkflowNotFound = "NotFound"
)

// JobWorkflowState reports the state of job jobID's workflow
// (prediction:<jobID>, its latest run): WorkflowRunning, WorkflowNotFound
// (never started, or removed after the namespace's retention), or the name
// of how it closed ("Completed", "Failed", "Canceled", "Terminated",
// "TimedOut", "ContinuedAsNew"). It implements the API's JobWorkflows.
func (s Starter) JobWorkflowState(ctx context.Context, jobID string) (string, error) {
	d, err := s.Client.DescribeWorkflowExecution(ctx, PredictionWorkflowID(jobID), "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return WorkflowNotFound, nil
		}
		return "", err
	}
	switch d.GetWorkflowExecutionInfo().GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		return "Completed", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_FAILED:
		return "Failed", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_CANCELED:
		return "Canceled", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TERMINATED:
		return "Terminated", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_TIMED_OUT:
		return "TimedOut", nil
	case enumspb.WORKFLOW_EXECUTION_STATUS_CONTINUED_AS_NEW:
		return "ContinuedAsNew", nil
	}
	return WorkflowRunning, nil
}
