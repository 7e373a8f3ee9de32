package gpuworker

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/testenv"
)

const testToken = "s3cret-token"

type testHost struct {
	url    string
	media  string
	logDir string
	host   *Host
}

// startHost runs a real GPU host (worker with the real EmbedJob workflow on
// its queue, HTTP API through httptest) against the dev server.
func startHost(t *testing.T, token string, runner func(*embedjob.Settings, string) embedjob.BatchRunner, mutate func(*embedjob.Settings)) *testHost {
	t.Helper()
	tmp := testenv.MustTemporal(t)
	dir := t.TempDir()
	queue := "gpu-test-" + NewJobID()[:12]
	env := map[string]string{
		"KINFLOW_MEDIA_ROOT":      filepath.Join(dir, "media"),
		"KINFLOW_GPU_TASK_QUEUE":  queue,
		"GPU_EMBED_SERVICE_TOKEN": token,
		"KINFLOW_GPU_SLOTS":       "2",
	}
	cfg, err := config.Load(func(k string) (string, bool) { v, ok := env[k]; return v, ok })
	if err != nil {
		t.Fatal(err)
	}
	file := map[string]string{embedjob.EnvJobLogDir: filepath.Join(dir, "logs"), embedjob.EnvScratchDir: filepath.Join(dir, "scratch")}
	st, err := embedjob.LoadSettings(func(k string) (string, bool) { v, ok := file[k]; return v, ok }, file, cfg.MediaRoot)
	if err != nil {
		t.Fatal(err)
	}
	if mutate != nil {
		mutate(st)
	}
	var r embedjob.BatchRunner
	if runner != nil {
		r = runner(st, cfg.MediaRoot)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	h, err := New(ctx, Deps{
		Config: cfg, Client: tmp.Client, Settings: st, Runner: r,
		Log:               slog.New(slog.NewTextHandler(io.Discard, nil)),
		WorkflowTaskQueue: queue,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := h.StartWorkers(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(h.StopWorkers)
	srv := httptest.NewServer(h.Server)
	t.Cleanup(srv.Close)
	return &testHost{url: srv.URL, media: cfg.MediaRoot, logDir: file[embedjob.EnvJobLogDir], host: h}
}

func do(t *testing.T, method, url, auth string, body any) (int, map[string]any) {
	t.Helper()
	var rd io.Reader
	switch b := body.(type) {
	case nil:
	case string:
		rd = strings.NewReader(b)
	default:
		data, _ := json.Marshal(b)
		rd = bytes.NewReader(data)
	}
	req, _ := http.NewRequest(method, url, rd)
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	data, _ := io.ReadAll(resp.Body)
	if err := json.Unmarshal(data, &out); err != nil {
		t.Fatalf("%s %s: non-JSON body %q", method, url, data)
	}
	return resp.StatusCode, out
}

func TestHealthWithAndWithoutToken(t *testing.T) {
	open := startHost(t, "", nil, nil)
	code, body := do(t, "GET", open.url+"/health", "", nil)
	if code != 200 || body["online"] != true || !strings.Contains(body["gpu_name"].(string), "synthetic") ||
		body["active_jobs"] != 0.0 || body["queued_jobs"] != 0.0 || body["cache_folders"] != "kinflow" {
		t.Fatalf("%d %v", code, body)
	}
	for _, k := range []string{"free_vram_gb", "total_vram_gb"} {
		if _, ok := body[k]; !ok {
			t.Errorf("health lacks %s", k)
		}
	}

	locked := startHost(t, testToken, nil, nil)
	if code, _ := do(t, "GET", locked.url+"/health", "", nil); code != 200 {
		t.Fatalf("/health without a token: %d, want 200 (documented: /health is public)", code)
	}
	if code, _ := do(t, "GET", locked.url+"/health", "Bearer "+testToken, nil); code != 200 {
		t.Fatalf("/health with the token: %d", code)
	}
	if code, body := do(t, "GET", locked.url+"/health", "Bearer wrong", nil); code != 401 || body["detail"] != "unauthorized" {
		t.Fatalf("/health with a wrong token: %d %v", code, body)
	}
}

func TestUnauthorized(t *testing.T) {
	h := startHost(t, testToken, nil, nil)
	job := h.url + "/embed/jobs/" + strings.Repeat("0", 32)
	for _, c := range []struct{ method, url, auth string }{
		{"POST", h.url + "/embed/jobs", ""},
		{"POST", h.url + "/embed/jobs", "Bearer wrong"},
		{"POST", h.url + "/embed/jobs", "Basic " + testToken},
		{"POST", h.url + "/embed/jobs", testToken},
		{"POST", h.url + "/embed/jobs", "Bearer " + testToken + "x"},
		{"GET", job, ""},
		{"GET", job, "Bearer nope"},
		{"GET", job + "/logs", ""},
	} {
		code, body := do(t, c.method, c.url, c.auth, "{}")
		if code != 401 || body["detail"] != "unauthorized" {
			t.Errorf("%s %s auth=%q: %d %v", c.method, c.url, c.auth, code, body)
		}
	}
	// Scheme in any case, token trimmed: authorised,
	// then 404 for an unknown job.
	if code, body := do(t, "GET", job, "bEaReR   "+testToken+" ", nil); code != 404 || body["detail"] != "job not found" {
		t.Fatalf("valid token: %d %v", code, body)
	}
}

func submitBodyFor(steps map[string][]string, seqs map[string]string) map[string]any {
	return map[string]any{"method_key": "D", "target": "kcat", "profile": "methodd_esm1b", "step_work": steps, "seq_id_to_seq": seqs}
}

func waitStatus(t *testing.T, url, auth string, want ...string) map[string]any {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	var body map[string]any
	for time.Now().Before(deadline) {
		var code int
		code, body = do(t, "GET", url, auth, nil)
		if code != 200 {
			t.Fatalf("poll: %d %v", code, body)
		}
		for _, w := range want {
			if body["status"] == w {
				return body
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("status never reached %v: %v", want, body)
	return nil
}

func TestSubmitPollDone(t *testing.T) {
	h := startHost(t, testToken, nil, nil)
	auth := "Bearer " + testToken
	long := seqOfLen(1500, 9)
	seqs := map[string]string{"aaaaaaaaaaaa": seqOfLen(100, 1), "bbbbbbbbbbbb": seqOfLen(50, 2), "cccccccccccc": long}
	// step_work key order is the step order; a deprecated key is mapped.
	body := `{"method_key":"D","target":"kcat","profile":null,"step_work":{` +
		`"methodd_esm1b":["aaaaaaaaaaaa","cccccccccccc"],"methoda_bindsites":["bbbbbbbbbbbb"]},"seq_id_to_seq":` + mustJSON(seqs) + `}`
	code, resp := do(t, "POST", h.url+"/embed/jobs", auth, body)
	if code != 200 || resp["status"] != "queued" {
		t.Fatalf("submit: %d %v", code, resp)
	}
	id, _ := resp["job_id"].(string)
	if embedjob.CheckJobID(id) != nil {
		t.Fatalf("job id %q", id)
	}
	v := waitStatus(t, h.url+"/embed/jobs/"+id, auth, "done", "failed")
	if v["status"] != "done" || v["error"] != nil {
		t.Fatalf("job: %v", v)
	}
	if v["method_key"] != "D" || v["target"] != "kcat" || v["started_at"] == nil || v["finished_at"] == nil {
		t.Fatalf("job fields: %v", v)
	}
	steps, _ := v["steps"].([]any)
	if len(steps) != 2 || steps[0] != "methodd_esm1b" || steps[1] != "methoda_t5_full" {
		t.Fatalf("steps %v (want step_work order, deprecated key mapped)", v["steps"])
	}
	sw, _ := v["step_work"].(map[string]any)
	if _, ok := sw["methoda_t5_full"]; !ok {
		t.Fatalf("step_work %v", sw)
	}
	done, _ := v["steps_done"].(map[string]any)
	// Sequences done per step, like steps_total (one for methoda_t5_full,
	// whose four files all exist).
	if done["methodd_esm1b"] != 2.0 || done["methoda_t5_full"] != 1.0 {
		t.Fatalf("steps_done %v", done)
	}
	for _, p := range []string{
		"sequence_info/esm1b_methodd/aaaaaaaaaaaa.npy",
		"sequence_info/esm1b_methodd/cccccccccccc.npy",
		"sequence_info/prot_t5_last/weighted_vecs/bbbbbbbbbbbb.npy",
		"sequence_info/prot_t5_layer_19/mean_vecs/bbbbbbbbbbbb.npy",
	} {
		if err := embedding.CheckFile(filepath.Join(h.media, p)); err != nil {
			t.Errorf("%s: %v", p, err)
		}
	}
	if _, err := os.Stat(WorkFilePath(h.media, id)); err != nil {
		t.Errorf("work file: %v", err)
	}

	// The log: markers with timestamps; JOB_DONE is written when the
	// workflow closes.
	deadline := time.Now().Add(10 * time.Second)
	var logTail string
	for time.Now().Before(deadline) {
		code, lg := do(t, "GET", h.url+"/embed/jobs/"+id+"/logs?tail=100", auth, nil)
		if code != 200 {
			t.Fatalf("logs: %d %v", code, lg)
		}
		logTail, _ = lg["log_tail"].(string)
		if strings.Contains(logTail, "JOB_DONE") {
			break
		}
		time.Sleep(100 * time.Millisecond)
	}
	for _, m := range []string{"JOB_QUEUED job_id=" + id, "JOB_START", "STEP_START job_id=" + id + " step=methodd_esm1b seq_count=2",
		"STEP_DONE job_id=" + id + " step=methoda_t5_full", "JOB_DONE job_id=" + id} {
		if !strings.Contains(logTail, m) {
			t.Errorf("log lacks %q:\n%s", m, logTail)
		}
	}
	// Method D's step program cuts a long sequence itself (TurNup's first
	// 1,022 residues, docs/method-cuts.md): the host never re-cuts it.
	if strings.Contains(logTail, "TRUNCATE") {
		t.Errorf("the host cut a sequence that method D's program cuts itself:\n%s", logTail)
	}
	first := strings.SplitN(logTail, "\n", 2)[0]
	if _, err := time.Parse("2006-01-02T15:04:05.000000Z", strings.SplitN(first, " ", 2)[0]); err != nil {
		t.Errorf("log line without timestamp: %q", first)
	}
	if code, lg := do(t, "GET", h.url+"/embed/jobs/"+id+"/logs?tail=1", auth, nil); code != 200 || strings.Count(lg["log_tail"].(string), "\n") != 0 || lg["tail_lines"] != 1.0 {
		t.Errorf("tail=1: %d %v", code, lg)
	}

	// The same work again is not sparse any more.
	code, resp = do(t, "POST", h.url+"/embed/jobs", auth, submitBodyFor(map[string][]string{"methodd_esm1b": {"aaaaaaaaaaaa"}}, seqs))
	if code != 400 || !strings.Contains(resp["detail"].(string), "not sparse") {
		t.Fatalf("resubmit: %d %v", code, resp)
	}

	// The job ran on resident synthetic servers: /health lists them, with
	// pids for the token holder only.
	servers := func(auth string) []any {
		_, hb := do(t, "GET", h.url+"/health", auth, nil)
		l, _ := hb["step_servers"].([]any)
		return l
	}
	withToken, anonymous := servers(auth), servers("")
	if len(withToken) == 0 || len(withToken) != len(anonymous) {
		t.Fatalf("step servers: with token %v, anonymous %v", withToken, anonymous)
	}
	for i := range withToken {
		w, a := withToken[i].(map[string]any), anonymous[i].(map[string]any)
		if w["pid"] == nil || a["pid"] != nil || w["step_key"] != a["step_key"] {
			t.Fatalf("server %v with the token, %v without", w, a)
		}
	}
}

func TestFailedJobReportsError(t *testing.T) {
	// The command executor with no command for the step: a non-retryable
	// StepConfig failure, so the job fails at once.
	h := startHost(t, "", func(st *embedjob.Settings, media string) embedjob.BatchRunner {
		return &embedjob.CommandRunner{Settings: st, MediaRoot: media}
	}, nil)
	code, resp := do(t, "POST", h.url+"/embed/jobs", "", submitBodyFor(map[string][]string{"prot_t5_mean": {"dddddddddddd"}}, map[string]string{"dddddddddddd": "MKV"}))
	if code != 200 {
		t.Fatalf("submit: %d %v", code, resp)
	}
	v := waitStatus(t, h.url+"/embed/jobs/"+resp["job_id"].(string), "", "done", "failed")
	if v["status"] != "failed" || !strings.Contains(fmt.Sprint(v["error"]), "GPU_EMBED_STEP_CMD_PROT_T5_MEAN") {
		t.Fatalf("job: %v", v)
	}
}

func TestJobNotFoundAndBadTail(t *testing.T) {
	h := startHost(t, "", nil, nil)
	for _, u := range []string{"/embed/jobs/" + strings.Repeat("a", 32), "/embed/jobs/not-a-job", "/embed/jobs/" + strings.Repeat("a", 32) + "/logs"} {
		if code, body := do(t, "GET", h.url+u, "", nil); code != 404 || body["detail"] != "job not found" {
			t.Errorf("%s: %d %v", u, code, body)
		}
	}
	// A GPU job without an EmbedJob (a small job's steps run inside its
	// PredictionWorkflow) is found by its step log.
	inline := strings.Repeat("b", 32)
	if err := os.MkdirAll(h.logDir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(h.logDir, inline+".log"), []byte("JOB_START job_id="+inline+"\nSTEP_DONE step=prot_t5_mean\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, body := do(t, "GET", h.url+"/embed/jobs/"+inline+"/logs?tail=1", "", nil); code != 200 || !strings.Contains(fmt.Sprint(body["log_tail"]), "STEP_DONE") || strings.Contains(fmt.Sprint(body["log_tail"]), "JOB_START") {
		t.Errorf("an inline job's log: %d %v", code, body)
	}
	for _, q := range []string{"0", "5001", "x"} {
		if code, _ := do(t, "GET", h.url+"/embed/jobs/"+strings.Repeat("a", 32)+"/logs?tail="+q, "", nil); code != 422 {
			t.Errorf("tail=%s: %d", q, code)
		}
	}
	if code, body := do(t, "DELETE", h.url+"/health", "", nil); code != 405 || body["detail"] == nil {
		t.Errorf("405: %d %v", code, body)
	}
	if code, body := do(t, "GET", h.url+"/nope", "", nil); code != 404 || body["detail"] == nil {
		t.Errorf("404: %d %v", code, body)
	}
}

func mustJSON(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestMain(m *testing.M) {
	embedjob.MainIfStepServer()
	code := m.Run()
	testenv.StopTemporal()
	os.Exit(code)
}

// seqOfLen is a valid sequence of n residues, distinct per tag.
func seqOfLen(n int, tag int) string {
	const aa = "ACDEFGHIKLMNPQRSTVWY"
	var b strings.Builder
	for i := 0; i < n; i++ {
		b.WriteByte(aa[(i*7+tag)%len(aa)])
	}
	return b.String()
}
