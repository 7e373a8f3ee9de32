package metrics

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/client"
	"go.temporal.io/sdk/interceptor"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/worker"
	"go.temporal.io/sdk/workflow"

	"github.com/kinflow/kinflow/internal/testenv"
)

// scrape serves m on a real listener and returns one scrape's body.
func scrape(t *testing.T, m *Metrics) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- ServeListener(ctx, ln, m, nil) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("serve: %v", err)
		}
	}()
	resp, err := http.Get("http://" + ln.Addr().String() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
		t.Fatalf("scrape: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	return string(b)
}

func wantLines(t *testing.T, body string, lines ...string) {
	t.Helper()
	for _, l := range lines {
		if !strings.Contains(body, l) {
			t.Errorf("metrics lack %q", l)
		}
	}
	if t.Failed() {
		t.Log(body)
	}
}

func TestCountersAndJobs(t *testing.T) {
	m := New()
	for _, r := range []string{"submitted", "fallback_local", "gpu_request_failed: remote job did not finish", "incomplete_remote_outputs:3", "fallback_local"} {
		m.GPUEvent(r)
	}
	m.CacheLookup("prot_t5_last/mean_vecs", 7, 3)
	m.CacheLookup("esm1v", 0, 2)
	m.QuotaRejected()
	m.TrackerFound("notify", 4)
	m.HTTPRequest("gpu", "GET", "", 404, time.Millisecond)
	calls := 0
	if err := m.RegisterJobs(func(context.Context) (map[string]int64, error) {
		calls++
		return map[string]int64{"Pending": 2, "Processing": 1}, nil
	}, nil); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, m)
	wantLines(t, body,
		`kinflow_gpu_precompute_events_total{reason="fallback_local"} 2`,
		`kinflow_gpu_precompute_events_total{reason="gpu_request_failed"} 1`,
		`kinflow_gpu_precompute_events_total{reason="incomplete_remote_outputs"} 1`,
		`kinflow_gpu_fallbacks_total 2`,
		`kinflow_cache_files_total{family="prot_t5_last/mean_vecs",result="hit"} 7`,
		`kinflow_cache_files_total{family="prot_t5_last/mean_vecs",result="miss"} 3`,
		`kinflow_cache_files_total{family="esm1v",result="miss"} 2`,
		`kinflow_quota_rejections_total 1`,
		`kinflow_progress_files_found_total{source="notify"} 4`,
		`kinflow_http_request_duration_seconds_count{code="404",method="GET",route="unmatched",server="gpu"} 1`,
		`kinflow_jobs{state="Pending"} 2`,
		`kinflow_jobs{state="Processing"} 1`,
		`kinflow_jobs{state="Failed"} 0`,
		"process_cpu_seconds_total",
	)
	if strings.Contains(body, `result="hit",family="esm1v"`) || strings.Contains(body, `family="esm1v",result="hit"`) {
		t.Error("a zero hit count was exported")
	}
	if calls != 1 {
		t.Errorf("jobs counted %d times for one scrape", calls)
	}
}

func TestJobsScrapeErrorIsReported(t *testing.T) {
	m := New()
	_ = m.RegisterJobs(func(context.Context) (map[string]int64, error) { return nil, errors.New("database down") }, nil)
	if _, err := m.Registry.Gather(); err == nil || !strings.Contains(err.Error(), "database down") {
		t.Fatalf("gather error %v", err)
	}
}

func TestNilMetricsRecordNothing(t *testing.T) {
	var m *Metrics
	m.GPUEvent("fallback_local")
	m.CacheLookup("x", 1, 1)
	m.QuotaRejected()
	m.HTTPRequest("api", "GET", "/", 200, 0)
	m.StepDone("x", 0, nil)
	m.TrackerFound("notify", 1)
	m.ProgressStored(0)
	if err := m.RegisterJobs(nil, nil); err != nil {
		t.Fatal(err)
	}
}

// TestWorkerInterceptorTimesActivities runs a workflow with two activities
// on a real Temporal dev server and reads their durations by step name.
func TestWorkerInterceptorTimesActivities(t *testing.T) {
	tmpl := testenv.MustTemporal(t)
	m := New()
	queue := "metrics-test-" + time.Now().Format("150405.000000")
	w := worker.New(tmpl.Client, queue, worker.Options{Interceptors: []interceptor.WorkerInterceptor{m.WorkerInterceptor()}})
	w.RegisterActivityWithOptions(func(ctx context.Context) error { time.Sleep(20 * time.Millisecond); return nil }, activityOpts("methoda_t5_full"))
	w.RegisterActivityWithOptions(func(ctx context.Context) error {
		return temporal.NewNonRetryableApplicationError("boom", "Boom", nil)
	}, activityOpts("Predict"))
	w.RegisterWorkflowWithOptions(func(ctx workflow.Context) error {
		ctx = workflow.WithActivityOptions(ctx, workflow.ActivityOptions{StartToCloseTimeout: 10 * time.Second})
		if err := workflow.ExecuteActivity(ctx, "methoda_t5_full").Get(ctx, nil); err != nil {
			return err
		}
		_ = workflow.ExecuteActivity(ctx, "Predict").Get(ctx, nil)
		return nil
	}, workflow.RegisterOptions{Name: "MetricsTest"})
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	run, err := tmpl.Client.ExecuteWorkflow(ctx, client.StartWorkflowOptions{TaskQueue: queue}, "MetricsTest")
	if err != nil {
		t.Fatal(err)
	}
	if err := run.Get(ctx, nil); err != nil {
		t.Fatal(err)
	}
	body := scrape(t, m)
	wantLines(t, body,
		`kinflow_step_duration_seconds_count{outcome="ok",step="methoda_t5_full"} 1`,
		`kinflow_step_duration_seconds_count{outcome="error",step="Predict"} 1`,
	)
	if strings.Contains(body, `kinflow_step_duration_seconds_bucket{outcome="ok",step="methoda_t5_full",le="0.01"} 1`) {
		t.Error("a 20 ms step fell in the 10 ms bucket")
	}
}

func activityOpts(name string) activity.RegisterOptions { return activity.RegisterOptions{Name: name} }

func TestMain(m *testing.M) {
	code := m.Run()
	testenv.StopTemporal()
	os.Exit(code)
}

// Two roles of one process (kinflow dev's CPU worker and GPU host) each add
// their queues' backlogs to the one registry.
func TestBacklogFromTwoRoles(t *testing.T) {
	m := New()
	for _, q := range []string{"cpu", "gpu-small"} {
		err := m.RegisterBacklog(func(context.Context) ([]Backlog, error) {
			return []Backlog{{TaskQueue: q, Kind: "activity", Count: 3, Age: 1500 * time.Millisecond}}, nil
		}, nil)
		if err != nil {
			t.Fatal(err)
		}
	}
	rec := httptest.NewRecorder()
	m.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "/metrics", nil))
	for _, want := range []string{
		`kinflow_task_queue_backlog_age_seconds{kind="activity",task_queue="cpu"} 1.5`,
		`kinflow_task_queue_backlog_age_seconds{kind="activity",task_queue="gpu-small"} 1.5`,
		`kinflow_task_queue_backlog_tasks{kind="activity",task_queue="gpu-small"} 3`,
	} {
		if !strings.Contains(rec.Body.String(), want) {
			t.Errorf("/metrics lacks %s", want)
		}
	}
}

// TestFoldKeyWork: the keys with the most rows keep their name, the rest
// are summed by state under "other", so the series stay bounded.
func TestFoldKeyWork(t *testing.T) {
	work := []KeyWork{
		{Key: "key-1", State: "waiting", Jobs: 6, Rows: 900},
		{Key: "key-2", State: "running", Jobs: 1, Rows: 150},
		{Key: "key-3", State: "waiting", Jobs: 1, Rows: 3},
		{Key: "key-4", State: "waiting", Jobs: 2, Rows: 6},
		{Key: "key-4", State: "running", Jobs: 1, Rows: 1},
	}
	got := FoldKeyWork(work, 2)
	want := []KeyWork{
		{Key: "key-1", State: "waiting", Jobs: 6, Rows: 900},
		{Key: "key-2", State: "running", Jobs: 1, Rows: 150},
		{Key: "other", State: "waiting", Jobs: 3, Rows: 9},
		{Key: "other", State: "running", Jobs: 1, Rows: 1},
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
}
