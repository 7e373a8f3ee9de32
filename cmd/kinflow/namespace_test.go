package main

import (
	"bytes"
	"context"
	"os"
	"strings"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/workflowservice/v1"
	"google.golang.org/protobuf/types/known/durationpb"

	"github.com/kinflow/kinflow/internal/testenv"
)

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopTemporal()
	os.Exit(code)
}

// TestNamespaceCommandIsIdempotent runs `kinflow namespace` twice on a fresh
// namespace of a real Temporal server: the first run creates it and
// registers JobId, Method and Stage as Keyword, the second changes nothing.
func TestNamespaceCommandIsIdempotent(t *testing.T) {
	tmpl := testenv.MustTemporal(t)
	ns := "kf-ns-idempotent-" + time.Now().Format("150405000")
	t.Setenv("KINFLOW_TEMPORAL_ADDRESS", tmpl.Server.FrontendHostPort())
	t.Setenv("KINFLOW_TEMPORAL_NAMESPACE", ns)
	ctx := t.Context()
	runNS := func(args ...string) (int, string, string) {
		var out, errb bytes.Buffer
		rc := run(ctx, append([]string{"namespace"}, args...), &out, &errb)
		return rc, out.String(), errb.String()
	}

	rc, out, errs := runNS("--retention", "48h")
	if rc != 0 {
		t.Fatalf("first run: rc %d\n%s\n%s", rc, out, errs)
	}
	for _, want := range []string{"namespace " + ns + ": created", "search attribute JobId: registered", "search attribute Method: registered", "search attribute Stage: registered", "ready for kinflow"} {
		if !strings.Contains(out, want) {
			t.Errorf("first run lacks %q:\n%s", want, out)
		}
	}
	desc, err := tmpl.Client.WorkflowService().DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	if got := desc.GetConfig().GetWorkflowExecutionRetentionTtl().AsDuration(); got != 48*time.Hour {
		t.Errorf("retention %v, want 48h", got)
	}
	wantKeywords(t, tmpl.Client.OperatorService(), ns)

	rc, out, errs = runNS()
	if rc != 0 {
		t.Fatalf("second run: rc %d\n%s\n%s", rc, out, errs)
	}
	if !strings.Contains(out, "namespace "+ns+": exists") || strings.Contains(out, "registered") || strings.Contains(out, "created") {
		t.Errorf("second run changed something:\n%s", out)
	}
	wantKeywords(t, tmpl.Client.OperatorService(), ns)

	if rc, _, errs := runNS("--retention", "1h"); rc != 2 || !strings.Contains(errs, "at least 24h") {
		t.Errorf("--retention 1h: rc %d %s", rc, errs)
	}
}

// TestNamespaceCommandRefusesAWrongType: a namespace where JobId is already
// an Int cannot serve kinflow; the command says which attribute and fails
// at once instead of retrying.
func TestNamespaceCommandRefusesAWrongType(t *testing.T) {
	tmpl := testenv.MustTemporal(t)
	ns := "kf-ns-wrongtype-" + time.Now().Format("150405000")
	ctx := t.Context()
	if _, err := tmpl.Client.WorkflowService().RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
		Namespace: ns, WorkflowExecutionRetentionPeriod: durationpb.New(24 * time.Hour),
	}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := tmpl.Client.OperatorService().AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{
			Namespace: ns, SearchAttributes: map[string]enumspb.IndexedValueType{"JobId": enumspb.INDEXED_VALUE_TYPE_INT},
		})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal(err)
		}
		time.Sleep(300 * time.Millisecond)
	}
	t.Setenv("KINFLOW_TEMPORAL_ADDRESS", tmpl.Server.FrontendHostPort())
	t.Setenv("KINFLOW_TEMPORAL_NAMESPACE", ns)
	var out, errb bytes.Buffer
	start := time.Now()
	rc := run(ctx, []string{"namespace", "--wait", "30s"}, &out, &errb)
	if rc != 1 || !strings.Contains(errb.String(), "search attribute JobId is registered as Int, kinflow needs Keyword") {
		t.Fatalf("rc %d\n%s\n%s", rc, out.String(), errb.String())
	}
	if d := time.Since(start); d > 20*time.Second {
		t.Errorf("took %v: a wrong type should fail at once, not after retries", d)
	}
}

func wantKeywords(t *testing.T, ops operatorservice.OperatorServiceClient, ns string) {
	t.Helper()
	list, err := ops.ListSearchAttributes(context.Background(), &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range searchAttributes {
		if typ := list.GetCustomAttributes()[name]; typ != enumspb.INDEXED_VALUE_TYPE_KEYWORD {
			t.Errorf("%s: %v, want Keyword", name, typ)
		}
	}
}
