package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"

	"go.temporal.io/sdk/client"

	gpuworker "github.com/kinflow/kinflow/gpu-worker"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/metrics"
)

// runGPUWorker is `kinflow gpu-worker`: the GPU task queue's worker and the
// GPU service HTTP API in one process (docs/gpu-host.md).
func runGPUWorker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gpu-worker", stderr)
	envFile := fs.String("env-file", os.Getenv("KINFLOW_GPU_ENV_FILE"), "the GPU host's environment file (KINFLOW_GPU_ENV_FILE)")
	check := fs.Bool("check", false, "start each configured step program, embed one sequence into a scratch folder, check its files, and exit (no Temporal needed)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageError{fmt.Sprintf("unexpected argument %q", fs.Arg(0))}
	}
	// The env file may set any configuration key too; the process
	// environment wins over it.
	file, err := embedjob.LoadEnvFile(*envFile)
	if err != nil {
		return err
	}
	look := embedjob.LayeredLookup(file)
	cfg, err := config.Load(func(k string) (string, bool) {
		if k == "KINFLOW_GPU_ENV_FILE" {
			return *envFile, true
		}
		return look(k)
	})
	if err != nil {
		return err
	}
	if err := useRecordKey(cfg); err != nil {
		return err
	}
	st, err := embedjob.LoadSettings(look, file, cfg.MediaRoot)
	if err != nil {
		return fmt.Errorf("GPU env file: %w", err)
	}
	log := newLogger(cfg, stderr, "gpu-worker")
	startPprof(log)
	if !*check {
		// --check embeds into a scratch root of its own.
		if _, err := openMediaRoot(cfg, log, false); err != nil {
			return err
		}
	}
	if *check {
		fmt.Fprintf(stdout, "kinflow gpu-worker --check: executor %s, cache folders %s (KINFLOW_CACHE_FOLDERS)\n", cfg.StepExecutor, cfg.CacheFolders)
		res, err := embedjob.Check(ctx, cfg, st, log, stdout)
		if err != nil {
			return err
		}
		failed := 0
		for _, r := range res {
			if !r.OK {
				failed++
			}
		}
		if failed > 0 {
			return fmt.Errorf("%d of %d step(s) failed the check", failed, len(res))
		}
		fmt.Fprintf(stdout, "%d step(s) ok\n", len(res))
		return nil
	}
	tc, err := dialTemporal(ctx, cfg, log)
	if err != nil {
		return err
	}
	defer tc.Close()
	m := metrics.New()
	return serveMetricsBeside(ctx, cfg, m, log, func(ctx context.Context) error {
		return gpuworker.Run(ctx, gpuDeps(cfg, tc, log, st, m))
	})
}

// runGPUHost runs the GPU host inside `kinflow dev`'s process, on the
// configuration and Temporal client dev already has.
func runGPUHost(ctx context.Context, cfg *config.Config, tc client.Client, log *slog.Logger, m *metrics.Metrics) error {
	return gpuworker.Run(ctx, gpuDeps(cfg, tc, log, nil, m))
}

// gpuDeps wires a GPU host: EmbedJob runs on the GPU task queue beside its
// step activities, so a GPU host serves POST /embed/jobs on its own.
func gpuDeps(cfg *config.Config, tc client.Client, log *slog.Logger, st *embedjob.Settings, m *metrics.Metrics) gpuworker.Deps {
	return gpuworker.Deps{
		Config: cfg, Client: tc, Log: log, Settings: st, Metrics: m,
		WorkflowTaskQueue: cfg.GPUTaskQueue,
	}
}
