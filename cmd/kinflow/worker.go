package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"golang.org/x/sync/errgroup"

	"github.com/kinflow/kinflow/activities"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/workflows"
)

// runWorker is `kinflow worker`: the CPU task queue's workflows and
// activities, including local embedding steps (fail-open).
func runWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("worker", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr, "worker")
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
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
	w := worker.New(tc, cfg.CPUTaskQueue, worker.Options{
		// Local embedding steps and predictions are CPU-heavy: a few at a
		// time per worker process; scale by adding workers.
		MaxConcurrentActivityExecutionSize: 4,
		Interceptors:                       []interceptor.WorkerInterceptor{m.WorkerInterceptor()},
	})
	workflows.RegisterCPU(w)
	w.RegisterActivity(acts)
	steps.Register(w)
	if err := w.Start(); err != nil {
		return fmt.Errorf("start worker on %s: %w", cfg.CPUTaskQueue, err)
	}
	log.Info("CPU worker started", "task_queue", cfg.CPUTaskQueue)
	// Build the similarity databases now rather than in the first job.
	go acts.Similarity.Prepare(ctx)
	<-ctx.Done()
	w.Stop()
	return nil
}
