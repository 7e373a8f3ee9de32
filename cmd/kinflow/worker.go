package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/kinflow/kinflow/activities"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/mediaroot/rideout"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/workflows"
)

// runWorker is `kinflow worker`: the CPU task queue's workflows and
// activities, including local embedding steps (fail-open).
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("worker", stderr)
	check := fs.Bool("check", false, "at start, run every configured method program on a few rows (as `kinflow methods check`) and exit 1 with the report when any fails")
	checkTimeout := fs.Duration("check-timeout", defaultMethodCheckTimeout, "with --check: how long one method's program may run for one target")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr, "worker")
	startPprof(log)
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	// A worker older than one that ran here refuses to start rather than
	// take workflow tasks of runs it cannot replay.
	if err := st.ClaimWorkflowLevel(ctx, workflows.Level()); err != nil {
		return err
	}
	if _, err := openMediaRoot(cfg, log, false); err != nil {
		return err
	}
	if *check {
		if err := workerCheck(ctx, cfg, log, *checkTimeout, stdout); err != nil {
			return err
		}
	}
	tc, err := dialTemporal(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer tc.Close()
	m := metrics.New()
	return serveMetricsBeside(ctx, cfg, m, log, func(ctx context.Context) error {
		return runCPUWorker(ctx, cfg, st, tc, log, m)
	})
}

// workerCheck is `kinflow worker --check`: the method check of every
// method with a command, before the worker connects to Temporal. With the
// synthetic engine no program runs in a job, so there is nothing to check.
func workerCheck(ctx context.Context, cfg *config.Config, log *slog.Logger, timeout time.Duration, stdout io.Writer) error {
	if cfg.PredictionEngine != "command" {
		fmt.Fprintf(stdout, "kinflow worker --check: KINFLOW_PREDICTION_ENGINE is %s, no method program to check\n", cfg.PredictionEngine)
		return nil
	}
	fmt.Fprintln(stdout, "kinflow worker --check: the method programs")
	failed, total, err := checkMethods(ctx, cfg, log, nil, timeout, stdout)
	if err != nil {
		return err
	}
	if failed > 0 {
		return fmt.Errorf("%d of %d method check(s) failed: not starting", failed, total)
	}
	return nil
}

// serveMetricsBeside runs role, and /metrics on KINFLOW_METRICS_LISTEN when
// set, until ctx ends or either fails.
func serveMetricsBeside(ctx context.Context, cfg *config.Config, m *metrics.Metrics, log *slog.Logger, role func(context.Context) error) error {
	if cfg.MetricsListen == "" {
		return role(ctx)
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return metrics.Serve(gctx, cfg.MetricsListen, m, log) })
	g.Go(func() error { return role(gctx) })
	return g.Wait()
}

// newActivities wires the CPU activities.
func newActivities(cfg *config.Config, st *store.Store, log *slog.Logger, m *metrics.Metrics) (*activities.Activities, error) {
	cat, err := methods.Load(cfg.MethodsFile)
	if err != nil {
		return nil, err
	}
	layout, err := embedding.LayoutFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	acts := activities.New(cfg, st, cat, layout, log.With("role", "worker"))
	acts.Chem = newChemistry(log)
	acts.Metrics = m
	acts.Similarity = newSimilarity(cfg, cat, log)
	return acts, nil
}

// runCPUWorker serves the CPU task queue until ctx ends.
func runCPUWorker(ctx context.Context, cfg *config.Config, st *store.Store, tc client.Client, log *slog.Logger, m *metrics.Metrics) error {
	acts, err := newActivities(cfg, st, log, m)
	if err != nil {
		return err
	}
	steps, err := embedjob.LocalActivities(cfg, log)
	if err != nil {
		return err
	}
	defer steps.Close()
	ws, err := newCPUWorkers(tc, cfg, m, log)
	if err != nil {
		return err
	}
	workflows.RegisterCPU(ws.cpu)
	ws.cpu.RegisterActivity(acts)
	steps.Register(ws.cpu)
	// Trackers live on their own queue with their own slots: a tracker
	// waits for files for as long as its job's embedding phase runs, and
	// must never hold a slot that its own job's steps need: a burst of
	// waiters would fill every slot and their own work would never run
	// (docs/workflows.md, "Why no wait can deadlock").
	// TrackProgress stays registered on the CPU queue too, for the trackers
	// of workflows started before this split (their histories schedule it
	// there).
	ws.track.RegisterActivity(acts.TrackProgress)
	// Notices likewise: an attempt waits up to its receiver's timeout, and
	// a receiver that never answers must hold a notice slot, not one of
	// the few CPU slots that other jobs' predictions run in. NotifyJob
	// stays registered on the CPU queue for the notices of workflows that
	// scheduled it there before this split.
	ws.notice.RegisterActivity(acts.NotifyJob)
	if err := ws.start(); err != nil {
		return err
	}
	defer ws.stop()
	log.Info("CPU worker started", "task_queue", cfg.CPUTaskQueue, "track_task_queue", config.TrackTaskQueue(cfg.CPUTaskQueue),
		"notice_task_queue", config.NoticeTaskQueue(cfg.CPUTaskQueue),
		"activity_slots", cfg.CPUActivitySlots, "local_activity_slots", cfg.CPULocalActivitySlots,
		"workflow_slots", cfg.CPUWorkflowSlots, "track_slots", cfg.TrackSlots,
		"notice_slots", cfg.NoticeSlots, "notice_per_key", cfg.NoticePerKey)
	// Build the similarity databases now rather than in the first job.
	go acts.Similarity.Prepare(ctx)
	<-ctx.Done()
	return nil
}

// Pollers of the CPU task queue: each is one long poll open on the Temporal
// server, cheap while idle.
const (
	cpuWorkflowPollers = 8
	cpuActivityPollers = 4
)

// cpuWorkers are the three Temporal workers of one `kinflow worker` process,
// each with its own slot pools (docs/workflows.md, "Slot pools").
type cpuWorkers struct {
	// cpu serves the CPU task queue: workflows, bookkeeping local
	// activities, and the CPU-bound activities.
	cpu worker.Worker
	// track serves the trackers' queue (config.TrackTaskQueue).
	track worker.Worker
	// notice serves the job notices' queue (config.NoticeTaskQueue).
	notice  worker.Worker
	started []worker.Worker
}

func newCPUWorkers(tc client.Client, cfg *config.Config, m *metrics.Metrics, log *slog.Logger) (*cpuWorkers, error) {
	ics := []interceptor.WorkerInterceptor{m.WorkerInterceptor()}
	if r := mediaroot.Lookup(cfg.MediaRoot); r != nil {
		// Activities wait for a media root that went away instead of
		// failing (rideout); the notices and the GPU probe never touch it.
		ics = append(ics, rideout.Interceptor(r, cfg.OutageRideOut, log.With("role", "worker"), "NotifyJob", "HasNotice", "GPUHealth"))
	}
	cpu := worker.New(tc, cfg.CPUTaskQueue, worker.Options{
		// CPU-bound activities: a few at a time per worker process; scale
		// by adding workers (KINFLOW_CPU_ACTIVITY_SLOTS).
		MaxConcurrentActivityExecutionSize:      cfg.CPUActivitySlots,
		MaxConcurrentLocalActivityExecutionSize: cfg.CPULocalActivitySlots,
		MaxConcurrentWorkflowTaskExecutionSize:  cfg.CPUWorkflowSlots,
		// The SDK's default of 2 pollers took a burst's first workflow
		// tasks at ~25 a second under load: a 50-job burst's last job
		// waited 2 s before its first step.
		MaxConcurrentWorkflowTaskPollers: cpuWorkflowPollers,
		MaxConcurrentActivityTaskPollers: cpuActivityPollers,
		Interceptors:                     ics,
	})
	track := worker.New(tc, config.TrackTaskQueue(cfg.CPUTaskQueue), worker.Options{
		MaxConcurrentActivityExecutionSize: cfg.TrackSlots,
		// The trackers' queue has no workflows.
		DisableWorkflowWorker: true,
		Interceptors:          ics,
	})
	notice := worker.New(tc, config.NoticeTaskQueue(cfg.CPUTaskQueue), worker.Options{
		MaxConcurrentActivityExecutionSize: cfg.NoticeSlots,
		// The notices' queue has no workflows either.
		DisableWorkflowWorker: true,
		Interceptors:          ics,
	})
	m.SetSlots(cfg.CPUTaskQueue, "activity", cfg.CPUActivitySlots)
	m.SetSlots(cfg.CPUTaskQueue, "local_activity", cfg.CPULocalActivitySlots)
	m.SetSlots(cfg.CPUTaskQueue, "workflow", cfg.CPUWorkflowSlots)
	m.SetSlots(config.TrackTaskQueue(cfg.CPUTaskQueue), "activity", cfg.TrackSlots)
	m.SetSlots(config.NoticeTaskQueue(cfg.CPUTaskQueue), "activity", cfg.NoticeSlots)
	if err := m.RegisterBacklog(metrics.TemporalBacklog(tc.WorkflowService(), cfg.TemporalNamespace,
		metrics.Queue{Name: cfg.CPUTaskQueue, Type: enumspb.TASK_QUEUE_TYPE_WORKFLOW},
		metrics.Queue{Name: cfg.CPUTaskQueue, Type: enumspb.TASK_QUEUE_TYPE_ACTIVITY},
		metrics.Queue{Name: config.TrackTaskQueue(cfg.CPUTaskQueue), Type: enumspb.TASK_QUEUE_TYPE_ACTIVITY},
		metrics.Queue{Name: config.NoticeTaskQueue(cfg.CPUTaskQueue), Type: enumspb.TASK_QUEUE_TYPE_ACTIVITY},
	), nil); err != nil {
		return nil, err
	}
	return &cpuWorkers{cpu: cpu, track: track, notice: notice}, nil
}

func (ws *cpuWorkers) start() error {
	for _, w := range []worker.Worker{ws.track, ws.notice, ws.cpu} {
		if err := w.Start(); err != nil {
			ws.stop()
			return fmt.Errorf("start CPU worker: %w", err)
		}
		ws.started = append(ws.started, w)
	}
	return nil
}

func (ws *cpuWorkers) stop() {
	for i := len(ws.started) - 1; i >= 0; i-- {
		ws.started[i].Stop()
	}
	ws.started = nil
}
