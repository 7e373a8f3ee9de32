package gpuworker

import (
	"bytes"
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	"go.temporal.io/api/serviceerror"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/converter"

	"github.com/google/uuid"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// temporalCallTimeout bounds each Temporal call an HTTP handler makes: the
// backend's GPU client gives a whole request 5 s (internal/gpuhealth, and
// the reference's backend alike).
const temporalCallTimeout = 4 * time.Second

// Server is the GPU service HTTP API (docs/gpu-host.md, "HTTP API").
type Server struct {
	client        client.Client
	logs          *embedjob.JobLogs
	known         *embedjob.Registry
	layout        embedjob.Layout
	mediaRoot     string
	workflowQueue string
	gpuQueue      string
	shardSeqs     int
	smallStepSeqs int
	cacheFolders  string
	servers       func() []stepserver.ServerStatus
	token         string
	maxBody       int64
	health        *HealthProbe
	log           *slog.Logger
	// base outlives requests: the goroutines that write JOB_DONE/JOB_FAILED.
	base    context.Context
	observe func(method, route string, code int, took time.Duration)
	inputs  sync.Map // job id → *embedjob.Input (a workflow's input never changes)
	mux     *http.ServeMux
}

// ServerOptions configure a Server.
type ServerOptions struct {
	Client client.Client
	Logs   *embedjob.JobLogs
	Known  *embedjob.Registry
	Layout embedjob.Layout
	// MediaRoot holds gpu_jobs/<job_id>/work.json.
	MediaRoot string
	// WorkflowTaskQueue runs the EmbedJob workflow (the CPU task queue,
	// where the backend's workers run workflows).
	WorkflowTaskQueue string
	// GPUTaskQueue runs the step activities.
	GPUTaskQueue string
	// Token is GPU_EMBED_SERVICE_TOKEN; empty means no auth.
	Token string
	// MaxBodyBytes caps a submit body.
	MaxBodyBytes int64
	// Servers reports the resident step servers for /health (nil: none).
	Servers func() []stepserver.ServerStatus
	// ShardSeqs is the shard size of the jobs submitted here
	// (KINFLOW_STEP_SHARD_SEQS).
	ShardSeqs int
	// SmallStepSeqs is KINFLOW_GPU_SMALL_STEP_SEQS of the jobs submitted
	// here (0: no small lane).
	SmallStepSeqs int
	// CacheFolders is this host's KINFLOW_CACHE_FOLDERS: /health says it
	// (a backend of another naming refuses the host) and jobs submitted
	// here run under it.
	CacheFolders string
	Health       *HealthProbe
	Log          *slog.Logger
	// Base is the server's lifetime context.
	Base context.Context
	// Observe, when set, is told every request's method, route pattern,
	// status code and duration (metrics).
	Observe func(method, route string, code int, took time.Duration)
}

// NewServer builds the API.
func NewServer(o ServerOptions) *Server {
	s := &Server{
		client: o.Client, logs: o.Logs, known: o.Known, layout: o.Layout, mediaRoot: o.MediaRoot,
		workflowQueue: o.WorkflowTaskQueue, gpuQueue: o.GPUTaskQueue, shardSeqs: o.ShardSeqs, smallStepSeqs: o.SmallStepSeqs, cacheFolders: string(embedding.Folders(o.CacheFolders).OrDefault()), servers: o.Servers, token: strings.TrimSpace(o.Token),
		maxBody: o.MaxBodyBytes, health: o.Health, log: o.Log, base: o.Base, observe: o.Observe,
	}
	if s.maxBody <= 0 {
		s.maxBody = 128 << 20
	}
	if s.base == nil {
		s.base = context.Background()
	}
	if s.known == nil {
		s.known = embedjob.NewRegistry()
	}
	m := http.NewServeMux()
	m.HandleFunc("/health", s.method(http.MethodGet, s.handleHealth))
	m.HandleFunc("/embed/jobs", s.method(http.MethodPost, s.auth(s.handleSubmit)))
	m.HandleFunc("/embed/jobs/{job_id}", s.method(http.MethodGet, s.auth(s.handleJob)))
	m.HandleFunc("/embed/jobs/{job_id}/logs", s.method(http.MethodGet, s.auth(s.handleLogs)))
	m.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) { writeDetail(w, http.StatusNotFound, "Not Found") })
	s.mux = m
	return s
}

// ServeHTTP implements http.Handler.
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	rec := &statusRecorder{ResponseWriter: w, code: http.StatusOK}
	s.mux.ServeHTTP(rec, r)
	if s.observe != nil {
		// r.Pattern is the matched route ("/embed/jobs/{job_id}"), set by
		// the mux on this same request value.
		s.observe(r.Method, r.Pattern, rec.code, time.Since(start))
	}
	s.log.Debug("http.request", "method", r.Method, "path", r.URL.Path, "status", rec.code, "duration_ms", time.Since(start).Milliseconds())
}

type statusRecorder struct {
	http.ResponseWriter
	code int
}

func (r *statusRecorder) WriteHeader(code int) { r.code = code; r.ResponseWriter.WriteHeader(code) }

func (s *Server) method(m string, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if r.Method != m && !(m == http.MethodGet && r.Method == http.MethodHead) {
			w.Header().Set("Allow", m)
			writeDetail(w, http.StatusMethodNotAllowed, "Method Not Allowed")
			return
		}
		h(w, r)
	}
}

// authorized applies the token rule (docs/gpu-host.md, "HTTP API"): "Authorization: <scheme> <token>",
// split at the first space, scheme "bearer" in any case, token trimmed, then
// compared in constant time.
func (s *Server) authorized(r *http.Request) bool {
	scheme, tok, ok := strings.Cut(r.Header.Get("Authorization"), " ")
	if !ok || !strings.EqualFold(scheme, "bearer") {
		return false
	}
	return subtle.ConstantTimeCompare([]byte(strings.TrimSpace(tok)), []byte(s.token)) == 1
}

func (s *Server) auth(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		if s.token != "" && !s.authorized(r) {
			writeDetail(w, http.StatusUnauthorized, "unauthorized")
			return
		}
		h(w, r)
	}
}

func writeJSON200(w http.ResponseWriter, v any) { writeJSONStatus(w, http.StatusOK, v) }

func writeJSONStatus(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(v)
}

func writeDetail(w http.ResponseWriter, code int, detail any) {
	writeJSONStatus(w, code, map[string]any{"detail": detail})
}

// handleHealth answers GET /health. It needs no token (docs/gpu-host.md):
// load balancers and monitors probe it, and it reveals only the GPU model,
// its memory and job counts. A request that does send an Authorization header
// with a wrong token still gets 401, so that a backend configured with the
// wrong token learns it from its health check rather than from its first job.
func (s *Server) handleHealth(w http.ResponseWriter, r *http.Request) {
	if s.token != "" && r.Header.Get("Authorization") != "" && !s.authorized(r) {
		writeDetail(w, http.StatusUnauthorized, "unauthorized")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), temporalCallTimeout)
	defer cancel()
	gpu := s.health.GPU(ctx)
	_, herr := s.client.CheckHealth(ctx, &client.CheckHealthRequest{})
	online := herr == nil
	active, queued := s.countJobs(ctx)
	writeJSON200(w, map[string]any{
		"online":        online,
		"gpu_name":      gpu.Name,
		"free_vram_gb":  gpu.FreeGB,
		"total_vram_gb": gpu.TotalGB,
		"active_jobs":   active,
		"queued_jobs":   queued,
		"executor":      s.health.Executor,
		"cache_folders": s.cacheFolders,
		"step_servers":  s.stepServers(s.token == "" || s.authorized(r)),
	})
}

// countJobs counts the known jobs that run (active) or wait (queued);
// closed ones are forgotten.
// stepServers lists the resident step servers (an empty list, never null).
// /health needs no token, so an anonymous caller of a host that has one
// sees no pid and no last error (stderr text can name server paths).
func (s *Server) stepServers(detail bool) []stepserver.ServerStatus {
	out := []stepserver.ServerStatus{}
	if s.servers != nil {
		out = append(out, s.servers()...)
	}
	if !detail {
		for i := range out {
			out[i].PID, out[i].LastError = 0, ""
		}
	}
	return out
}

func (s *Server) countJobs(ctx context.Context) (active, queued int) {
	for _, id := range s.known.List() {
		d, err := s.client.DescribeWorkflowExecution(ctx, embedjob.WorkflowID(id), "")
		if err != nil {
			var nf *serviceerror.NotFound
			if errors.As(err, &nf) {
				s.known.Remove(id)
			}
			continue
		}
		if d.GetWorkflowExecutionInfo().GetStatus() != enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING {
			s.known.Remove(id)
			continue
		}
		if st, err := s.queryStatus(ctx, id); err == nil {
			if st.State == "queued" {
				queued++
			} else {
				active++
			}
			continue
		}
		if len(d.GetPendingActivities()) > 0 {
			active++
		} else {
			queued++
		}
	}
	return active, queued
}

func (s *Server) queryStatus(ctx context.Context, id string) (*embedjob.Status, error) {
	v, err := s.client.QueryWorkflow(ctx, embedjob.WorkflowID(id), "", embedjob.StatusQuery)
	if err != nil {
		return nil, err
	}
	var st embedjob.Status
	if err := v.Get(&st); err != nil {
		return nil, err
	}
	return &st, nil
}

// submitBody is the POST /embed/jobs payload; step_work is decoded by hand
// to keep its key order (the steps run in that order, as on the reference's
// GPU service).
type submitBody struct {
	MethodKey  *string         `json:"method_key"`
	Target     *string         `json:"target"`
	Profile    *string         `json:"profile"`
	StepWork   json.RawMessage `json:"step_work"`
	SeqIDToSeq json.RawMessage `json:"seq_id_to_seq"`
}

// ValidationError is a submit payload problem: 400 with its text.
type ValidationError struct{ Msg string }

func (e *ValidationError) Error() string { return e.Msg }

func invalid(format string, args ...any) error {
	return &ValidationError{Msg: fmt.Sprintf(format, args...)}
}

// ValidateSubmit checks a POST /embed/jobs body and returns the job's work with
// deprecated step keys mapped, steps with no ids dropped, and the step order.
//
// Rules, each a 400 naming the problem: the body is a JSON object;
// method_key and target are non-empty strings; profile is a string or null;
// step_work is a non-empty object of step key → list of seq ids, and at least
// one list is non-empty; every key is an active or deprecated step key; every
// seq id is valid (CheckSeqID) and listed once per step; every listed seq id
// has a sequence in seq_id_to_seq that passes CheckSequence; and the work is
// sparse: no listed seq id has every expected file of that step present and
// well-formed already (a request for work that is done is the caller's
// planning error, not a job). Entries of seq_id_to_seq that no step lists are
// ignored and not kept.
func ValidateSubmit(body []byte, layout embedjob.Layout) (*embedjob.Work, []string, error) {
	var b submitBody
	dec := json.NewDecoder(bytes.NewReader(body))
	if err := dec.Decode(&b); err != nil {
		return nil, nil, invalid("invalid JSON body: %v", err)
	}
	if dec.More() {
		return nil, nil, invalid("invalid JSON body: text after the object")
	}
	if b.MethodKey == nil || strings.TrimSpace(*b.MethodKey) == "" {
		return nil, nil, invalid("method_key is required")
	}
	if b.Target == nil || strings.TrimSpace(*b.Target) == "" {
		return nil, nil, invalid("target is required")
	}
	w := &embedjob.Work{MethodKey: *b.MethodKey, Target: *b.Target, StepWork: map[string][]string{}, SeqIDToSeq: map[string]string{}}
	if b.Profile != nil {
		w.Profile = *b.Profile
	}
	keys, lists, err := orderedStepWork(b.StepWork)
	if err != nil {
		return nil, nil, err
	}
	var seqs map[string]string
	if len(b.SeqIDToSeq) > 0 && string(b.SeqIDToSeq) != "null" {
		if err := json.Unmarshal(b.SeqIDToSeq, &seqs); err != nil {
			return nil, nil, invalid("seq_id_to_seq must be an object of seq_id → sequence string")
		}
	}
	var order []string
	for i, key := range keys {
		step, ok := embedjob.CanonicalStep(key)
		if !ok {
			return nil, nil, invalid("unknown step key %q in step_work", key)
		}
		seen := map[string]bool{}
		for _, id := range lists[i] {
			if err := embedjob.CheckSeqID(id); err != nil {
				return nil, nil, invalid("step_work[%s]: %v", key, err)
			}
			if seen[id] {
				return nil, nil, invalid("step_work[%s] lists seq_id %s twice", key, id)
			}
			seen[id] = true
			seq, ok := seqs[id]
			if !ok {
				return nil, nil, invalid("seq_id %s of step_work[%s] has no sequence in seq_id_to_seq", id, key)
			}
			if err := embedjob.CheckSequence(seq); err != nil {
				return nil, nil, invalid("bad sequence for seq_id %s: %v", id, err)
			}
			if slices.Contains(w.StepWork[step], id) {
				continue // a deprecated key and its replacement both list it
			}
			paths, err := layout.ExpectedPaths(step, id)
			if err != nil {
				return nil, nil, invalid("step %s cannot run on this host: %v", step, err)
			}
			if len(embedjob.MissingOutputs(paths)) == 0 {
				return nil, nil, invalid("step_work is not sparse: step_work[%s] lists seq_id %s whose %d expected file(s) all exist", key, id, len(paths))
			}
			if len(w.StepWork[step]) == 0 {
				order = append(order, step)
			}
			w.StepWork[step] = append(w.StepWork[step], id)
			w.SeqIDToSeq[id] = seq
		}
	}
	if len(order) == 0 {
		return nil, nil, invalid("step_work is required")
	}
	return w, order, nil
}

// orderedStepWork decodes step_work's keys in document order.
func orderedStepWork(raw json.RawMessage) ([]string, [][]string, error) {
	if len(raw) == 0 || string(raw) == "null" {
		return nil, nil, invalid("step_work is required")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	tok, err := dec.Token()
	if err != nil || tok != json.Delim('{') {
		return nil, nil, invalid("step_work must be an object of step key → list of seq ids")
	}
	var keys []string
	var lists [][]string
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, nil, invalid("step_work: %v", err)
		}
		key, _ := tok.(string)
		var ids []string
		if err := dec.Decode(&ids); err != nil {
			return nil, nil, invalid("step_work[%s] must be a list of seq id strings", key)
		}
		if slices.Contains(keys, key) {
			return nil, nil, invalid("step_work lists step %s twice", key)
		}
		keys = append(keys, key)
		lists = append(lists, ids)
	}
	return keys, lists, nil
}

// NewJobID is a GPU job id: a uuid4 in 32 lowercase hex characters.
func NewJobID() string { return strings.ReplaceAll(uuid.NewString(), "-", "") }

// WorkFilePath is where a job submitted over HTTP keeps its work file.
func WorkFilePath(mediaRoot, jobID string) string {
	return filepath.Join(mediaRoot, "gpu_jobs", jobID, "work.json")
}

func (s *Server) handleSubmit(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.maxBody))
	if err != nil {
		var mb *http.MaxBytesError
		if errors.As(err, &mb) {
			writeDetail(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("body larger than %d bytes", s.maxBody))
			return
		}
		writeDetail(w, http.StatusBadRequest, "could not read the body")
		return
	}
	work, order, err := ValidateSubmit(body, s.layout)
	if err != nil {
		writeDetail(w, http.StatusBadRequest, err.Error())
		return
	}
	id := NewJobID()
	in, err := s.Submit(r.Context(), id, work, order)
	if err != nil {
		s.log.Error("submit GPU job", "job_id", id, "error", err)
		if mediaroot.Unavailable(err) {
			// Its text names the work file's path: the log has it.
			writeDetail(w, http.StatusServiceUnavailable, "could not start the job: "+mediaroot.ErrUnavailable.Error())
			return
		}
		writeDetail(w, http.StatusServiceUnavailable, "could not start the job: "+err.Error())
		return
	}
	s.inputs.Store(id, in)
	writeJSON200(w, map[string]string{"job_id": id, "status": "queued"})
}

// Submit writes the job's work file and starts its EmbedJob workflow, the
// same workflow the backend starts as a child.
func (s *Server) Submit(ctx context.Context, id string, work *embedjob.Work, order []string) (*embedjob.Input, error) {
	path := WorkFilePath(s.mediaRoot, id)
	data, err := json.Marshal(work)
	if err != nil {
		return nil, fmt.Errorf("encode work file: %w", err)
	}
	if err := fsutil.WriteFileAtomic(path, data, 0o644); err != nil {
		return nil, err
	}
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("work file path: %w", err)
	}
	in := &embedjob.Input{
		GPUJobID: id, MethodKey: work.MethodKey, Target: work.Target, Profile: work.Profile,
		Steps: order, StepCounts: map[string]int{}, WorkFile: abs, GPUTaskQueue: s.gpuQueue, ShardSeqs: s.shardSeqs,
		SmallStepSeqs: s.smallStepSeqs, Rev: embedjob.Rev, CacheFolders: s.cacheFolders,
	}
	for _, k := range order {
		in.StepCounts[k] = len(work.StepWork[k])
	}
	if err := s.logs.Append(id, "JOB_QUEUED job_id=%s method_key=%s target=%s steps=%s", id, work.MethodKey, work.Target, strings.Join(order, ",")); err != nil {
		s.log.Warn("job log", "job_id", id, "error", err)
	}
	sctx, cancel := context.WithTimeout(ctx, temporalCallTimeout)
	defer cancel()
	run, err := s.client.ExecuteWorkflow(sctx, client.StartWorkflowOptions{
		ID:                    embedjob.WorkflowID(id),
		TaskQueue:             s.workflowQueue,
		WorkflowIDReusePolicy: enumspb.WORKFLOW_ID_REUSE_POLICY_REJECT_DUPLICATE,
	}, embedjob.WorkflowName, in)
	if err != nil {
		_ = os.RemoveAll(filepath.Dir(path))
		return nil, fmt.Errorf("start EmbedJob workflow: %w", err)
	}
	s.known.Add(id)
	s.log.Info("GPU job queued", "job_id", id, "method_key", work.MethodKey, "target", work.Target, "steps", order)
	go s.watch(id, run)
	return in, nil
}

// watch writes JOB_DONE or JOB_FAILED into the job log when the workflow
// closes.
func (s *Server) watch(id string, run client.WorkflowRun) {
	err := run.Get(s.base, nil)
	if s.base.Err() != nil {
		return
	}
	ctx, cancel := context.WithTimeout(s.base, temporalCallTimeout)
	defer cancel()
	v, _ := s.jobView(ctx, id)
	switch {
	case err == nil && (v == nil || v.Status == "done"):
		_ = s.logs.Append(id, "JOB_DONE job_id=%s", id)
	default:
		msg := ""
		if v != nil && v.Error != nil {
			msg = *v.Error
		} else if err != nil {
			msg = err.Error()
		}
		_ = s.logs.Append(id, "JOB_FAILED job_id=%s error=%s", id, msg)
	}
}

// JobView is GET /embed/jobs/{job_id}'s body: the reference's fields plus
// the per-step counts.
type JobView struct {
	JobID         string              `json:"job_id"`
	Status        string              `json:"status"`
	MethodKey     string              `json:"method_key"`
	Target        string              `json:"target"`
	Profile       *string             `json:"profile"`
	StepWork      map[string][]string `json:"step_work"`
	Steps         []string            `json:"steps"`
	StepsDone     map[string]int      `json:"steps_done"`
	StepsTotal    map[string]int      `json:"steps_total"`
	StartedAt     *float64            `json:"started_at"`
	FinishedAt    *float64            `json:"finished_at"`
	WorkerLogPath string              `json:"worker_log_path"`
	Error         *string             `json:"error"`
}

var errJobNotFound = errors.New("job not found")

func unixFloat(t time.Time) *float64 {
	if t.IsZero() {
		return nil
	}
	f := float64(t.UnixMicro()) / 1e6
	return &f
}

// jobView builds a job's view from its workflow: describe (existence, state,
// times), the status query (state, counts, error) and the start input.
func (s *Server) jobView(ctx context.Context, id string) (*JobView, error) {
	if embedjob.CheckJobID(id) != nil {
		return nil, errJobNotFound
	}
	wfID := embedjob.WorkflowID(id)
	d, err := s.client.DescribeWorkflowExecution(ctx, wfID, "")
	if err != nil {
		var nf *serviceerror.NotFound
		if errors.As(err, &nf) {
			return nil, errJobNotFound
		}
		return nil, fmt.Errorf("describe job: %w", err)
	}
	info := d.GetWorkflowExecutionInfo()
	v := &JobView{JobID: id, WorkerLogPath: s.logs.Path(id), StepsDone: map[string]int{}, StepsTotal: map[string]int{}}
	if in, err := s.jobInput(ctx, id); err == nil {
		v.MethodKey, v.Target, v.Steps = in.MethodKey, in.Target, in.Steps
		if in.Profile != "" {
			p := in.Profile
			v.Profile = &p
		}
		if wk, err := embedjob.ReadWorkFile(in.WorkFile); err == nil {
			v.StepWork = wk.StepWork
		}
	}
	st, qerr := s.queryStatus(ctx, id)
	if qerr == nil {
		v.Status = st.State
		for k, n := range st.Steps {
			v.StepsDone[k] = n
		}
		for k, n := range st.StepTotals {
			v.StepsTotal[k] = n
		}
		if st.StartedAt != nil {
			v.StartedAt = unixFloat(*st.StartedAt)
		}
		if st.FinishedAt != nil {
			v.FinishedAt = unixFloat(*st.FinishedAt)
		}
		if st.Error != "" {
			e := st.Error
			v.Error = &e
		}
	}
	switch info.GetStatus() {
	case enumspb.WORKFLOW_EXECUTION_STATUS_RUNNING:
		if qerr != nil || (v.Status != "queued" && v.Status != "running") {
			v.Status = "queued"
			if len(d.GetPendingActivities()) > 0 {
				v.Status = "running"
			}
		}
	case enumspb.WORKFLOW_EXECUTION_STATUS_COMPLETED:
		if v.Status != "failed" {
			v.Status = "done"
		}
	default: // failed, cancelled, terminated, timed out, continued-as-new
		v.Status = "failed"
		if v.Error == nil {
			msg := strings.ToLower(strings.TrimPrefix(info.GetStatus().String(), "WORKFLOW_EXECUTION_STATUS_"))
			if err := s.client.GetWorkflow(ctx, wfID, "").Get(ctx, nil); err != nil {
				msg = err.Error()
			}
			v.Error = &msg
		}
	}
	if v.FinishedAt == nil && info.GetCloseTime() != nil {
		v.FinishedAt = unixFloat(info.GetCloseTime().AsTime())
	}
	if v.Status == "failed" && v.Error != nil {
		if tail, err := s.logs.Tail(id, 20); err == nil && len(tail) > 0 {
			e := *v.Error + "\n--- worker log tail ---\n" + strings.Join(tail, "\n")
			v.Error = &e
		}
	}
	return v, nil
}

// jobInput reads the workflow's start input (first history event), cached.
func (s *Server) jobInput(ctx context.Context, id string) (*embedjob.Input, error) {
	if v, ok := s.inputs.Load(id); ok {
		return v.(*embedjob.Input), nil
	}
	it := s.client.GetWorkflowHistory(ctx, embedjob.WorkflowID(id), "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	if !it.HasNext() {
		return nil, errors.New("empty history")
	}
	ev, err := it.Next()
	if err != nil {
		return nil, fmt.Errorf("read history: %w", err)
	}
	attrs := ev.GetWorkflowExecutionStartedEventAttributes()
	if attrs == nil {
		return nil, errors.New("first event is not WorkflowExecutionStarted")
	}
	var in embedjob.Input
	if err := converter.GetDefaultDataConverter().FromPayloads(attrs.GetInput(), &in); err != nil {
		return nil, fmt.Errorf("decode input: %w", err)
	}
	s.inputs.Store(id, &in)
	return &in, nil
}

func (s *Server) handleJob(w http.ResponseWriter, r *http.Request) {
	ctx, cancel := context.WithTimeout(r.Context(), temporalCallTimeout)
	defer cancel()
	v, err := s.jobView(ctx, r.PathValue("job_id"))
	switch {
	case errors.Is(err, errJobNotFound):
		writeDetail(w, http.StatusNotFound, "job not found")
	case err != nil:
		s.log.Error("job status", "job_id", r.PathValue("job_id"), "error", err)
		writeDetail(w, http.StatusServiceUnavailable, "job status unavailable: "+err.Error())
	default:
		writeJSON200(w, v)
	}
}

// Log tail bounds of GET …/logs: 1..5000 lines, 200 by default, as on the
// reference's GPU service.
const (
	defaultLogTail = 200
	maxLogTail     = 5000
)

func (s *Server) handleLogs(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("job_id")
	n := defaultLogTail
	if q := r.URL.Query().Get("tail"); q != "" {
		v, err := strconv.Atoi(q)
		if err != nil || v < 1 || v > maxLogTail {
			writeDetail(w, http.StatusUnprocessableEntity, fmt.Sprintf("tail must be a whole number from 1 to %d", maxLogTail))
			return
		}
		n = v
	}
	if embedjob.CheckJobID(id) != nil {
		writeDetail(w, http.StatusNotFound, "job not found")
		return
	}
	ctx, cancel := context.WithTimeout(r.Context(), temporalCallTimeout)
	defer cancel()
	known := true
	if _, err := s.client.DescribeWorkflowExecution(ctx, embedjob.WorkflowID(id), ""); err != nil {
		var nf *serviceerror.NotFound
		if !errors.As(err, &nf) {
			writeDetail(w, http.StatusServiceUnavailable, "job status unavailable: "+err.Error())
			return
		}
		// No EmbedJob of that id: a small job's steps, run inside its
		// PredictionWorkflow (embedjob.RunInline), still log under the
		// GPU job id, and that log is the job's trace here.
		known = false
	}
	lines, err := s.logs.Tail(id, n)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			if !known {
				writeDetail(w, http.StatusNotFound, "job not found")
				return
			}
			writeDetail(w, http.StatusNotFound, "worker log not found")
			return
		}
		writeDetail(w, http.StatusInternalServerError, "could not read the worker log")
		return
	}
	writeJSON200(w, map[string]any{"job_id": id, "tail_lines": n, "log_tail": strings.Join(lines, "\n")})
}
