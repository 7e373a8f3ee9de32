package e2e

import (
	"context"
	"os"
	"path/filepath"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/worker"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/workflows"
)

// replay fetches a finished workflow's history from the server and replays it
// against the current workflow code: any non-determinism fails the test.
// With KINFLOW_RECORD_HISTORIES=1 the history is also saved to
// workflows/testdata/<name>.json, where the workflows package's replay test
// keeps checking it against future code.
func (s *stack) replay(workflowID, name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := s.tc.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	hist := &historypb.History{}
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			s.t.Fatalf("history of %s: %v", workflowID, err)
		}
		hist.Events = append(hist.Events, ev)
	}
	r := worker.NewWorkflowReplayer()
	workflows.RegisterCPU(r)
	embedjob.RegisterWorkflows(r)
	if err := r.ReplayWorkflowHistory(nil, hist); err != nil {
		s.t.Fatalf("replay %s: %v", workflowID, err)
	}
	if os.Getenv("KINFLOW_RECORD_HISTORIES") == "" {
		return
	}
	data, err := protojson.MarshalOptions{Indent: "  "}.Marshal(hist)
	if err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(testenv.RepoRoot(), "workflows", "testdata", name+".json")
	if err := os.WriteFile(path, data, 0o644); err != nil {
		s.t.Fatal(err)
	}
	s.t.Logf("recorded %s", path)
}

// replayEmbedJobs replays (and records as name) the stack's first EmbedJob.
func (s *stack) replayEmbedJobs(name string) {
	s.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.tc.ListWorkflow(ctx, &workflowservice.ListWorkflowExecutionsRequest{
		Namespace: "default", Query: "WorkflowType = 'EmbedJob' AND TaskQueue = '" + s.gpuQ + "'",
	})
	if err != nil || len(resp.Executions) == 0 {
		s.t.Fatalf("list EmbedJobs: %v (%d)", err, len(resp.GetExecutions()))
	}
	s.replay(resp.Executions[0].Execution.WorkflowId, name)
}
