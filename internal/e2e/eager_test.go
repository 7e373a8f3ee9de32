package e2e

import (
	"context"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/workflows"
)

// TestEagerWorkflowStart: with Starter.Eager (as `kinflow dev` sets it, its
// CPU worker on the same client), the Temporal dev server hands the first
// workflow task back in the start's answer: the history's first
// WorkflowTaskStarted carries the starting client's identity, not the
// worker's, which took it from no poll. Without Eager (the production
// topology: an api process without a worker) the worker polls it.
func TestEagerWorkflowStart(t *testing.T) {
	tmpl := testenv.MustTemporal(t)
	c, err := client.Dial(client.Options{HostPort: tmpl.Server.FrontendHostPort(), Namespace: "default", Identity: "kinflow-api-client"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	queue := "eager-" + testenv.RandHex(4)
	w := worker.New(c, queue, worker.Options{Identity: "kinflow-cpu-worker"})
	// A stand-in for the prediction workflow: only its first task matters.
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context, _ workflows.PredictionInput) (workflows.PredictionResult, error) {
		return workflows.PredictionResult{Status: "Completed"}, nil
	}, workflow.RegisterOptions{Name: workflows.PredictionWorkflowName})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	firstTaskBy := func(eager bool) string {
		t.Helper()
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		job := "eager" + testenv.RandHex(8)
		if err := (workflows.Starter{Client: c, TaskQueue: queue, Eager: eager}).StartJob(ctx, job); err != nil {
			t.Fatal(err)
		}
		if err := c.GetWorkflow(ctx, workflows.PredictionWorkflowID(job), "").Get(ctx, nil); err != nil {
			t.Fatal(err)
		}
		it := c.GetWorkflowHistory(ctx, workflows.PredictionWorkflowID(job), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
		for it.HasNext() {
			ev, err := it.Next()
			if err != nil {
				t.Fatal(err)
			}
			if a := ev.GetWorkflowTaskStartedEventAttributes(); a != nil {
				return a.GetIdentity()
			}
		}
		t.Fatal("no WorkflowTaskStarted event")
		return ""
	}
	if got := firstTaskBy(true); got != "kinflow-api-client" {
		t.Fatalf("eager start: first task started by %q, want the starting client", got)
	}
	if got := firstTaskBy(false); got != "kinflow-cpu-worker" {
		t.Fatalf("normal start: first task started by %q, want the worker", got)
	}
	// The saving, as a figure (not asserted): start to completion of the
	// one-task stand-in, 20 jobs one after another each way.
	for _, eager := range []bool{false, true} {
		start := time.Now()
		for range 20 {
			firstTaskBy(eager)
		}
		t.Logf("eager=%v: %.1f ms per job (start, one workflow task, history read)", eager, float64(time.Since(start).Microseconds())/20/1000)
	}
}
