package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/operatorservice/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"google.golang.org/protobuf/types/known/durationpb"
)

// searchAttributes are the custom search attributes kinflow's workflows set
// (workflows/): every one a Keyword.
var searchAttributes = []string{"JobId", "Method", "Stage"}

// runNamespace is `kinflow namespace`: the operator step that prepares a
// Temporal server for kinflow. It creates KINFLOW_TEMPORAL_NAMESPACE if it is
// absent and registers the search attributes JobId, Method and Stage
// (Keyword) on it. Idempotent: a second run changes nothing and says so.
func runNamespace(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("namespace", stderr)
	retention := fs.Duration("retention", 7*24*time.Hour, "how long Temporal keeps a closed workflow's history (only used when the namespace is created)")
	wait := fs.Duration("wait", 60*time.Second, "how long to wait for the Temporal server to answer")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	if *retention < 24*time.Hour {
		return usageError{"--retention: want at least 24h (Temporal's minimum)"}
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr, "namespace")
	wctx, cancel := context.WithTimeout(ctx, *wait)
	defer cancel()
	tc, err := dialTemporal(wctx, cfg, log)
	if err != nil {
		return err
	}
	defer tc.Close()
	return prepareNamespace(wctx, tc, cfg.TemporalNamespace, *retention, stdout)
}

// prepareNamespace creates ns if absent and registers the search attributes,
// waiting until the server reports them (a new namespace reaches every
// frontend through a cache that refreshes every few seconds).
func prepareNamespace(ctx context.Context, tc client.Client, ns string, retention time.Duration, stdout io.Writer) error {
	ws, ops := tc.WorkflowService(), tc.OperatorService()
	// A server that has just started may answer Unavailable for a while:
	// retry anything but a clear answer until ctx ends.
	for {
		_, err := ws.DescribeNamespace(ctx, &workflowservice.DescribeNamespaceRequest{Namespace: ns})
		var notFound *serviceerror.NamespaceNotFound
		if err == nil {
			fmt.Fprintf(stdout, "namespace %s: exists\n", ns)
			break
		}
		if errors.As(err, &notFound) {
			_, err = ws.RegisterNamespace(ctx, &workflowservice.RegisterNamespaceRequest{
				Namespace:                        ns,
				Description:                      "kinflow jobs",
				WorkflowExecutionRetentionPeriod: durationpb.New(retention),
			})
			var exists *serviceerror.NamespaceAlreadyExists
			if err == nil || errors.As(err, &exists) {
				fmt.Fprintf(stdout, "namespace %s: created (retention %s)\n", ns, retention)
				break
			}
			var invalid *serviceerror.InvalidArgument
			if errors.As(err, &invalid) {
				return fmt.Errorf("create namespace %s: %w", ns, err)
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s: %w", ns, err)
		case <-time.After(500 * time.Millisecond):
		}
	}

	// The search attributes: add the missing ones, refuse a wrong type. Right
	// after creating the namespace the operator API may not see it yet, so
	// retry until ctx ends.
	for {
		done, err := registerSearchAttributes(ctx, ops, ns, stdout)
		if err == nil && done {
			break
		}
		var bad badAttribute
		if errors.As(err, &bad) {
			return err
		}
		select {
		case <-ctx.Done():
			if err == nil {
				err = errors.New("the server did not list them in time")
			}
			return fmt.Errorf("search attributes on %s: %w", ns, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	// A workflow can set them only once the frontend's namespace cache knows
	// the namespace: wait until a visibility query on them is accepted.
	for {
		_, err := ws.CountWorkflowExecutions(ctx, &workflowservice.CountWorkflowExecutionsRequest{
			Namespace: ns, Query: "JobId = 'kinflow-namespace-check' AND Method = '' AND Stage = ''",
		})
		if err == nil {
			break
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("namespace %s is not usable yet: %w", ns, err)
		case <-time.After(500 * time.Millisecond):
		}
	}
	fmt.Fprintf(stdout, "namespace %s: ready for kinflow\n", ns)
	return nil
}

// badAttribute is a search attribute registered with another type: kinflow
// cannot use the namespace, and retrying will not help.
type badAttribute struct{ name, typ string }

func (b badAttribute) Error() string {
	return fmt.Sprintf("search attribute %s is registered as %s, kinflow needs Keyword (rename or remove it, or use another namespace)", b.name, b.typ)
}

// registerSearchAttributes adds the missing attributes; done is true when
// every one is listed with type Keyword.
func registerSearchAttributes(ctx context.Context, ops operatorservice.OperatorServiceClient, ns string, stdout io.Writer) (bool, error) {
	list, err := ops.ListSearchAttributes(ctx, &operatorservice.ListSearchAttributesRequest{Namespace: ns})
	if err != nil {
		return false, err
	}
	missing := map[string]enumspb.IndexedValueType{}
	for _, name := range searchAttributes {
		typ, ok := list.GetCustomAttributes()[name]
		switch {
		case !ok:
			missing[name] = enumspb.INDEXED_VALUE_TYPE_KEYWORD
		case typ != enumspb.INDEXED_VALUE_TYPE_KEYWORD:
			return false, badAttribute{name, typ.String()}
		}
	}
	if len(missing) == 0 {
		return true, nil
	}
	_, err = ops.AddSearchAttributes(ctx, &operatorservice.AddSearchAttributesRequest{Namespace: ns, SearchAttributes: missing})
	var exists *serviceerror.AlreadyExists
	if err != nil && !errors.As(err, &exists) {
		return false, err
	}
	for _, name := range searchAttributes {
		if _, ok := missing[name]; ok {
			fmt.Fprintf(stdout, "search attribute %s: registered (Keyword)\n", name)
		}
	}
	return false, nil // list again to confirm
}
