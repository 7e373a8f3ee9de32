package main

// The floor (-floor): what the Temporal dev server allows on this machine
// for jobs of a kinflow small job's shape when the jobs do no work at all.
// After a burst, loadbench reads the history of one of its jobs, turns it
// into a script (the same version markers, local activities, search
// attribute upserts, timers and activities, workflow task by workflow
// task) and runs a burst of as many workflows that follow the script with
// no-op steps, started the way kinflow starts a job (eager start, the same
// memo and search attributes, the same task timeout), from a worker in the
// loadbench process, once the server is quiet. Their jobs/s is meant as
// about the most kinflow's jobs can reach on the same deployment, but one
// run varies too much to be a bound (docs/BENCHMARKS.md); the persistence
// requests per job where the two differ are what it measures reliably.

import (
	"context"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/loadgen"
	"github.com/kinflow/kinflow/workflows"
)

// Operations of a floor script.
const (
	opVersion  = "version"
	opLocal    = "local"
	opUpsert   = "upsert"
	opTimer    = "timer"
	opCancel   = "cancel-timer"
	opActivity = "activity"
	// opWait ends a workflow task: wait for the activities scheduled so far.
	opWait = "wait"
)

// floorScript is the shape of one workflow's history.
type floorScript struct {
	Ops []string
	// Events is the history's length, for the report.
	Events int
}

// scriptOf turns a history into a floor script. Events a small job does
// not have (child workflows, signals, fired timers) are refused, so the
// floor never claims a shape it does not run.
func scriptOf(events []*historypb.HistoryEvent) (floorScript, error) {
	s := floorScript{Events: len(events)}
	started := 0
	for _, e := range events {
		switch e.GetEventType() {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			started++
			if started > 1 {
				s.Ops = append(s.Ops, opWait)
			}
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			switch name := e.GetMarkerRecordedEventAttributes().GetMarkerName(); name {
			case "Version":
				s.Ops = append(s.Ops, opVersion)
			case "LocalActivity":
				s.Ops = append(s.Ops, opLocal)
			default:
				return s, fmt.Errorf("the floor cannot mirror a %q marker", name)
			}
		case enumspb.EVENT_TYPE_UPSERT_WORKFLOW_SEARCH_ATTRIBUTES:
			s.Ops = append(s.Ops, opUpsert)
		case enumspb.EVENT_TYPE_TIMER_STARTED:
			s.Ops = append(s.Ops, opTimer)
		case enumspb.EVENT_TYPE_TIMER_CANCELED:
			s.Ops = append(s.Ops, opCancel)
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			s.Ops = append(s.Ops, opActivity)
		case enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_STARTED,
			enumspb.EVENT_TYPE_WORKFLOW_TASK_SCHEDULED,
			enumspb.EVENT_TYPE_WORKFLOW_TASK_COMPLETED,
			enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED,
			enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED,
			enumspb.EVENT_TYPE_WORKFLOW_EXECUTION_COMPLETED:
		default:
			return s, fmt.Errorf("the floor cannot mirror a %s event", e.GetEventType())
		}
	}
	return s, nil
}

// floorWorkflow follows a script with no-op steps.
func floorWorkflow(ctx workflow.Context, s floorScript) error {
	lctx := workflow.WithLocalActivityOptions(ctx, workflow.LocalActivityOptions{StartToCloseTimeout: time.Minute})
	actx := workflow.WithActivityOptions(ctx, workflow.ActivityOptions{TaskQueue: floorGPUQueue, StartToCloseTimeout: time.Minute})
	var pending []workflow.Future
	var cancelTimer workflow.CancelFunc
	for i, op := range s.Ops {
		switch op {
		case opVersion:
			workflow.GetVersion(ctx, "floor-"+strconv.Itoa(i), workflow.DefaultVersion, 1)
		case opLocal:
			if err := workflow.ExecuteLocalActivity(lctx, floorLocal).Get(ctx, nil); err != nil {
				return err
			}
		case opUpsert:
			if err := workflow.UpsertTypedSearchAttributes(ctx, workflows.SearchAttrStage.ValueSet("floor "+strconv.Itoa(i))); err != nil {
				return err
			}
		case opTimer:
			tctx, cancel := workflow.WithCancel(ctx)
			cancelTimer = cancel
			workflow.NewTimer(tctx, time.Hour)
		case opCancel:
			if cancelTimer != nil {
				cancelTimer()
				cancelTimer = nil
			}
		case opActivity:
			pending = append(pending, workflow.ExecuteActivity(actx, floorRemote))
		case opWait:
			for _, f := range pending {
				if err := f.Get(ctx, nil); err != nil {
					return err
				}
			}
			pending = nil
		}
	}
	for _, f := range pending {
		if err := f.Get(ctx, nil); err != nil {
			return err
		}
	}
	return nil
}

func floorLocal(context.Context) error  { return nil }
func floorRemote(context.Context) error { return nil }

const (
	floorQueue        = "loadbench-floor"
	floorGPUQueue     = "loadbench-floor-gpu"
	floorWorkflowName = "LoadbenchFloor"
)

// floor runs n floor workflows at once in the shape of job jobID's history
// and prints their rate and CPU beside the burst's, and the persistence
// requests per job where the burst's (jobOps) differ from the floor's.
func (b *bench) floor(ctx context.Context, d *loadgen.Dev, nw, n int, jobID string, jobOps persistenceOps) error {
	cfg, c, err := dialTemporal(d)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	defer c.Close()
	events, err := jobHistory(ctx, c, jobID)
	if err != nil {
		return fmt.Errorf("floor: %w", err)
	}
	script, err := scriptOf(events)
	if err != nil {
		return fmt.Errorf("floor: job %s: %w", jobID, err)
	}
	var memo map[string]any
	if m := events[0].GetWorkflowExecutionStartedEventAttributes().GetMemo(); m != nil {
		memo = map[string]any{}
		for k, v := range m.GetFields() {
			memo[k] = v
		}
	}

	// The worker as kinflow's CPU worker and GPU small lane are set up
	// (cmd/kinflow/worker.go, internal/embedjob/worker.go).
	w := worker.New(c, floorQueue, worker.Options{
		MaxConcurrentActivityExecutionSize:      cfg.CPUActivitySlots,
		MaxConcurrentLocalActivityExecutionSize: cfg.CPULocalActivitySlots,
		MaxConcurrentWorkflowTaskExecutionSize:  cfg.CPUWorkflowSlots,
		MaxConcurrentWorkflowTaskPollers:        8,
		MaxConcurrentActivityTaskPollers:        4,
	})
	w.RegisterWorkflowWithOptions(floorWorkflow, workflow.RegisterOptions{Name: floorWorkflowName})
	w.RegisterActivity(floorLocal)
	g := worker.New(c, floorGPUQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: cfg.GPUSmallSlots,
		MaxConcurrentActivityTaskPollers:   embedjob.SmallLanePollers(cfg.GPUSmallSlots),
		DisableWorkflowWorker:              true,
	})
	g.RegisterActivity(floorRemote)
	for _, wk := range []worker.Worker{w, g} {
		if err := wk.Start(); err != nil {
			return fmt.Errorf("floor: start worker: %w", err)
		}
		defer wk.Stop()
	}
	// The floor starts on a quiet server: every workflow of the burst
	// closed (a job is Completed in kinflow's database a moment before its
	// workflow closes) and a moment for the server's queues to drain, which
	// also lets the pollers reach it.
	if _, err := countUntil(ctx, c, "ExecutionStatus = 'Running'", func(n int64) bool { return n == 0 }, time.Minute, 200*time.Millisecond); err != nil {
		return fmt.Errorf("floor: count running workflows: %w", err)
	}
	time.Sleep(2 * time.Second)

	cpu := startCPU(d)
	self := selfCPU()
	tag := fmt.Sprintf("floor-%d-%d-%d", nw, n, time.Now().UnixNano())
	start := time.Now()
	errs := make(chan error, n)
	for i := range n {
		go func() {
			id := fmt.Sprintf("%s-%d", tag, i)
			_, err := c.ExecuteWorkflow(ctx, client.StartWorkflowOptions{
				ID: id, TaskQueue: floorQueue, Memo: memo,
				TypedSearchAttributes: temporal.NewSearchAttributes(workflows.SearchAttrJobID.ValueSet(id), workflows.SearchAttrStage.ValueSet("queued")),
				WorkflowTaskTimeout:   workflows.WorkflowTaskTimeout,
				EnableEagerStart:      true,
			}, floorWorkflowName, script)
			errs <- err
		}()
	}
	for range n {
		if err := <-errs; err != nil {
			return fmt.Errorf("floor: start: %w", err)
		}
	}
	// Completion by a visibility count every 100 ms: a Get per workflow
	// would add a history long poll per job that kinflow's jobs do not make.
	query := fmt.Sprintf("WorkflowType = '%s' AND ExecutionStatus = 'Completed' AND JobId STARTS_WITH '%s-'", floorWorkflowName, tag)
	got, err := countUntil(ctx, c, query, func(k int64) bool { return k >= int64(n) }, b.timeout, 100*time.Millisecond)
	if err != nil {
		return fmt.Errorf("floor: count completed: %w", err)
	}
	wall := time.Since(start)
	if got < int64(n) {
		return fmt.Errorf("floor: %d of %d workflows completed within %v", got, n, b.timeout)
	}
	tm, _, _ := cpu.perJob(n)
	ops, floorOps := cpu.opsPerJob(n)
	wms := float64((selfCPU() - self).Microseconds()) / 1000 / float64(n)
	fmt.Printf("%-8d %-7s %6.1f %9s %9s %9.2f %9.1f %9s %9s %10s %s\n", nw, "floor", float64(n)/wall.Seconds(), "-", "-", wall.Seconds(), tm, "-", "-",
		"-", fmt.Sprintf("%d no-op workflows in the shape of job %s (%d events, %d steps); the floor's own worker %.1f ms/job (loadbench process, incl. its client); %.1f persistence requests per job",
			n, jobID, script.Events, len(script.Ops), wms, ops))
	if diff := opsDiff(jobOps, floorOps); diff != "" {
		fmt.Printf("%-8s %-7s persistence requests per job, kinflow's jobs against the floor's: %s\n", "", "", diff)
	}
	return nil
}

// opsDiff lists the operations whose requests per job differ by 0.1 or
// more between a and b, as a−b, largest first.
func opsDiff(a, b persistenceOps) string {
	d := persistenceOps{}
	for k, v := range a {
		d[k] = v - b[k]
	}
	for k, v := range b {
		if _, ok := a[k]; !ok {
			d[k] = -v
		}
	}
	var parts []string
	for _, k := range largestFirst(d) {
		if v := d[k]; v >= 0.1 || v <= -0.1 {
			parts = append(parts, fmt.Sprintf("%s %+.2f", k, v))
		}
	}
	return strings.Join(parts, ", ")
}

// countUntil counts the workflows of a visibility query every `every`
// until done says so or `within` has passed, and returns the last count.
func countUntil(ctx context.Context, c client.Client, query string, done func(int64) bool, within, every time.Duration) (int64, error) {
	deadline := time.Now().Add(within)
	for {
		r, err := c.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Query: query})
		if err != nil {
			return 0, err
		}
		if done(r.GetCount()) || time.Now().After(deadline) {
			return r.GetCount(), nil
		}
		select {
		case <-ctx.Done():
			return r.GetCount(), ctx.Err()
		case <-time.After(every):
		}
	}
}

// selfCPU is this process's user and system CPU time.
func selfCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// quietLogger drops the SDK's log lines (the table is the output).
type quietLogger struct{}

func (quietLogger) Debug(string, ...any) {}
func (quietLogger) Info(string, ...any)  {}
func (quietLogger) Warn(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, "floor worker:", msg, strings.TrimSpace(fmt.Sprint(kv...)))
}
func (quietLogger) Error(msg string, kv ...any) {
	fmt.Fprintln(os.Stderr, "floor worker:", msg, strings.TrimSpace(fmt.Sprint(kv...)))
}
