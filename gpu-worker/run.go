package gpuworker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/worker"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/mediaroot/rideout"
	"github.com/kinflow/kinflow/internal/metrics"
)

// Deps are what a GPU host needs. cmd/kinflow's gpu-worker role and the
// all-in-one `kinflow dev` fill them.
type Deps struct {
	Config *config.Config
	// Client is a connected Temporal client (not closed by the host).
	Client client.Client
	Log    *slog.Logger
	// Settings are the env file's settings; nil loads Config.GPUEnvFile.
	Settings *embedjob.Settings
	// Runner overrides the executor chosen by Config.StepExecutor.
	Runner embedjob.BatchRunner
	// WorkflowTaskQueue runs EmbedJob workflows submitted over HTTP; empty
	// means Config.CPUTaskQueue.
	WorkflowTaskQueue string
	// Listener overrides listening on Config.GPUListen.
	Listener net.Listener
	// Metrics records step durations and the HTTP API's latency; nil
	// records nothing.
	Metrics *metrics.Metrics
}

// Host is one GPU host: its worker and its HTTP API.
type Host struct {
	Activities *embedjob.Activities
	Server     *Server
	Worker     worker.Worker
	// SmallWorker serves the small lane (config.SmallTaskQueue).
	SmallWorker worker.Worker
	deps        Deps
}

// New builds a host from d without starting anything.
func New(ctx context.Context, d Deps) (*Host, error) {
	if d.Config == nil || d.Client == nil {
		return nil, errors.New("gpu host: Config and Client are required")
	}
	cfg := d.Config
	log := d.Log
	if log == nil {
		log = slog.Default()
	}
	log = log.With("role", "gpu-worker")
	st := d.Settings
	if st == nil {
		var err error
		if st, err = embedjob.SettingsFromConfig(cfg); err != nil {
			return nil, err
		}
	}
	acts, err := embedjob.NewActivities(cfg, st, d.Runner, log)
	if err != nil {
		return nil, err
	}
	layout, logs, known, runner := acts.Layout, acts.Logs, acts.Known, acts.Engine.Runner
	wq := d.WorkflowTaskQueue
	if wq == "" {
		wq = cfg.CPUTaskQueue
	}
	srv := NewServer(ServerOptions{
		Client: d.Client, Logs: logs, Known: known, Layout: layout, MediaRoot: cfg.MediaRoot,
		WorkflowTaskQueue: wq, GPUTaskQueue: cfg.GPUTaskQueue, Token: cfg.GPUEmbedServiceToken,
		MaxBodyBytes: cfg.MaxUploadBytes, ShardSeqs: cfg.StepShardSeqs, SmallStepSeqs: cfg.GPUSmallStepSeqs, CacheFolders: cfg.CacheFolders, Servers: acts.Servers.Status,
		Health: &HealthProbe{Executor: runner.Name(), FallbackName: st.GPUName},
		Log:    log, Base: ctx,
		Observe: func(method, route string, code int, took time.Duration) {
			d.Metrics.HTTPRequest("gpu", method, route, code, took)
		},
	})
	acts.Engine.Device = embedjob.NewDevice(cfg.GPUSlots)
	wo := embedjob.WorkerOptions{TaskQueue: cfg.GPUTaskQueue, Slots: cfg.GPUSlots, SmallSlots: cfg.GPUSmallSlots}
	if d.Metrics != nil {
		wo.Interceptors = append(wo.Interceptors, d.Metrics.WorkerInterceptor())
		d.Metrics.SetSlots(cfg.GPUTaskQueue, "activity", max(cfg.GPUSlots, 1))
		d.Metrics.SetSlots(config.SmallTaskQueue(cfg.GPUTaskQueue), "activity", max(cfg.GPUSmallSlots, 1))
		if err := d.Metrics.RegisterBacklog(metrics.TemporalBacklog(d.Client.WorkflowService(), cfg.TemporalNamespace,
			metrics.Queue{Name: cfg.GPUTaskQueue, Type: enumspb.TASK_QUEUE_TYPE_WORKFLOW},
			metrics.Queue{Name: cfg.GPUTaskQueue, Type: enumspb.TASK_QUEUE_TYPE_ACTIVITY},
			metrics.Queue{Name: config.SmallTaskQueue(cfg.GPUTaskQueue), Type: enumspb.TASK_QUEUE_TYPE_ACTIVITY},
		), log); err != nil {
			return nil, err
		}
	}
	if r := mediaroot.Lookup(cfg.MediaRoot); r != nil {
		// Step activities wait for a media root that went away instead of
		// failing (rideout).
		wo.Interceptors = append(wo.Interceptors, rideout.Interceptor(r, cfg.OutageRideOut, log))
	}
	w := embedjob.NewWorker(d.Client, wo, acts)
	small := embedjob.NewSmallWorker(d.Client, wo, acts)
	// EmbedJob runs beside its step activities, so a GPU host serves POST
	// /embed/jobs on its own.
	embedjob.RegisterWorkflows(w)
	return &Host{Activities: acts, Server: srv, Worker: w, SmallWorker: small, deps: d}, nil
}

// StartWorkers starts the GPU queue's worker and its small lane's.
func (h *Host) StartWorkers() error {
	q := h.deps.Config.GPUTaskQueue
	if err := h.Worker.Start(); err != nil {
		return fmt.Errorf("start GPU worker on %s: %w", q, err)
	}
	if h.SmallWorker != nil {
		if err := h.SmallWorker.Start(); err != nil {
			h.Worker.Stop()
			return fmt.Errorf("start GPU worker on %s: %w", config.SmallTaskQueue(q), err)
		}
	}
	return nil
}

// StopWorkers stops both workers, the small lane first.
func (h *Host) StopWorkers() {
	if h.SmallWorker != nil {
		h.SmallWorker.Stop()
	}
	h.Worker.Stop()
}

// shutdownGrace is how long in-flight HTTP requests get at shutdown; every
// handler is bounded by temporalCallTimeout, so this is enough.
const shutdownGrace = 10 * time.Second

// Run starts the worker and the HTTP server and runs until ctx is done, then
// stops both. It returns the first error that stopped it early.
func (h *Host) Run(ctx context.Context) error {
	cfg := h.deps.Config
	log := h.Activities.Log
	ln := h.deps.Listener
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.GPUListen); err != nil {
			return fmt.Errorf("listen on %s: %w", cfg.GPUListen, err)
		}
	}
	if err := h.StartWorkers(); err != nil {
		ln.Close()
		return err
	}
	defer h.Activities.Close()
	defer h.StopWorkers()
	hs := &http.Server{
		Handler:           h.Server,
		ReadHeaderTimeout: 10 * time.Second, // slow-loris guard; bodies may be large
		// A whole request, body included: the backend sends its step
		// requests over the data-centre network, where even a large one
		// takes seconds; an unauthenticated slow body is cut after a minute.
		ReadTimeout: time.Minute,
		IdleTimeout: 2 * time.Minute,
		BaseContext: func(net.Listener) context.Context { return ctx },
	}
	errc := make(chan error, 1)
	go func() { errc <- hs.Serve(ln) }()
	log.Info("GPU host started", "listen", ln.Addr().String(), "task_queue", cfg.GPUTaskQueue,
		"slots", max(cfg.GPUSlots, 1), "small_lane", config.SmallTaskQueue(cfg.GPUTaskQueue), "small_slots", max(cfg.GPUSmallSlots, 1), "executor", h.Activities.Engine.Runner.Name())
	select {
	case <-ctx.Done():
	case err := <-errc:
		if !errors.Is(err, http.ErrServerClosed) {
			return fmt.Errorf("GPU service HTTP: %w", err)
		}
	}
	sctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	if err := hs.Shutdown(sctx); err != nil {
		log.Warn("GPU service HTTP shutdown", "error", err)
	}
	log.Info("GPU host stopped")
	return nil
}

// Run builds a GPU host from d and runs it until ctx is done: the entry point
// for `kinflow gpu-worker` and `kinflow dev`.
func Run(ctx context.Context, d Deps) error {
	h, err := New(ctx, d)
	if err != nil {
		return err
	}
	return h.Run(ctx)
}
