package stepserver

import (
	"log/slog"
	"time"
)

// Environment keys that tune a Pool (GPU host env file or process
// environment): read and checked by config.LoadHost (config.HostKeys).
const (
	EnvServersMax   = "KINFLOW_STEP_SERVERS_MAX"
	EnvIdleSeconds  = "KINFLOW_STEP_SERVER_IDLE_SECONDS"
	EnvStartSeconds = "KINFLOW_STEP_SERVER_START_SECONDS"
	EnvAhead        = "KINFLOW_STEP_SERVER_AHEAD"
)

// Defaults of Options.
const (
	// DefaultMax is how many step servers may be resident on one host. Each
	// holds its model's weights (ESM-2 650M: 2.5 GB; ProtT5-XL in half
	// precision: 2.4 GB; ESM-1v's five-model ensemble: about 13 GB), a CUDA
	// context (about 0.5 GB) and, because PyTorch's caching allocator keeps
	// what it once reserved, the peak activations of its largest batch. Two
	// keep the step that runs now and the one before it warm (a job's steps
	// run one after another, so method A's three steps, or two jobs of two
	// methods taking turns, reload at most one model per step) while staying
	// within a 24 GB card for every model of the catalogue. Hosts with a large
	// GPU raise it.
	DefaultMax = 2
	// DefaultIdle is how long an unused server stays up: long enough that
	// the jobs of one working session (and the retry of a failed one) find
	// the model warm, short enough that a host shared with other work gets
	// its GPU memory back within minutes.
	DefaultIdle = 600 * time.Second
	// DefaultStartTimeout bounds loading a model: a 13 GB ensemble read from
	// a network disk at 50 MB/s takes over four minutes; a program silent
	// for ten is stuck.
	DefaultStartTimeout = 600 * time.Second
	// DefaultKillGrace is what a stopped server gets, after stdin is closed
	// and again after SIGTERM, to commit the file it is writing: the same 20 s
	// the one-shot runner gives a cancelled program.
	DefaultKillGrace = 20 * time.Second
	// DefaultAhead is how many batches the host keeps in flight to one
	// server. A pipelined server (steps/, KINFLOW_STEPS_PIPELINE_DEPTH 3)
	// keeps three stages busy at once (a forward pass, a copy to the host,
	// the writes); when a host batch is one pass, three batches in flight
	// fill them, and the device never waits for the host's check of the
	// batch before. The CPU figure (docs/BENCHMARKS.md) grew from 1 to 2
	// to 3. More only makes another job's batch wait behind more of this
	// one's.
	DefaultAhead = 3
)

// Options configure a Pool. Zero fields take the defaults above.
type Options struct {
	// Max is the most servers that run at once; starting one more first
	// stops the least recently used idle one.
	Max int
	// Idle is how long a server may go without a batch before it is asked
	// to exit.
	Idle time.Duration
	// StartTimeout bounds the time from start to the ready line.
	StartTimeout time.Duration
	// KillGrace is the time given after closing stdin and after SIGTERM.
	KillGrace time.Duration
	// Ahead is the most batches in flight to one server at once (sent and
	// not yet answered), from any callers: Send waits while a server has
	// this many. 1 sends a batch only once the one before is answered.
	Ahead int
	// Log receives the pool's own events and the output servers write
	// between batches (nil: slog.Default()).
	Log *slog.Logger
}

func (o Options) withDefaults() Options {
	if o.Max <= 0 {
		o.Max = DefaultMax
	}
	if o.Idle <= 0 {
		o.Idle = DefaultIdle
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = DefaultStartTimeout
	}
	if o.KillGrace <= 0 {
		o.KillGrace = DefaultKillGrace
	}
	if o.Ahead <= 0 {
		o.Ahead = DefaultAhead
	}
	if o.Log == nil {
		o.Log = slog.Default()
	}
	return o
}
