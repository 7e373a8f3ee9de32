package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"sync"

	"go.temporal.io/sdk/client"

	"github.com/kinflow/kinflow/api"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/fairness"
	"github.com/kinflow/kinflow/internal/gpuhealth"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/workflows"
)

func runAPI(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("api", stderr)
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	log := newLogger(cfg, stderr, "api")
	startPprof(log)
	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if _, err := openMediaRoot(cfg, log, false); err != nil {
		return err
	}
	tc, err := lazyTemporal(cfg, log)
	if err != nil {
		return err
	}
	defer tc.Close()
	srv, err := newAPIServer(cfg, st, tc, log, metrics.New(), false)
	if err != nil {
		return err
	}
	// Submits cut off by a crash of an api process are settled here.
	go srv.RunSubmitReconciler(ctx)
	go srv.RunStatusListener(ctx)
	return serveHTTP(ctx, cfg.APIListen, srv, log, nil)
}

// newAPIServer wires the API's dependencies; m is served on /metrics, with
// the jobs-by-state gauge read from st. eager starts workflows eagerly (only
// where a CPU worker runs on tc in this process: `kinflow dev`).
func newAPIServer(cfg *config.Config, st *store.Store, tc client.Client, log *slog.Logger, m *metrics.Metrics, eager bool) (*api.Server, error) {
	cat, err := methods.Load(cfg.MethodsFile)
	if err != nil {
		return nil, err
	}
	if err := m.RegisterJobs(st.JobCountsByStatus, log); err != nil {
		return nil, err
	}
	if err := m.RegisterKeyWork(keyWork(st), log); err != nil {
		return nil, err
	}
	if err := m.RegisterMediaFree(cfg.MediaRoot); err != nil { // the media file system's free space and size in /metrics
		return nil, err
	}
	return api.New(api.Deps{
		Config:    cfg,
		Store:     st,
		Log:       log,
		Catalogue: cat,
		Jobs:      workflows.Starter{Client: tc, TaskQueue: cfg.CPUTaskQueue, Describe: describeJob(st, cfg), Log: log, Eager: eager},
		GPU:       gpuhealth.New(cfg),
		Chemistry: newChemistry(log),
		Metrics:   m,
		// The databases are built by the worker (runCPUWorker); the API
		// searches, and builds only when it gets there first.
		Similarity: newSimilarity(cfg, cat, log),
		TemporalHealth: func(ctx context.Context) error {
			_, err := tc.CheckHealth(ctx, &client.CheckHealthRequest{})
			return err
		},
	}), nil
}

// keyWork reads every key's unfinished work for the per-key metrics.
func keyWork(st *store.Store) metrics.KeyWorkReader {
	return func(ctx context.Context) ([]metrics.KeyWork, error) {
		work, err := st.UnfinishedWorkByKey(ctx)
		if err != nil {
			return nil, err
		}
		out := make([]metrics.KeyWork, 0, len(work))
		for _, w := range work {
			state := "running"
			if w.Status == store.JobPending {
				state = "waiting"
			}
			out = append(out, metrics.KeyWork{Key: fairness.Key(w.KeyID), State: state, Jobs: w.Jobs, Rows: w.Rows})
		}
		return out, nil
	}
}

// describeJob reads what a job's start needs from its row: its memo
// summary (targets, method per target, rows) and its priority (its class,
// its key's fairness key and weight).
func describeJob(st *store.Store, cfg *config.Config) func(ctx context.Context, id string) (workflows.JobStart, error) {
	return func(ctx context.Context, id string) (workflows.JobStart, error) {
		job, err := st.Job(ctx, id)
		if err != nil {
			return workflows.JobStart{}, err
		}
		var weight *float64
		if cfg.Fairness {
			if weight, err = st.KeyWeight(ctx, job.KeyID); err != nil {
				return workflows.JobStart{}, err
			}
		}
		class := fairness.Class(job.Priority)
		if class == "" { // submitted before classes: by its size
			class = fairness.ClassFor(job.RequestedRows, fairness.RequestAuto, cfg.SmallJobRows, cfg.BulkJobRows)
		}
		targets := job.Targets
		sum := workflows.JobSummary{Targets: job.PredictionType, Methods: map[string]string{}, Rows: job.RequestedRows}
		for _, t := range targets {
			switch methods.Target(t) {
			case methods.Kcat:
				sum.Methods[t] = job.KcatMethod
			case methods.Km:
				sum.Methods[t] = job.KmMethod
			case methods.KcatKm:
				sum.Methods[t] = job.KcatKmMethod
			}
		}
		d := workflows.JobStart{Summary: sum}
		if cfg.Fairness {
			d.Priority = fairness.Priority(class, job.KeyID, weight)
		}
		return d, nil
	}
}

// newChemistry is the substrate checker: the Go syntax checks, plus RDKit
// through a pool of long-lived /usr/bin/python3 helpers when python3-rdkit is
// installed (they start on first use; without RDKit the Go checks decide).
// One pool per process: `kinflow dev` runs the api and the worker in one
// process, and each helper holds about 80 MiB.
func newChemistry(log *slog.Logger) *input.Chemistry {
	chemOnce.Do(func() { chem = input.NewChemistry(input.NewRDKit(input.RDKitOptions{Log: log}), log) })
	return chem
}

var (
	chemOnce sync.Once
	chem     *input.Chemistry
)

// runMigrate is `kinflow migrate`: it applies the pending migrations and
// prints one line per migration applied (its id), then that the database
// is up to date. A schema that a newer release changed in a way this one
// cannot read is refused with one line (store.SchemaTooNewError).
func runMigrate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("migrate", stderr)
	acceptOlder := fs.Bool("accept-older-workflows", false, "after a rollback, once no job is unfinished: let this release's workers start although a newer release's ran here")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	st, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return err
	}
	defer st.Close()
	applied, err := st.ApplyMigrations(ctx)
	if err != nil {
		return err
	}
	for _, id := range applied {
		fmt.Fprintf(stdout, "applied %s\n", id)
	}
	fmt.Fprintf(stdout, "%s database is up to date\n", st.Dialect)
	if *acceptOlder {
		was, err := st.AcceptOlderWorkflows(ctx, workflows.Level())
		if err != nil {
			return fmt.Errorf("older workflows not accepted: %w", err)
		}
		fmt.Fprintf(stdout, "workflow level %d accepted (was %d): this release's workers may start\n", workflows.Level(), was)
	}
	return nil
}
