// Package config loads kinflow's typed configuration from the environment.
//
// Every key lives in one table (Keys): its name, default, meaning and parser.
// The same table validates the environment at start, documents the keys in
// the README (see `kinflow config --markdown`) and is checked by a test, so the
// three can never drift apart.
package config

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Config is the validated configuration of every kinflow role.
type Config struct {
	// DatabaseURL is the application database: sqlite:PATH or postgres://….
	DatabaseURL string
	// TemporalAddress is host:port of the Temporal frontend.
	TemporalAddress string
	// TemporalUIPort is the port of the Temporal web UI `kinflow dev`
	// starts with its dev server.
	TemporalUIPort int
	// TemporalNamespace is the Temporal namespace every workflow runs in.
	TemporalNamespace string
	// CPUTaskQueue is served by `kinflow worker`.
	CPUTaskQueue string
	// GPUTaskQueue is served by `kinflow gpu-worker`.
	GPUTaskQueue string
	// MediaRoot holds sequence_info/ (the shared cache) and jobs/.
	MediaRoot string
	// APIListen is the public API's listen address.
	APIListen string
	// GPUListen is the GPU service HTTP API's listen address (gpu-worker).
	GPUListen string
	// MetricsListen is where `kinflow worker` and `kinflow gpu-worker` serve
	// /metrics; empty: not served (the API serves /metrics on its own port).
	MetricsListen string
	// TrustedProxies are the peers whose forwarding headers are believed.
	TrustedProxies []netip.Prefix
	// CORSOrigins are the origins allowed by CORS ("*" for any).
	CORSOrigins []string
	// LogLevel is the slog level of every role.
	LogLevel slog.Level
	// StatusWaitMax caps /status/'s ?waitSeconds= long poll.
	StatusWaitMax time.Duration
	// StatusCacheTTL is the longest a status is served from memory without
	// a change notice (a change written by another process).
	StatusCacheTTL time.Duration
	// StatusReadsPerSecond is each key's sustained rate of status reads
	// (0: unlimited); twice as many may come in a burst.
	StatusReadsPerSecond int
	// WaitsPerKey bounds the event streams and held long polls one key has
	// open at once in one API process; WaitsMax bounds them for all keys.
	WaitsPerKey, WaitsMax int
	// StreamMaxAge is the longest an event stream stays open before the
	// server ends it (the client resumes with Last-Event-ID).
	StreamMaxAge time.Duration
	// WebhookAllowPrivate lets job notices go to private, loopback and
	// link-local addresses.
	WebhookAllowPrivate bool

	// GPUEmbedServiceURL is the GPU service's base URL, or several GPU
	// hosts' base URLs joined by commas (gpuhealth.URLs splits them);
	// empty turns GPU offload off.
	GPUEmbedServiceURL string
	// GPUEmbedServiceToken is the optional bearer token of the GPU service.
	GPUEmbedServiceToken string
	// GPUEmbedHealthTTL is how long a GPU health reading is reused.
	GPUEmbedHealthTTL time.Duration
	// GPUEmbedJobTimeout bounds the whole remote GPU phase of one stage.
	GPUEmbedJobTimeout time.Duration
	// GPUEmbedFailClosed makes any GPU failure fatal to the job.
	GPUEmbedFailClosed bool
	// MethodJCacheDir is method J's contact-map cache.
	MethodJCacheDir string
	// MethodECheckpointRoot holds method E's checkpoints (<root>/<kcat|km>/…/model.pt);
	// empty: the synthetic model keys of internal/embedding.
	MethodECheckpointRoot string
	// BindingSiteDir is the folder under the media root holding binding_sites_all.tsv.
	BindingSiteDir string
	// CacheFolders names the family folders under sequence_info/: kinflow
	// or reference (internal/embedding.Folders).
	CacheFolders string

	// MethodsFile is the operator's method catalogue file (JSON or YAML).
	MethodsFile string
	// Mmseqs is the MMseqs2 program of the similarity analysis.
	Mmseqs string
	// SimilarityThreads is mmseqs --threads; 0: every core.
	SimilarityThreads int
	// SimilarityIndex makes dataset builds also run mmseqs createindex.
	SimilarityIndex bool
	// SimilarityValidateTimeout bounds /validate/'s similarity analysis.
	SimilarityValidateTimeout time.Duration
	// DefaultDailyQuota is the predictions per key per UTC day without a custom limit.
	DefaultDailyQuota int
	// MaxRows is the largest number of rows one request may carry.
	MaxRows int
	// MaxUploadBytes caps one request body.
	MaxUploadBytes int64
	// SubmitReconcileAfter is how old a job still in state Submitting (its
	// submit was cut off by a crash) must be before the API's reconciler
	// finishes it: starts its workflow, or refunds and removes it.
	SubmitReconcileAfter time.Duration
	// OutageRideOut is how long a running job's bookkeeping steps (its
	// database writes, Finalize) keep retrying through a storage or database
	// outage before the job fails, so that an outage an operator fixes in
	// minutes costs no job.
	OutageRideOut time.Duration
	// MediaMinFreeBytes is the free space of the media root below which it
	// counts as full: submits answer 503 and /health/ names it.
	MediaMinFreeBytes int64
	// JobRetention is how long a finished job's folder and result are kept.
	JobRetention time.Duration
	// CacheBudgetBytes is the embedding cache's size budget; 0: none.
	CacheBudgetBytes int64
	// CacheRecordKeyFile holds the secret that authenticates the cache's
	// integrity records; empty: records are not authenticated.
	CacheRecordKeyFile string
	// StepExecutor is how embedding steps run: synthetic or command.
	StepExecutor string
	// PredictionEngine is how predictions run: synthetic or command.
	PredictionEngine string
	// GPUSlots is how many steps one GPU host runs at once.
	GPUSlots int
	// GPUSmallSlots is how many small steps one GPU host holds at once on
	// the small lane (their batches still take turns on the device).
	GPUSmallSlots int
	// GPUSmallStepSeqs is the most sequences of a step that goes to the
	// small lane; 0 turns the lane off.
	GPUSmallStepSeqs int
	// StepShardSeqs is the most sequences one shard of a step holds: a
	// larger step is cut into shards that several GPU hosts run at once.
	StepShardSeqs int
	// GPUEnvFile is the GPU host's environment file (step command overrides).
	GPUEnvFile string
	// HeartbeatTimeout is the heartbeat timeout of long activities.
	HeartbeatTimeout time.Duration

	// CPUActivitySlots is how many CPU-bound activities (predictions, local
	// embedding steps, similarity, experimental values) one worker process
	// runs at once.
	CPUActivitySlots int
	// CPULocalActivitySlots is how many short bookkeeping steps (parse,
	// plan, record, finalize: local activities) one worker runs at once.
	CPULocalActivitySlots int
	// CPUWorkflowSlots is how many workflow tasks one worker runs at once.
	CPUWorkflowSlots int
	// TrackSlots is how many progress trackers one worker runs at once, on
	// their own task queue.
	TrackSlots int
	// NoticeSlots is how many job notices (webhook deliveries) one worker
	// sends at once, on their own task queue.
	NoticeSlots int
	// NoticePerKey is how many notices of one API key one worker sends at
	// once; another of that key is put off (retried a few seconds later).
	NoticePerKey int
	// SmallJobRows is the most rows of a job whose prediction and
	// annotation steps run as local activities; 0: none does.
	SmallJobRows int
	// BulkJobRows is the most rows of a job that is not bulk by its size
	// (internal/fairness); 0: only a job that asks is bulk.
	BulkJobRows int
	// Fairness starts each job with its class and its key's fairness key
	// and weight (internal/fairness); false starts every job alike (first
	// come, first served on each queue: the benchmark's baseline).
	Fairness bool
	// TrackMinFiles is the fewest missing files for which a stage runs a
	// progress tracker.
	TrackMinFiles int
	// MaxUnitsPerRow caps one row's prediction units (substrates ×
	// candidates × targets).
	MaxUnitsPerRow int
	// MaxUnitsPerJob caps one job's prediction units.
	MaxUnitsPerJob int
	// MaxCellBytes caps one cell of an input table; MaxRowListBytes the
	// list cells (Protein Sequence, Substrates, Products) of one row.
	MaxCellBytes    int
	MaxRowListBytes int
	// BodyBudgetBytes caps the bytes of request bodies the api reads at
	// once, over all requests (0: no budget).
	BodyBudgetBytes int64
	// ValidatePerKey caps the /validate/ calls one key runs at once;
	// ValidateTimeout bounds one call's checking.
	ValidatePerKey  int
	ValidateTimeout time.Duration
	// ProgressNoNotify turns file-system notifications off in the progress
	// tracker (KINFLOW_PROGRESS_NOTIFY=0): folder sweeps only, as on shared
	// storage where another host writes the files.
	ProgressNoNotify bool
}

// Key describes one configuration key.
type Key struct {
	Name    string
	Default string
	Meaning string
	// Allowed says, for error messages, what a valid value looks like.
	Allowed string
	set     func(c *Config, v string) error
}

// KeyError reports one invalid configuration value.
type KeyError struct {
	Key     string
	Value   string
	Allowed string
}

func (e *KeyError) Error() string {
	return fmt.Sprintf("invalid configuration: %s=%q: %s", e.Key, e.Value, e.Allowed)
}

var errInvalid = errors.New("invalid")

// Keys is the table of every configuration key, in README order.
var Keys = []Key{
	{Name: "KINFLOW_DATABASE_URL", Default: "sqlite:.data/kinflow.db",
		Meaning: "Application database: `sqlite:PATH` (embedded, pure Go) or `postgres://user@host:port/db?sslmode=disable`.",
		Allowed: "want sqlite:PATH or postgres://…",
		set: func(c *Config, v string) error {
			if !strings.HasPrefix(v, "sqlite:") && !strings.HasPrefix(v, "postgres://") && !strings.HasPrefix(v, "postgresql://") {
				return errInvalid
			}
			if strings.HasPrefix(v, "sqlite:") && strings.TrimPrefix(v, "sqlite:") == "" {
				return errInvalid
			}
			c.DatabaseURL = v
			return nil
		}},
	{Name: "KINFLOW_TEMPORAL_ADDRESS", Default: "127.0.0.1:7233",
		Meaning: "Temporal frontend host:port.", Allowed: "want host:port",
		set: func(c *Config, v string) error { return setHostPort(&c.TemporalAddress, v) }},
	// 8233 is the Temporal CLI's own default (frontend port + 1000); a
	// second stack beside the first moves it with the frontend's port.
	{Name: "KINFLOW_TEMPORAL_UI_PORT", Default: "8233",
		Meaning: "Port of the Temporal web UI that `kinflow dev` (`make run`) starts with its Temporal dev server (on the host of `KINFLOW_TEMPORAL_ADDRESS`).",
		Allowed: "want a port from 1 to 65535",
		set:     func(c *Config, v string) error { return setIntRange(&c.TemporalUIPort, v, 1, 65535) }},
	{Name: "KINFLOW_TEMPORAL_NAMESPACE", Default: "default",
		Meaning: "Temporal namespace.", Allowed: "want a non-empty name",
		set: func(c *Config, v string) error { return setName(&c.TemporalNamespace, v) }},
	{Name: "KINFLOW_CPU_TASK_QUEUE", Default: "kinflow-cpu",
		Meaning: "Task queue of `kinflow worker` (workflows and CPU activities).", Allowed: "want a non-empty name",
		set: func(c *Config, v string) error { return setName(&c.CPUTaskQueue, v) }},
	{Name: "KINFLOW_GPU_TASK_QUEUE", Default: "kinflow-gpu",
		Meaning: "Task queue of `kinflow gpu-worker` (one activity per GPU step key).", Allowed: "want a non-empty name",
		set: func(c *Config, v string) error { return setName(&c.GPUTaskQueue, v) }},
	{Name: "KINFLOW_MEDIA_ROOT", Default: "./media",
		Meaning: "Media root: `sequence_info/` (the shared embedding cache), `jobs/`, the binding-site table. Shared storage in production. It must exist (only `kinflow dev` creates it) and carries the identity marker `.kinflow-media-root` (docs/production.md, \"The media root's identity\").",
		Allowed: "want a directory path",
		set:     func(c *Config, v string) error { return setName(&c.MediaRoot, v) }},
	{Name: "KINFLOW_API_LISTEN", Default: "127.0.0.1:8000",
		Meaning: "Listen address of the public API (`kinflow api`, `kinflow dev`).", Allowed: "want host:port",
		set: func(c *Config, v string) error { return setHostPort(&c.APIListen, v) }},
	{Name: "KINFLOW_GPU_LISTEN", Default: "127.0.0.1:8080",
		Meaning: "Listen address of the GPU service HTTP API (`kinflow gpu-worker`).", Allowed: "want host:port",
		set: func(c *Config, v string) error { return setHostPort(&c.GPUListen, v) }},
	{Name: "KINFLOW_METRICS_LISTEN", Default: "",
		Meaning: "Listen address of the Prometheus `/metrics` endpoint of `kinflow worker` and `kinflow gpu-worker` (give each process its own port). Empty: not served. The API serves `/metrics` on its own listen address.",
		Allowed: "want host:port or empty",
		set: func(c *Config, v string) error {
			if strings.TrimSpace(v) == "" {
				c.MetricsListen = ""
				return nil
			}
			return setHostPort(&c.MetricsListen, v)
		}},
	{Name: "KINFLOW_TRUSTED_PROXIES", Default: "",
		Meaning: "Comma-separated IPs or CIDRs of reverse proxies whose `X-Forwarded-For` is believed. Empty: the socket peer is the caller.",
		Allowed: "want a comma-separated list of IP addresses or CIDR prefixes",
		set: func(c *Config, v string) error {
			c.TrustedProxies = nil
			for _, f := range splitList(v) {
				if p, err := netip.ParsePrefix(f); err == nil {
					c.TrustedProxies = append(c.TrustedProxies, p.Masked())
					continue
				}
				a, err := netip.ParseAddr(f)
				if err != nil {
					return errInvalid
				}
				c.TrustedProxies = append(c.TrustedProxies, netip.PrefixFrom(a.Unmap(), a.Unmap().BitLen()))
			}
			return nil
		}},
	{Name: "KINFLOW_CORS_ORIGINS", Default: "*",
		Meaning: "Comma-separated origins allowed by CORS; `*` allows any (without credentials: only origins listed by name get `Access-Control-Allow-Credentials`).", Allowed: "want a comma-separated list of origins",
		set: func(c *Config, v string) error { c.CORSOrigins = splitList(v); return nil }},
	{Name: "KINFLOW_STATUS_WAIT_MAX_SECONDS", Default: "60",
		Meaning: "Longest `/status/<id>/?waitSeconds=N` holds a request that waits for a change (larger N is capped to it). 60 s stays under the idle timeouts of common proxies and load balancers (often 60–100 s), so a held request is never cut by one.",
		Allowed: "want a whole number of seconds from 1 to 600",
		set: func(c *Config, v string) error {
			n := 0
			if err := setIntRange(&n, v, 1, 600); err != nil {
				return err
			}
			c.StatusWaitMax = time.Duration(n) * time.Second
			return nil
		}},
	{Name: "KINFLOW_STATUS_CACHE_MS", Default: "1000",
		Meaning: "Longest a job's status is served from the API's memory without re-reading the database. Writes made in the API's own process (`kinflow dev`), and on Postgres every process's writes (triggers and `LISTEN`), refresh it at once; a change written by a separate worker on SQLite is seen within this time. While the store hears of every write (Postgres with its listener; SQLite with no other process on the file), a waiting job is re-read only when it changes (a Pending job's queue position after any change, from one list of the Pending jobs shared by every job and at most 0.25 s old), and every 30 s at most. 1 s is the resolution of the status's own clock fields (elapsedSeconds), and bounds a polling storm to one database read per job per second.",
		Allowed: "want a whole number of milliseconds from 0 to 60000",
		set: func(c *Config, v string) error {
			n := 0
			if err := setIntRange(&n, v, 0, 60000); err != nil {
				return err
			}
			c.StatusCacheTTL = time.Duration(n) * time.Millisecond
			return nil
		}},
	{Name: "KINFLOW_STATUS_READS_PER_SECOND", Default: "100",
		Meaning: "Status reads (`/status/`, its long poll and its event stream) one API key may make per second, with bursts of twice as many; faster readers get 429 with `Retry-After`, answered before any database read. 0: unlimited. The reference's clients ask once per job every 1–2 s (the Python client from 1 s growing to 10 s), so 100 lets one key follow 100 jobs at their fastest pace; a waiting client should use the long poll or the stream instead. Waiting reads (long polls, event streams) have a budget of their own of the same size, so a key's looping client never starves the same key's waiting ones.",
		Allowed: "want a whole number from 0 to 1000000",
		set:     func(c *Config, v string) error { return setIntRange(&c.StatusReadsPerSecond, v, 0, 1000000) }},
	{Name: "KINFLOW_WAITS_PER_KEY", Default: "256",
		Meaning: "Event streams and held long polls (`/status/<id>/?waitSeconds=` with `If-None-Match`) one API key may have open at once in one API process; one more gets 429 with `Retry-After`. Each holds a connection and a descriptor: without a bound one key held 11,000 streams and the process ran out of descriptors. 256 lets a pipeline wait on 256 jobs at once (more wait their turn after the 429).",
		Allowed: "want a whole number from 1 to 1000000",
		set:     func(c *Config, v string) error { return setIntRange(&c.WaitsPerKey, v, 1, 1000000) }},
	{Name: "KINFLOW_WAITS_MAX", Default: "4096",
		Meaning: "Event streams and held long polls of all keys together in one API process; past it, 429 with `Retry-After`. The API checks at start that its open-file limit leaves room for this many plus 1,024 descriptors for everything else (the database, files, Temporal, and in `kinflow dev` the worker), and lowers the bound, with a warning, when it does not.",
		Allowed: "want a whole number from 1 to 1000000",
		set:     func(c *Config, v string) error { return setIntRange(&c.WaitsMax, v, 1, 1000000) }},
	{Name: "KINFLOW_STREAM_MAX_SECONDS", Default: "900",
		Meaning: "Longest an event stream (`/status/<id>/events/`) stays open: then the server ends it and the client reconnects with `Last-Event-ID` (EventSource and the web page do so by themselves), which re-checks its key and lets a full server hand the place to another. 15 minutes costs a long job's watcher one reconnect per quarter hour.",
		Allowed: "want a whole number of seconds from 10 to 86400",
		set: func(c *Config, v string) error {
			n := 0
			if err := setIntRange(&n, v, 10, 86400); err != nil {
				return err
			}
			c.StreamMaxAge = time.Duration(n) * time.Second
			return nil
		}},
	{Name: "KINFLOW_WEBHOOK_ALLOW_PRIVATE", Default: "0",
		Meaning: "1/true/yes/on: job notices (`notifyUrl` webhooks) may go to private, loopback and link-local addresses. Off by default, so that a notify URL cannot make the service reach its own network or a cloud metadata address (server-side request forgery); turn it on for an intranet deployment or tests.",
		Allowed: "want 1, true, yes, on, 0, false, no or off",
		set:     func(c *Config, v string) error { return setBool(&c.WebhookAllowPrivate, v) }},
	{Name: "LOG_LEVEL", Default: "info",
		Meaning: "Log level of every role: debug, info, warn or error. Logs are JSON lines.", Allowed: "want debug, info, warn or error",
		set: func(c *Config, v string) error {
			return c.LogLevel.UnmarshalText([]byte(strings.ToLower(strings.TrimSpace(v))))
		}},
	{Name: "GPU_EMBED_SERVICE_URL", Default: "",
		Meaning: "Base URL of the GPU embedding service, or a comma-separated list of GPU hosts' URLs: the service counts as online while any of them answers online. Empty: GPU offload is skipped and missing embeddings are computed locally.",
		Allowed: "want empty, an http(s) URL or a comma-separated list of them",
		set: func(c *Config, v string) error {
			var urls []string
			for _, f := range splitList(v) {
				f = strings.TrimRight(f, "/")
				u, err := url.Parse(f)
				if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
					return errInvalid
				}
				urls = append(urls, f)
			}
			c.GPUEmbedServiceURL = strings.Join(urls, ",")
			return nil
		}},
	{Name: "GPU_EMBED_SERVICE_TOKEN", Default: "",
		Meaning: "Optional bearer token of the GPU service. Set on the backend it is sent; set on the GPU host it is required by every GPU endpoint but `/health`.",
		Allowed: "any string",
		set:     func(c *Config, v string) error { c.GPUEmbedServiceToken = strings.TrimSpace(v); return nil }},
	{Name: "GPU_EMBED_HEALTH_TTL_SECONDS", Default: "10",
		Meaning: "Seconds a GPU health reading (success or failure) is reused before `/health` is read again.",
		Allowed: "want a whole number of seconds, 1 or more",
		set:     func(c *Config, v string) error { return setSeconds(&c.GPUEmbedHealthTTL, v) }},
	{Name: "GPU_EMBED_JOB_TIMEOUT_SECONDS", Default: "1200",
		Meaning: "Upper limit on one stage's remote GPU phase (submission to done); past it the stage falls back to local computation (or fails when fail-closed).",
		Allowed: "want a whole number of seconds, 1 or more",
		set:     func(c *Config, v string) error { return setSeconds(&c.GPUEmbedJobTimeout, v) }},
	{Name: "GPU_EMBED_FAIL_CLOSED", Default: "0",
		Meaning: "1/true/yes/on: any GPU precompute failure fails the job at once. Otherwise (default) the job computes the missing embeddings locally (fail-open).",
		Allowed: "want 1, true, yes, on, 0, false, no or off",
		set:     func(c *Config, v string) error { return setBool(&c.GPUEmbedFailClosed, v) }},
	{Name: "METHODJ_CACHE_DIR", Default: "",
		Meaning: "Method J's contact-map cache. Empty: `<media root>/sequence_info/methodj_contacts`.",
		Allowed: "want a directory path",
		set:     func(c *Config, v string) error { c.MethodJCacheDir = strings.TrimSpace(v); return nil }},
	{Name: "METHODE_CHECKPOINT_ROOT", Default: "",
		Meaning: "Method E's checkpoint root: every `<root>/<kcat|km>/…/<grandparent>/<parent>/model.pt` gives the cache model key `<grandparent>__<parent>`. Empty: one synthetic model key, `synthetic__model_0`.",
		Allowed: "want a directory path",
		set:     func(c *Config, v string) error { c.MethodECheckpointRoot = strings.TrimSpace(v); return nil }},
	{Name: "KINFLOW_BINDING_SITE_DIR", Default: "pseq2sites",
		Meaning: "Folder under the media root that holds method A's binding-site table `binding_sites_all.tsv` (the reference deployment's `media/pseq2sites/`).",
		Allowed: "want a relative folder name without `..`",
		set: func(c *Config, v string) error {
			v = strings.Trim(strings.TrimSpace(v), "/")
			if v == "" || strings.HasPrefix(v, ".") || strings.Contains(v, "..") || strings.Contains(v, "\\") {
				return errInvalid
			}
			c.BindingSiteDir = v
			return nil
		}},
	{Name: "KINFLOW_CACHE_FOLDERS", Default: "kinflow",
		Meaning: "Names of the embedding cache folders under `<media root>/sequence_info/`: `kinflow` (every folder named after its family) or `reference` (the reference deployment's folders, which its method programs read: `esm1b_turnup`, `catpred_esm2/<param>/<model_key>`, `omniesi_esm2`, `iecata_prot_t5_residues`, `catrange_esmc`; docs/embedding.md). Families keep their names in records, plans and metrics. Set the same value on the API, every worker and every GPU host: a worker refuses a GPU host whose naming differs.",
		Allowed: "want kinflow or reference",
		set:     func(c *Config, v string) error { return setEnum(&c.CacheFolders, v, "kinflow", "reference") }},
	{Name: "KINFLOW_METHODS_FILE", Default: "",
		Meaning: "Operator method catalogue (JSON or YAML) that renames, adds or removes methods and sets their commands. Empty: the built-in catalogue.",
		Allowed: "want a file path",
		set:     func(c *Config, v string) error { c.MethodsFile = strings.TrimSpace(v); return nil }},
	{Name: "KINFLOW_MMSEQS", Default: "mmseqs",
		Meaning: "The MMseqs2 program of the similarity analysis (Debian package `mmseqs2`). Datasets are configured in the methods file (`similarity:`); their FASTA files live under the media root.",
		Allowed: "want a program name or path",
		set:     func(c *Config, v string) error { return setName(&c.Mmseqs, v) }},
	{Name: "KINFLOW_SIMILARITY_THREADS", Default: "0",
		Meaning: "Threads of one MMseqs2 search (`--threads`); 0: every core of the host.",
		Allowed: "want a whole number, 0 or more",
		set: func(c *Config, v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil || n < 0 {
				return errInvalid
			}
			c.SimilarityThreads = n
			return nil
		}},
	{Name: "KINFLOW_SIMILARITY_INDEX", Default: "false",
		Meaning: "Also run `mmseqs createindex` when building a dataset's database (see docs/BENCHMARKS.md for when it pays).",
		Allowed: "want true or false",
		set:     func(c *Config, v string) error { return setBool(&c.SimilarityIndex, v) }},
	{Name: "KINFLOW_SIMILARITY_VALIDATE_TIMEOUT_SECONDS", Default: "60",
		Meaning: "Longest time `/validate/` spends searching sequences that are not cached yet; past it the `similarity` field is an error and the searches finished so far stay cached, so asking again continues the work. Jobs are not bounded by it.",
		Allowed: "want a whole number of seconds, 1 or more",
		set:     func(c *Config, v string) error { return setSeconds(&c.SimilarityValidateTimeout, v) }},
	{Name: "KINFLOW_DEFAULT_DAILY_QUOTA", Default: "20000",
		Meaning: "Predictions (CSV rows) per API key per UTC day when the key has no custom limit.",
		Allowed: "want a whole number, 1 or more",
		set:     func(c *Config, v string) error { return setPositiveInt(&c.DefaultDailyQuota, v) }},
	{Name: "KINFLOW_MAX_ROWS", Default: "10000",
		Meaning: "Most rows one validate or submit request may carry.",
		Allowed: "want a whole number, 1 or more",
		set:     func(c *Config, v string) error { return setPositiveInt(&c.MaxRows, v) }},
	{Name: "KINFLOW_MAX_UPLOAD_BYTES", Default: "134217728",
		Meaning: "Most bytes one request body may carry (128 MiB: 10,000 rows of 10,000-residue sequences fit).",
		Allowed: "want a whole number of bytes, 1 or more",
		set: func(c *Config, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 1 {
				return errInvalid
			}
			c.MaxUploadBytes = n
			return nil
		}},
	{Name: "KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS", Default: "120",
		Meaning: "Seconds after which a submit cut off by a crash (job still `Submitting`) is finished by the API's reconciler: its workflow started if its input was written, else its charge refunded and its files removed. Longer than any normal submit takes from charge to queue.",
		Allowed: "want a whole number of seconds, 1 or more",
		set:     func(c *Config, v string) error { return setSeconds(&c.SubmitReconcileAfter, v) }},
	{Name: "KINFLOW_OUTAGE_RIDE_OUT_SECONDS", Default: "600",
		Meaning: "How long a running job's bookkeeping steps (its database writes, parsing, planning, writing its result in `Finalize`; never less than a step's own 10-minute limit for the last three) and `Predict`'s database reads and writes keep retrying, with backoff up to 30 s apart, through a full disk or an application database that is down, before the job fails (Failed, refunded). Ten minutes covers a database restart or failover and an operator freeing space after a page; a job whose storage stays broken still ends in bounded time.",
		Allowed: "want a whole number of seconds, 10 or more",
		set: func(c *Config, v string) error {
			if err := setSeconds(&c.OutageRideOut, v); err != nil || c.OutageRideOut < 10*time.Second {
				return errInvalid
			}
			return nil
		}},
	{Name: "KINFLOW_MEDIA_MIN_FREE_MB", Default: "256",
		Meaning: "Free space of the media root, in MiB, below which it counts as full: submits answer 503 with `Retry-After` (nothing charged) and `/health/` names the full store, until space returns. 256 MiB leaves the jobs already running room to write their results (a 10,000-row `output.csv` is a few MiB) while new work waits.",
		Allowed: "want a whole number of MiB, 0 or more",
		set: func(c *Config, v string) error {
			var n int
			if err := setIntRange(&n, v, 0, 1<<30); err != nil {
				return err
			}
			c.MediaMinFreeBytes = int64(n) << 20
			return nil
		}},
	{Name: "KINFLOW_JOB_RETENTION_DAYS", Default: "30",
		Meaning: "Days a finished job's folder (input, result, intermediate files) is kept after it ended; then the folder is removed, the result routes answer 410 and the jobs list says `expired`. 30 days outlasts the reference's clients, which fetch a result minutes after it is ready, and an owner's month-end look back, while bounding the media root (about 60 MB per 100,000-unit job).",
		Allowed: "want a whole number of days, 1 or more",
		set: func(c *Config, v string) error {
			var n int
			if err := setPositiveInt(&n, v); err != nil {
				return err
			}
			c.JobRetention = time.Duration(n) * 24 * time.Hour
			return nil
		}},
	{Name: "KINFLOW_CACHE_BUDGET_GB", Default: "0",
		Meaning: "Size budget of the embedding cache (`sequence_info/`), in GB (10^9 bytes); 0: no budget. Above it the API process evicts the least recently used artefacts every 10 minutes (those planned within the last hour, and every file a running job's plan counts on or a stage has claimed, never), as `kinflow cache gc` does by hand. Off by default: an artefact costs GPU time to make again, and only the operator knows how much disk the cache may have.",
		Allowed: "want a whole number of GB, 0 or more",
		set: func(c *Config, v string) error {
			var n int
			if err := setIntRange(&n, v, 0, 1<<30); err != nil {
				return err
			}
			c.CacheBudgetBytes = int64(n) * 1_000_000_000
			return nil
		}},
	{Name: "KINFLOW_CACHE_RECORD_KEY_FILE", Default: "",
		Meaning: "File holding the secret (at least 16 bytes) that authenticates the embedding cache's integrity records (an HMAC-SHA256 in each manifest entry): a record rewritten by someone who can write the media root but not read this file is reported forged, one without its code is not believed, and neither file is used. Give the same file to every writer (api, worker, gpu-worker), outside the media root. Empty: records are not authenticated. `kinflow dev` makes one in its data folder on first start.",
		Allowed: "want a path to a readable file, outside KINFLOW_MEDIA_ROOT",
		set:     func(c *Config, v string) error { c.CacheRecordKeyFile = v; return nil }},
	{Name: "KINFLOW_STEP_EXECUTOR", Default: "synthetic",
		Meaning: "How embedding steps run: `synthetic` (deterministic stand-in artefacts, flagged synthetic) or `command` (the step programs of the GPU host's environment file).",
		Allowed: "want synthetic or command",
		set:     func(c *Config, v string) error { return setEnum(&c.StepExecutor, v, "synthetic", "command") }},
	{Name: "KINFLOW_PREDICTION_ENGINE", Default: "synthetic",
		Meaning: "How predictions run: `synthetic` (stand-in numbers, flagged synthetic in every result) or `command` (each method's own program from the catalogue).",
		Allowed: "want synthetic or command",
		set:     func(c *Config, v string) error { return setEnum(&c.PredictionEngine, v, "synthetic", "command") }},
	{Name: "KINFLOW_GPU_SLOTS", Default: "1",
		Meaning: "Steps one GPU host runs at once (the GPU task queue's activity slots). Never the SDK default of 1000.",
		Allowed: "want a whole number from 1 to 64",
		set: func(c *Config, v string) error {
			if err := setPositiveInt(&c.GPUSlots, v); err != nil || c.GPUSlots > 64 {
				return errInvalid
			}
			return nil
		}},
	{Name: "KINFLOW_GPU_SMALL_SLOTS", Default: "8",
		Meaning: "Small steps (of at most `KINFLOW_GPU_SMALL_STEP_SEQS` sequences) one GPU host holds at once, on the small lane: their own task queue `<KINFLOW_GPU_TASK_QUEUE>-small`. They take their turn on the device between batches of the large steps (at most `KINFLOW_GPU_SLOTS` batches run on it at once, first come first served), so a 3-row job never waits behind a 10,000-row one, and their Temporal round trips overlap with another step's batch. The lane keeps one poll open per slot (at most 32), so a free slot never waits for a poll to reach the queue partition that holds the next step.",
		Allowed: "want a whole number from 1 to 256",
		set:     func(c *Config, v string) error { return setIntRange(&c.GPUSmallSlots, v, 1, 256) }},
	{Name: "KINFLOW_GPU_SMALL_STEP_SEQS", Default: "32",
		Meaning: "Most sequences of an embedding step that goes to the GPU hosts' small lane (`KINFLOW_GPU_SMALL_SLOTS`); 0 sends every step to the main GPU queue. Set on the CPU workers (they start the GPU jobs) and on the GPU hosts (for jobs submitted to their HTTP API).",
		Allowed: "want a whole number from 0 to 10000",
		set:     func(c *Config, v string) error { return setIntRange(&c.GPUSmallStepSeqs, v, 0, 10000) }},
	{Name: "KINFLOW_CPU_ACTIVITY_SLOTS", Default: "4",
		Meaning: "CPU-bound activities (predictions, local embedding steps, the similarity search, experimental values) one `kinflow worker` runs at once: its CPU task queue's activity slots. None of them waits for another job's work, so a full pool only queues work. Raise it on a bigger host, or add worker processes (docs/workflows.md).",
		Allowed: "want a whole number from 1 to 1000",
		set:     func(c *Config, v string) error { return setIntRange(&c.CPUActivitySlots, v, 1, 1000) }},
	{Name: "KINFLOW_CPU_LOCAL_ACTIVITY_SLOTS", Default: "64",
		Meaning: "Short bookkeeping steps (parse, plan, record an event, finalize: local activities inside workflow tasks) one `kinflow worker` runs at once. They never wait for other work.",
		Allowed: "want a whole number from 1 to 10000",
		set:     func(c *Config, v string) error { return setIntRange(&c.CPULocalActivitySlots, v, 1, 10000) }},
	{Name: "KINFLOW_CPU_WORKFLOW_SLOTS", Default: "500",
		Meaning: "Workflow tasks one `kinflow worker` runs at once (its CPU task queue's workflow task slots).",
		Allowed: "want a whole number from 2 to 10000",
		set:     func(c *Config, v string) error { return setIntRange(&c.CPUWorkflowSlots, v, 2, 10000) }},
	{Name: "KINFLOW_SMALL_JOB_ROWS", Default: "50",
		Meaning: "Most rows of a job whose prediction and annotation steps (Predict, the similarity search, experimental values) run as local activities, inside the workflow's own task: no Temporal round trip each, for the many small jobs of a public service. They still take turns for the CPU with the regular activities (at most `KINFLOW_CPU_ACTIVITY_SLOTS` such local steps at once). 0: every job uses regular activities.",
		Allowed: "want a whole number from 0 to 10000",
		set:     func(c *Config, v string) error { return setIntRange(&c.SmallJobRows, v, 0, 10000) }},
	{Name: "KINFLOW_FAIRNESS", Default: "true",
		Meaning: "Start each job with its class (interactive, normal, bulk) as Temporal priority and its API key as fairness key, with the key's weight: every queue its work waits on is then shared between keys, so one key's backlog never holds another key's job (docs/workflows.md, \"Sharing the queues\"; the Temporal server needs `matching.enableFairness`, which `kinflow dev` and the images turn on). false: every job alike, first come first served.",
		Allowed: "want true or false",
		set:     func(c *Config, v string) error { return setBool(&c.Fairness, v) }},
	{Name: "KINFLOW_BULK_JOB_ROWS", Default: "5000",
		Meaning: "Jobs of more rows than this are bulk: on every task queue they are served after interactive jobs (at most `KINFLOW_SMALL_JOB_ROWS` rows) and normal ones, which are served in that order; within a class, keys share the queues by their weights (`kinflow key weight`). A job of any size can ask to be bulk (`priority: \"bulk\"`), none to be served ahead. 0: only jobs that ask are bulk.",
		Allowed: "want a whole number from 0 to 10000000",
		set:     func(c *Config, v string) error { return setIntRange(&c.BulkJobRows, v, 0, 10000000) }},
	{Name: "KINFLOW_TRACK_SLOTS", Default: "1000",
		Meaning: "Progress trackers one `kinflow worker` runs at once, on their own task queue (`<KINFLOW_CPU_TASK_QUEUE>-track`). A tracker only waits (for files to appear) and costs a goroutine and a watch; no job waits for its tracker, so a full pool delays live progress and never a job.",
		Allowed: "want a whole number from 1 to 100000",
		set:     func(c *Config, v string) error { return setIntRange(&c.TrackSlots, v, 1, 100000) }},
	{Name: "KINFLOW_NOTICE_SLOTS", Default: "64",
		Meaning: "Job notices (`notifyUrl` webhooks) one `kinflow worker` sends at once, on their own task queue (`<KINFLOW_CPU_TASK_QUEUE>-notice`). A notice only waits for its receiver (at most 10 s an attempt) and costs a connection; on its own pool a receiver that never answers holds notice slots, never the CPU activity slots that jobs' predictions need, and no job waits for its notice (it is sent after the job ended).",
		Allowed: "want a whole number from 1 to 10000",
		set:     func(c *Config, v string) error { return setIntRange(&c.NoticeSlots, v, 1, 10000) }},
	{Name: "KINFLOW_NOTICE_PER_KEY", Default: "4",
		Meaning: "Most notices of one API key one `kinflow worker` sends at once (a count per worker process, not across workers). Another notice of that key takes no slot to wait: it is put off a few seconds and tried again, without using up one of its 8 delivery attempts. So one key's receiver that never answers holds at most this many notice slots of each worker, and the other keys' notices go out beside it.",
		Allowed: "want a whole number from 1 to 10000",
		set:     func(c *Config, v string) error { return setIntRange(&c.NoticePerKey, v, 1, 10000) }},
	{Name: "KINFLOW_TRACK_MIN_FILES", Default: "16",
		Meaning: "Fewest missing embedding files for which a stage runs a live progress tracker. A smaller stage's count is recorded by its post-check alone, saving a tracker's Temporal round trips on the many small jobs of a public service.",
		Allowed: "want a whole number, 1 or more",
		set:     func(c *Config, v string) error { return setPositiveInt(&c.TrackMinFiles, v) }},
	{Name: "KINFLOW_MAX_UNITS_PER_ROW", Default: "1000",
		Meaning: "Most prediction units one row may carry: its substrates × candidate sequences × targets, counting what each method's program receives (method E's kcat reads a row's whole substrate list per candidate, method D every substrate and product: each token counts). The reference's own files have a few of each per row; a row over the cap is refused (400 on submit, an error in `/validate/`), since quota counts rows.",
		Allowed: "want a whole number from 1 to 1000000",
		set:     func(c *Config, v string) error { return setIntRange(&c.MaxUnitsPerRow, v, 1, 1000000) }},
	{Name: "KINFLOW_MAX_UNITS_PER_JOB", Default: "100000",
		Meaning: "Most prediction units one job may carry, over all its rows and targets (10,000 rows × 3 targets with a few substrates each fit).",
		Allowed: "want a whole number from 1 to 10000000",
		set:     func(c *Config, v string) error { return setIntRange(&c.MaxUnitsPerJob, v, 1, 10000000) }},
	{Name: "KINFLOW_MAX_CELL_BYTES", Default: "262144",
		Meaning: "Most bytes one cell of an input table may hold (256 KiB: seven 35,000-residue sequences, or a thousand 250-character SMILES). A cell over it is refused (400 on submit, an error in `/validate/`): quota counts rows, and every byte of a cell is stored and read again by each stage.",
		Allowed: "want a whole number of bytes from 1,024 to 134217728",
		set:     func(c *Config, v string) error { return setIntRange(&c.MaxCellBytes, v, 1024, 134217728) }},
	{Name: "KINFLOW_MAX_ROW_LIST_BYTES", Default: "524288",
		Meaning: "Most bytes the list cells of one row (Protein Sequence, Substrates, Products) may hold together (512 KiB: a row at the unit cap with long SMILES). Bounds the job folder one quota unit can fill, with KINFLOW_MAX_UNITS_PER_ROW.",
		Allowed: "want a whole number of bytes from 1,024 to 134217728",
		set:     func(c *Config, v string) error { return setIntRange(&c.MaxRowListBytes, v, 1024, 134217728) }},
	{Name: "KINFLOW_VALIDATE_PER_KEY", Default: "2",
		Meaning: "Most `/validate/` calls one API key runs at once; another is answered 429 with Retry-After. `/validate/` is free of quota, so without its own bound one key could keep every core busy checking chemistry (a 663 KB row cost 18 s of CPU).",
		Allowed: "want a whole number from 1 to 1000",
		set:     func(c *Config, v string) error { return setIntRange(&c.ValidatePerKey, v, 1, 1000) }},
	{Name: "KINFLOW_VALIDATE_TIMEOUT_SECONDS", Default: "30",
		Meaning: "Seconds one `/validate/` call may spend checking its table; past them it stops and answers 503 asking for a smaller file. A 10,000-row file within the caps is checked in a few seconds.",
		Allowed: "want a whole number of seconds, 1 or more",
		set:     func(c *Config, v string) error { return setSeconds(&c.ValidateTimeout, v) }},
	{Name: "KINFLOW_BODY_BUDGET_BYTES", Default: "268435456",
		Meaning: "Most bytes of request bodies the api reads at once, over all requests (256 MiB: two bodies at KINFLOW_MAX_UPLOAD_BYTES). A body declared or read beyond what is left waits for nothing: it is answered 503 with Retry-After, nothing charged. Each body is bounded on its own, but not how many are read together: twelve 120 MB bodies took an api past 4 GB. 0: no budget.",
		Allowed: "want a whole number of bytes, 0 or more",
		set: func(c *Config, v string) error {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			if err != nil || n < 0 {
				return errInvalid
			}
			c.BodyBudgetBytes = n
			return nil
		}},
	{Name: "KINFLOW_STEP_SHARD_SEQS", Default: "500",
		Meaning: "Most sequences in one shard of an embedding step. A larger step is cut into shards, each its own activity, so that several GPU hosts (or CPU workers, locally) share one large job. 500 sequences of 400 residues are about 50 batches: long enough that a shard's overhead (tens of ms) is noise, short enough that two hosts share a 1,000-sequence job.",
		Allowed: "want a whole number from 1 to 1000000",
		set: func(c *Config, v string) error {
			if err := setPositiveInt(&c.StepShardSeqs, v); err != nil || c.StepShardSeqs > 1000000 {
				return errInvalid
			}
			return nil
		}},
	{Name: "KINFLOW_GPU_ENV_FILE", Default: "",
		Meaning: "The GPU host's environment file: `GPU_EMBED_STEP_CMD_<STEP_KEY>` overrides, model locations, token budget.",
		Allowed: "want a file path",
		set:     func(c *Config, v string) error { c.GPUEnvFile = strings.TrimSpace(v); return nil }},
	{Name: "KINFLOW_HEARTBEAT_TIMEOUT_SECONDS", Default: "60",
		Meaning: "Heartbeat timeout of long activities (embedding steps, predictions, the tracker): a worker that dies mid-step is noticed this fast and its work retried elsewhere, resuming from the files already written.",
		Allowed: "want a whole number of seconds, 3 or more",
		set: func(c *Config, v string) error {
			if err := setSeconds(&c.HeartbeatTimeout, v); err != nil || c.HeartbeatTimeout < 3*time.Second {
				return errInvalid
			}
			return nil
		}},
	{Name: "KINFLOW_PROGRESS_NOTIFY", Default: "1",
		Meaning: "0/false/no/off: the CPU worker's progress tracker does not use file-system notifications (inotify) and finds new embedding files by listing their folders every 3 s, as on NFS where files written by another host raise no notification. The tracker sweeps every 10 s either way, and falls back to 3 s when a sweep finds files notifications missed.",
		Allowed: "want 1, true, yes, on, 0, false, no or off",
		set: func(c *Config, v string) error {
			var on bool
			if err := setBool(&on, v); err != nil {
				return err
			}
			c.ProgressNoNotify = !on
			return nil
		}},
}

// Load reads every key through lookup (os.LookupEnv in production), applying
// defaults, and returns the first invalid value as a *KeyError.
func Load(lookup func(string) (string, bool)) (*Config, error) {
	c := &Config{}
	for _, k := range Keys {
		v, ok := lookup(k.Name)
		if !ok {
			v = k.Default
		}
		if err := k.set(c, v); err != nil {
			return nil, &KeyError{Key: k.Name, Value: v, Allowed: k.Allowed}
		}
	}
	if c.MethodJCacheDir == "" {
		c.MethodJCacheDir = strings.TrimRight(c.MediaRoot, "/") + "/sequence_info/methodj_contacts"
	}
	return c, nil
}

// FromEnv loads the configuration from the process environment.
func FromEnv() (*Config, error) { return Load(os.LookupEnv) }

// Markdown renders the key tables for the README: every role's keys
// (Keys), then the GPU host's own (HostKeys), by the same code.
func Markdown() string {
	var b strings.Builder
	b.WriteString(tableHeader)
	for _, k := range Keys {
		writeRow(&b, k.Name, formatDefault(k.Default), k.Meaning)
	}
	hostMarkdown(&b)
	return b.String()
}

const tableHeader = "| key | default | meaning |\n|---|---|---|\n"

// formatDefault is a default as the tables show it.
func formatDefault(d string) string {
	if d == "" {
		return "(empty)"
	}
	return "`" + d + "`"
}

// writeRow writes one row of a key table; def is already formatted.
func writeRow(b *strings.Builder, name, def, meaning string) {
	fmt.Fprintf(b, "| `%s` | %s | %s |\n", name, def, meaning)
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

func setName(dst *string, v string) error {
	v = strings.TrimSpace(v)
	if v == "" {
		return errInvalid
	}
	*dst = v
	return nil
}

func setHostPort(dst *string, v string) error {
	v = strings.TrimSpace(v)
	i := strings.LastIndex(v, ":")
	if i < 0 {
		return errInvalid
	}
	p, err := strconv.Atoi(v[i+1:])
	if err != nil || p < 0 || p > 65535 {
		return errInvalid
	}
	*dst = v
	return nil
}

func setSeconds(dst *time.Duration, v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return errInvalid
	}
	*dst = time.Duration(n) * time.Second
	return nil
}

func setIntRange(dst *int, v string, lo, hi int) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < lo || n > hi {
		return errInvalid
	}
	*dst = n
	return nil
}

func setPositiveInt(dst *int, v string) error {
	n, err := strconv.Atoi(strings.TrimSpace(v))
	if err != nil || n < 1 {
		return errInvalid
	}
	*dst = n
	return nil
}

// ParseBool is the service's boolean rule for configuration values:
// 1/true/yes/on and 0/false/no/off/empty, case-insensitive.
func ParseBool(v string) (bool, error) {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "1", "true", "yes", "on":
		return true, nil
	case "0", "false", "no", "off", "":
		return false, nil
	}
	return false, errInvalid
}

func setBool(dst *bool, v string) error {
	b, err := ParseBool(v)
	if err != nil {
		return err
	}
	*dst = b
	return nil
}

func setEnum(dst *string, v string, allowed ...string) error {
	v = strings.ToLower(strings.TrimSpace(v))
	for _, a := range allowed {
		if v == a {
			*dst = v
			return nil
		}
	}
	return errInvalid
}

// secretKeys are the keys whose values no child program gets: the database
// URL may hold a password, and the GPU token guards the GPU service.
var secretKeys = []string{"KINFLOW_DATABASE_URL", "GPU_EMBED_SERVICE_TOKEN", "PGPASSWORD"}

// ChildEnv returns environ (KEY=value entries) without the secrets of
// kinflow's own configuration, for the method and step programs kinflow
// runs: they need PATH, CUDA and their own variables, never the database
// password or the service token.
func ChildEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		k, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(secretKeys, k) {
			out = append(out, kv)
		}
	}
	return out
}
