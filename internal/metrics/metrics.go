// Package metrics holds kinflow's Prometheus metrics (official Go client).
// Each process builds one Metrics with its own registry and hands it to its
// parts through their dependencies; nothing registers on the client's global
// default registry. Every method is safe on a nil *Metrics, so a part built
// without metrics (tests, tools) records nothing.
package metrics

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	enumspb "go.temporal.io/api/enums/v1"
	taskqueuepb "go.temporal.io/api/taskqueue/v1"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/interceptor"
)

// Namespace prefixes every kinflow metric.
const Namespace = "kinflow"

// Metrics are one process's metrics.
type Metrics struct {
	// Registry holds every metric of the process.
	Registry *prometheus.Registry

	stepDuration   *prometheus.HistogramVec
	cacheFiles     *prometheus.CounterVec
	gpuEvents      *prometheus.CounterVec
	gpuFallbacks   prometheus.Counter
	quotaRejected  prometheus.Counter
	httpDuration   *prometheus.HistogramVec
	trackerFound   *prometheus.CounterVec
	trackerLatency prometheus.Histogram
	slots          *prometheus.GaugeVec
	slotsUsed      *prometheus.GaugeVec
	backlogMu      sync.Mutex
	backlog        *backlogCollector
}

// New builds the metrics of one process, with the Go runtime and process
// collectors, on a registry of its own.
func New() *Metrics {
	reg := prometheus.NewRegistry()
	m := &Metrics{
		Registry: reg,
		stepDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "step_duration_seconds",
			Help: "Duration of one activity execution, by activity type (the step: PrepareInput, BuildPlan, Predict, a GPU step key…) and outcome.",
			// Steps run from milliseconds (bookkeeping) to hours (embedding
			// 10,000 sequences on a CPU).
			Buckets: []float64{.01, .05, .25, 1, 5, 15, 60, 300, 900, 3600, 4 * 3600, 12 * 3600},
		}, []string{"step", "outcome"}),
		cacheFiles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "cache_files_total",
			Help: "Expected cache artefacts found (hit) or missing (miss) when a stage is planned, by family.",
		}, []string{"family", "result"}),
		gpuEvents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "gpu_precompute_events_total",
			Help: "gpuPrecompute events recorded, by reason (the text before any ':').",
		}, []string{"reason"}),
		gpuFallbacks: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "gpu_fallbacks_total",
			Help: "Stages whose missing embeddings were handed from the GPU road to local computation (fail-open).",
		}),
		quotaRejected: prometheus.NewCounter(prometheus.CounterOpts{
			Namespace: Namespace, Name: "quota_rejections_total",
			Help: "Submissions refused because the key's daily quota was exhausted.",
		}),
		httpDuration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "http_request_duration_seconds",
			Help:    "HTTP request latency by server, method, route pattern and status code.",
			Buckets: prometheus.DefBuckets,
		}, []string{"server", "method", "route", "code"}),
		trackerFound: prometheus.NewCounterVec(prometheus.CounterOpts{
			Namespace: Namespace, Name: "progress_files_found_total",
			Help: "Expected embedding files the progress tracker counted, by how it found them (notify, reconcile, overflow).",
		}, []string{"source"}),
		trackerLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Namespace: Namespace, Name: "progress_store_duration_seconds",
			Help:    "Duration of one stored progress count (a database write).",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25, 1},
		}),
		slots: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "worker_slots",
			Help: "Slots of this process's Temporal workers, by task queue and kind (activity, local_activity, workflow): the most tasks of that kind run at once.",
		}, []string{"task_queue", "kind"}),
		slotsUsed: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Namespace: Namespace, Name: "worker_slots_used",
			Help: "Activities running now in this process, by task queue and kind (activity, local_activity). Used equal to kinflow_worker_slots means the pool is exhausted: work waits in the queue (see kinflow_task_queue_backlog_age_seconds).",
		}, []string{"task_queue", "kind"}),
	}
	reg.MustRegister(
		collectors.NewGoCollector(),
		collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		m.stepDuration, m.cacheFiles, m.gpuEvents, m.gpuFallbacks, m.quotaRejected,
		m.httpDuration, m.trackerFound, m.trackerLatency, m.slots, m.slotsUsed,
	)
	return m
}

// Handler serves the registry in the Prometheus text format.
func (m *Metrics) Handler() http.Handler {
	if m == nil {
		return http.NotFoundHandler()
	}
	return promhttp.HandlerFor(m.Registry, promhttp.HandlerOpts{Registry: m.Registry})
}

// StepDone records one activity execution.
func (m *Metrics) StepDone(step string, d time.Duration, err error) {
	if m == nil {
		return
	}
	outcome := "ok"
	switch {
	case errors.Is(err, context.Canceled):
		outcome = "cancelled"
	case err != nil:
		outcome = "error"
	}
	m.stepDuration.WithLabelValues(step, outcome).Observe(d.Seconds())
}

// CacheLookup records a stage plan's hits and misses in one family.
func (m *Metrics) CacheLookup(family string, hits, misses int) {
	if m == nil {
		return
	}
	if hits > 0 {
		m.cacheFiles.WithLabelValues(family, "hit").Add(float64(hits))
	}
	if misses > 0 {
		m.cacheFiles.WithLabelValues(family, "miss").Add(float64(misses))
	}
}

// GPUEvent records one gpuPrecompute event; "fallback_local" also counts as
// a GPU fallback.
func (m *Metrics) GPUEvent(reason string) {
	if m == nil {
		return
	}
	// Reasons carry details after ':' (exception texts, file counts); the
	// label keeps the vocabulary word only, so its values stay few.
	key := reason
	if i := strings.IndexByte(key, ':'); i >= 0 {
		key = key[:i]
	}
	m.gpuEvents.WithLabelValues(key).Inc()
	if reason == "fallback_local" {
		m.gpuFallbacks.Inc()
	}
}

// QuotaRejected records one submission refused for quota.
func (m *Metrics) QuotaRejected() {
	if m == nil {
		return
	}
	m.quotaRejected.Inc()
}

// HTTPRequest records one HTTP request. route is the route pattern, never
// the raw path (job ids would make every path a new series).
func (m *Metrics) HTTPRequest(server, method, route string, code int, d time.Duration) {
	if m == nil {
		return
	}
	if route == "" {
		route = "unmatched"
	}
	m.httpDuration.WithLabelValues(server, method, route, strconv.Itoa(code)).Observe(d.Seconds())
}

// TrackerFound records files the progress tracker counted; its signature
// matches progress.Options.OnFound once the source is converted.
func (m *Metrics) TrackerFound(source string, n int) {
	if m == nil {
		return
	}
	m.trackerFound.WithLabelValues(source).Add(float64(n))
}

// ProgressStored records the duration of one stored progress count.
func (m *Metrics) ProgressStored(d time.Duration) {
	if m == nil {
		return
	}
	m.trackerLatency.Observe(d.Seconds())
}

// SetSlots records the slot count of one pool of a worker (kind: activity,
// local_activity, workflow), and starts its used gauge at zero.
func (m *Metrics) SetSlots(taskQueue, kind string, n int) {
	if m == nil {
		return
	}
	m.slots.WithLabelValues(taskQueue, kind).Set(float64(n))
	if kind != "workflow" {
		m.slotsUsed.WithLabelValues(taskQueue, kind).Add(0)
	}
}

// Backlog is one task queue's backlog as the Temporal server reports it.
type Backlog struct {
	TaskQueue string
	// Kind is workflow or activity.
	Kind  string
	Count int64
	Age   time.Duration
}

// BacklogReader reads the backlogs of the process's task queues.
type BacklogReader func(ctx context.Context) ([]Backlog, error)

type backlogCollector struct {
	mu         sync.Mutex
	readers    []BacklogReader
	age, count *prometheus.Desc
	log        *slog.Logger
}

func (c *backlogCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.age; ch <- c.count }

func (c *backlogCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), jobsScrapeTimeout)
	defer cancel()
	c.mu.Lock()
	readers := slices.Clone(c.readers)
	c.mu.Unlock()
	for _, read := range readers {
		bs, err := read(ctx)
		if err != nil {
			c.log.Warn("metrics: read task queue backlogs", "error", err)
			ch <- prometheus.NewInvalidMetric(c.age, err)
			continue
		}
		for _, b := range bs {
			ch <- prometheus.MustNewConstMetric(c.age, prometheus.GaugeValue, b.Age.Seconds(), b.TaskQueue, b.Kind)
			ch <- prometheus.MustNewConstMetric(c.count, prometheus.GaugeValue, float64(b.Count), b.TaskQueue, b.Kind)
		}
	}
}

// RegisterBacklog exports kinflow_task_queue_backlog_age_seconds and
// kinflow_task_queue_backlog_tasks{task_queue,kind} for the queues read
// reports, read from the Temporal server at each scrape: the age of the
// oldest task no worker has taken is the signal to alert on (slots
// exhausted, or too few workers). Each role of a process adds its own
// queues (the CPU worker and the GPU host of `kinflow dev` share one
// registry).
func (m *Metrics) RegisterBacklog(read BacklogReader, log *slog.Logger) error {
	if m == nil {
		return nil
	}
	m.backlogMu.Lock()
	defer m.backlogMu.Unlock()
	if m.backlog == nil {
		if log == nil {
			log = slog.Default()
		}
		labels := []string{"task_queue", "kind"}
		c := &backlogCollector{log: log,
			age: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "task_queue_backlog_age_seconds"),
				"Age of the oldest task waiting in the task queue for a worker slot (0: none waits), from the Temporal server at scrape time.", labels, nil),
			count: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "", "task_queue_backlog_tasks"),
				"Approximate number of tasks waiting in the task queue, from the Temporal server at scrape time.", labels, nil),
		}
		if err := m.Registry.Register(c); err != nil {
			return fmt.Errorf("register backlog collector: %w", err)
		}
		m.backlog = c
	}
	m.backlog.mu.Lock()
	m.backlog.readers = append(m.backlog.readers, read)
	m.backlog.mu.Unlock()
	return nil
}

// Queue is one task queue and type whose backlog TemporalBacklog reads.
type Queue struct {
	Name string
	Type enumspb.TaskQueueType
}

// TemporalBacklog reads the backlog of each queue from the Temporal server
// (DescribeTaskQueue with its statistics).
func TemporalBacklog(svc workflowservice.WorkflowServiceClient, namespace string, qs ...Queue) BacklogReader {
	return func(ctx context.Context) ([]Backlog, error) {
		out := make([]Backlog, 0, len(qs))
		for _, q := range qs {
			resp, err := svc.DescribeTaskQueue(ctx, &workflowservice.DescribeTaskQueueRequest{
				Namespace:     namespace,
				TaskQueue:     &taskqueuepb.TaskQueue{Name: q.Name, Kind: enumspb.TASK_QUEUE_KIND_NORMAL},
				TaskQueueType: q.Type,
				ReportStats:   true,
			})
			if err != nil {
				return nil, fmt.Errorf("describe task queue %s: %w", q.Name, err)
			}
			kind := "activity"
			if q.Type == enumspb.TASK_QUEUE_TYPE_WORKFLOW {
				kind = "workflow"
			}
			b := Backlog{TaskQueue: q.Name, Kind: kind}
			if st := resp.GetStats(); st != nil {
				b.Count = st.GetApproximateBacklogCount()
				b.Age = st.GetApproximateBacklogAge().AsDuration()
			}
			out = append(out, b)
		}
		return out, nil
	}
}

// JobCounter counts jobs by status (Pending, Processing, Completed, Failed).
type JobCounter func(ctx context.Context) (map[string]int64, error)

// jobStatuses are always exported, at zero when no job has them, so a
// dashboard's series exist from the start.
var jobStatuses = []string{"Pending", "Processing", "Completed", "Failed"}

// jobsScrapeTimeout bounds the database query behind one scrape: a slow
// database must not hang the scraper (Prometheus's default timeout is 10 s).
const jobsScrapeTimeout = 5 * time.Second

type jobsCollector struct {
	count JobCounter
	desc  *prometheus.Desc
	log   *slog.Logger
}

func (c jobsCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.desc }

func (c jobsCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), jobsScrapeTimeout)
	defer cancel()
	counts, err := c.count(ctx)
	if err != nil {
		c.log.Warn("metrics: count jobs by state", "error", err)
		ch <- prometheus.NewInvalidMetric(c.desc, err)
		return
	}
	seen := map[string]bool{}
	for _, s := range jobStatuses {
		seen[s] = true
		ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(counts[s]), s)
	}
	for s, n := range counts {
		if !seen[s] {
			ch <- prometheus.MustNewConstMetric(c.desc, prometheus.GaugeValue, float64(n), s)
		}
	}
}

// RegisterJobs exports kinflow_jobs{state}, read from the database at each
// scrape, so every API replica reports the same truth.
func (m *Metrics) RegisterJobs(count JobCounter, log *slog.Logger) error {
	if m == nil {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	c := jobsCollector{count: count, log: log, desc: prometheus.NewDesc(
		prometheus.BuildFQName(Namespace, "", "jobs"), "Jobs by state, read from the database at scrape time.", []string{"state"}, nil)}
	if err := m.Registry.Register(c); err != nil {
		return fmt.Errorf("register jobs collector: %w", err)
	}
	return nil
}

// RegisterWaits exports kinflow_api_waits (event streams and held long
// polls open now, read from open at each scrape), kinflow_api_waits_max
// (their bound, KINFLOW_WAITS_MAX as fitted to the open-file limit) and
// returns the counter of waits refused for want of a place
// (kinflow_api_waits_refused_total, by bound: key or all).
func (m *Metrics) RegisterWaits(open func() int, maxAll int) (*prometheus.CounterVec, error) {
	refused := prometheus.NewCounterVec(prometheus.CounterOpts{
		Namespace: Namespace, Name: "api_waits_refused_total",
		Help: "Event streams and long polls refused with 429 because their key (bound=key, KINFLOW_WAITS_PER_KEY) or the process (bound=all, KINFLOW_WAITS_MAX) had no place left.",
	}, []string{"bound"})
	if m == nil {
		return refused, nil
	}
	for _, c := range []prometheus.Collector{
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "api_waits",
			Help: "Event streams and held long polls open now in this API process."}, func() float64 { return float64(open()) }),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: Namespace, Name: "api_waits_max",
			Help: "Most event streams and held long polls this API process holds at once."}, func() float64 { return float64(maxAll) }),
		refused,
	} {
		if err := m.Registry.Register(c); err != nil {
			return nil, fmt.Errorf("register waits metrics: %w", err)
		}
	}
	return refused, nil
}

// WorkerInterceptor times every activity the Temporal worker runs.
func (m *Metrics) WorkerInterceptor() interceptor.WorkerInterceptor {
	return &workerInterceptor{m: m}
}

type workerInterceptor struct {
	interceptor.WorkerInterceptorBase
	m *Metrics
}

func (w *workerInterceptor) InterceptActivity(ctx context.Context, next interceptor.ActivityInboundInterceptor) interceptor.ActivityInboundInterceptor {
	i := &activityInterceptor{m: w.m}
	i.Next = next
	return i
}

type activityInterceptor struct {
	interceptor.ActivityInboundInterceptorBase
	m *Metrics
}

func (a *activityInterceptor) ExecuteActivity(ctx context.Context, in *interceptor.ExecuteActivityInput) (any, error) {
	start := time.Now()
	if a.m != nil && activity.IsActivity(ctx) {
		info := activity.GetInfo(ctx)
		kind := "activity"
		if info.IsLocalActivity {
			kind = "local_activity"
		}
		g := a.m.slotsUsed.WithLabelValues(info.TaskQueue, kind)
		g.Inc()
		defer g.Dec()
	}
	res, err := a.Next.ExecuteActivity(ctx, in)
	a.m.StepDone(activityType(ctx), time.Since(start), err)
	return res, err
}

// Serve serves /metrics on addr until ctx ends: the small listener of the
// worker and gpu-worker processes.
func Serve(ctx context.Context, addr string, m *Metrics, log *slog.Logger) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("metrics listen on %s: %w", addr, err)
	}
	return ServeListener(ctx, ln, m, log)
}

// ServeListener is Serve on an open listener.
func ServeListener(ctx context.Context, ln net.Listener, m *Metrics, log *slog.Logger) error {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", m.Handler())
	srv := &http.Server{
		Handler: mux,
		// A scrape is one small GET; these bound misbehaving clients.
		ReadHeaderTimeout: 5 * time.Second,
		WriteTimeout:      30 * time.Second,
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	if log != nil {
		log.Info("metrics listening", "addr", ln.Addr().String())
	}
	select {
	case err := <-errc:
		return fmt.Errorf("metrics server: %w", err)
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}

// activityType is the running activity's type name (a step key for the
// embedding steps, so durations read per step).
func activityType(ctx context.Context) string {
	if !activity.IsActivity(ctx) {
		return "unknown"
	}
	return activity.GetInfo(ctx).ActivityType.Name
}

// KeyWork is one key's unfinished work in one state (waiting: Pending;
// running: Processing).
type KeyWork struct {
	// Key is the key's fairness key ("key-17"), never the key itself.
	Key   string
	State string
	Jobs  int64
	Rows  int64
}

// KeyWorkReader reads every key's unfinished work.
type KeyWorkReader func(ctx context.Context) ([]KeyWork, error)

// keyWorkShown is how many keys kinflow_key_unfinished_* name, the largest
// by rows; the rest are summed under key="other", so the series stay
// bounded whatever the number of keys.
const keyWorkShown = 10

type keyWorkCollector struct {
	read       KeyWorkReader
	jobs, rows *prometheus.Desc
	log        *slog.Logger
}

func (c keyWorkCollector) Describe(ch chan<- *prometheus.Desc) { ch <- c.jobs; ch <- c.rows }

func (c keyWorkCollector) Collect(ch chan<- prometheus.Metric) {
	ctx, cancel := context.WithTimeout(context.Background(), jobsScrapeTimeout)
	defer cancel()
	work, err := c.read(ctx)
	if err != nil {
		c.log.Warn("metrics: read unfinished work by key", "error", err)
		ch <- prometheus.NewInvalidMetric(c.jobs, err)
		return
	}
	for _, w := range FoldKeyWork(work, keyWorkShown) {
		ch <- prometheus.MustNewConstMetric(c.jobs, prometheus.GaugeValue, float64(w.Jobs), w.Key, w.State)
		ch <- prometheus.MustNewConstMetric(c.rows, prometheus.GaugeValue, float64(w.Rows), w.Key, w.State)
	}
}

// FoldKeyWork keeps the shown keys with the most rows (all states
// together) and sums the others' work by state under the key "other".
func FoldKeyWork(work []KeyWork, shown int) []KeyWork {
	total := map[string]int64{}
	for _, w := range work {
		total[w.Key] += w.Rows
	}
	keys := make([]string, 0, len(total))
	for k := range total {
		keys = append(keys, k)
	}
	sort.Slice(keys, func(i, j int) bool {
		if total[keys[i]] != total[keys[j]] {
			return total[keys[i]] > total[keys[j]]
		}
		return keys[i] < keys[j]
	})
	keep := map[string]bool{}
	for _, k := range keys[:min(shown, len(keys))] {
		keep[k] = true
	}
	type ks struct{ key, state string }
	sums := map[ks]*KeyWork{}
	var out []KeyWork
	var order []ks
	for _, w := range work {
		k := w.Key
		if !keep[k] {
			k = "other"
		}
		id := ks{k, w.State}
		s, ok := sums[id]
		if !ok {
			s = &KeyWork{Key: k, State: w.State}
			sums[id] = s
			order = append(order, id)
		}
		s.Jobs += w.Jobs
		s.Rows += w.Rows
	}
	for _, id := range order {
		out = append(out, *sums[id])
	}
	return out
}

// RegisterKeyWork exports kinflow_key_unfinished_jobs and _rows{key,state}
// (state waiting or running), read from the database at each scrape: the
// keyWorkShown keys with the most rows by name, the rest as "other".
func (m *Metrics) RegisterKeyWork(read KeyWorkReader, log *slog.Logger) error {
	if m == nil {
		return nil
	}
	if log == nil {
		log = slog.Default()
	}
	c := keyWorkCollector{read: read, log: log,
		jobs: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "key", "unfinished_jobs"),
			"Unfinished jobs by API key (its fairness key; the largest keys by rows, the rest as other) and state (waiting, running), read from the database at scrape time.", []string{"key", "state"}, nil),
		rows: prometheus.NewDesc(prometheus.BuildFQName(Namespace, "key", "unfinished_rows"),
			"Rows of unfinished jobs by API key (as kinflow_key_unfinished_jobs) and state.", []string{"key", "state"}, nil)}
	if err := m.Registry.Register(c); err != nil {
		return fmt.Errorf("register key work collector: %w", err)
	}
	return nil
}
