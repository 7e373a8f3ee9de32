package embedjob

import (
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/lease"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// RegisterWorkflows registers EmbedJob. The GPU task queue's worker runs it
// beside its step activities, so a GPU host is complete on its own.
func RegisterWorkflows(r worker.WorkflowRegistry) {
	r.RegisterWorkflowWithOptions(EmbedJob, workflow.RegisterOptions{Name: WorkflowName})
}

// WorkerOptions are the GPU task queue worker's settings.
type WorkerOptions struct {
	// TaskQueue is the GPU task queue (config GPUTaskQueue).
	TaskQueue string
	// Slots is how many steps run at once (config GPUSlots); below 1 means 1.
	Slots int
	// SmallSlots is how many small steps the small lane holds at once
	// (config GPUSmallSlots); below 1 means 1.
	SmallSlots int
	// Interceptors wrap every activity (step-duration metrics).
	Interceptors []interceptor.WorkerInterceptor
}

// NewWorker makes the GPU task queue's worker with the step activities
// registered. Its activity slots are Slots (default 1), never the SDK's
// default of 1,000: each step holds a GPU's memory.
func NewWorker(c client.Client, o WorkerOptions, a *Activities) worker.Worker {
	slots := max(o.Slots, 1)
	w := worker.New(c, o.TaskQueue, worker.Options{
		MaxConcurrentActivityExecutionSize: slots,
		// A GPU host takes work only when it has a free slot, so a second
		// host on the same queue gets the next step instead of this one.
		MaxConcurrentActivityTaskPollers: 1,
		// EmbedJob workflows run here too: one per stage sent to the GPU,
		// many at once under load; the SDK's 2 pollers took their tasks
		// at ~25 a second.
		MaxConcurrentWorkflowTaskPollers: 4,
		// Step activities run to completion on a shutdown only if the
		// workflow's heartbeat timeout allows; give them time to stop their
		// program cleanly.
		WorkerStopTimeout: killGrace + 5*time.Second,
		Interceptors:      o.Interceptors,
	})
	a.Register(w)
	return w
}

// NewSmallWorker makes the worker of the GPU queue's small lane
// (SmallTaskQueue): the same step activities, SmallSlots of them at once.
// The steps it takes are small by construction (KINFLOW_GPU_SMALL_STEP_SEQS);
// their batches queue for the device behind at most the batch in flight
// (Engine.Device), never behind a large job's remaining shards.
func NewSmallWorker(c client.Client, o WorkerOptions, a *Activities) worker.Worker {
	w := worker.New(c, config.SmallTaskQueue(o.TaskQueue), worker.Options{
		MaxConcurrentActivityExecutionSize: max(o.SmallSlots, 1),
		MaxConcurrentActivityTaskPollers:   SmallLanePollers(o.SmallSlots),
		DisableWorkflowWorker:              true,
		WorkerStopTimeout:                  killGrace + 5*time.Second,
		Interceptors:                       o.Interceptors,
	})
	a.Register(w)
	return w
}

// SmallLanePollers is how many long polls the small lane keeps open: one
// per slot (at most 32), so every free slot is asking. With the SDK's
// default of 2 beside 8 slots, a burst of 200 3-row jobs waited up to
// 5 s between a step's schedule and its start: the last tens of steps sat
// in the queue's backlog while the pollers were elsewhere, and the burst's
// last jobs ended seconds after the rest (docs/BENCHMARKS.md, "The GPU
// small lane's pollers"). A poller holds no slot until a task arrives, so the lane
// still runs at most its slots at once.
func SmallLanePollers(slots int) int {
	return min(max(slots, 1), 32)
}

// LocalActivities builds the step activities for the CPU worker's local
// computation (fail-open): the same activities, executor and layout as a GPU
// host, registered on the CPU task queue.
func LocalActivities(cfg *config.Config, log *slog.Logger) (*Activities, error) {
	st, err := SettingsFromConfig(cfg)
	if err != nil {
		return nil, err
	}
	return NewActivities(cfg, st, nil, log.With("role", "local-steps"))
}

// SettingsFromConfig loads the GPU host's env file named by the configuration.
func SettingsFromConfig(cfg *config.Config) (*Settings, error) {
	file, err := LoadEnvFile(cfg.GPUEnvFile)
	if err != nil {
		return nil, err
	}
	st, err := LoadSettings(LayeredLookup(file), file, cfg.MediaRoot)
	if err != nil {
		return nil, fmt.Errorf("GPU env file: %w", err)
	}
	return st, nil
}

// NewActivities builds the step activities on the media root's artefact
// layout; runner nil means the configured executor (StepExecutor).
func NewActivities(cfg *config.Config, st *Settings, runner BatchRunner, log *slog.Logger) (*Activities, error) {
	el, err := embedding.LayoutFromConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("artefact layout: %w", err)
	}
	po := st.Pool
	po.Log = log.With("component", "step-servers")
	pool := stepserver.NewPool(po)
	if runner == nil {
		switch cfg.StepExecutor {
		case "command":
			runner = &CommandRunner{Settings: st, MediaRoot: cfg.MediaRoot, Pool: pool}
			var unset []string
			for _, k := range ActiveSteps {
				_, cmd := st.Commands[k]
				_, srv := st.Servers[k]
				if !cmd && !srv {
					unset = append(unset, k)
				}
			}
			if len(unset) > 0 {
				log.Warn("command executor: steps without a program fail when asked", "steps", strings.Join(unset, ","))
			}
		default:
			if runner, err = newSyntheticServerRunner(st, cfg.MediaRoot, pool); err != nil {
				return nil, err
			}
		}
	}
	host, _ := os.Hostname()
	leases := &lease.Leases{
		Dir: filepath.Join(cfg.MediaRoot, "sequence_info", ".leases"), TTL: leaseTTL,
		Owner: fmt.Sprintf("%s/%d", host, os.Getpid()),
	}
	return &Activities{
		Engine: &Engine{Runner: runner, Settings: st, Log: log, Leases: leases, Layout: el},
		Layout: EmbeddingLayout{L: el}, Logs: &JobLogs{Dir: st.JobLogDir}, Log: log, Known: NewRegistry(),
		Servers: pool,
	}, nil
}
