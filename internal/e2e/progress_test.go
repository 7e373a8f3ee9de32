package e2e

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/workflows"
)

// TestStatusShowsEmbeddingProgressRising runs a real job whose embeddings the
// GPU host computes slowly, samples /status/ while it runs, and checks that
// the computed count took intermediate values and reached the total; then it
// checks what operators see: /metrics of the three processes, the Temporal
// memo and Stage search attribute, and JSON logs carrying job_id, method
// and step.
func TestStatusShowsEmbeddingProgressRising(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=80")
	workerMetrics, gpuMetrics := testenv.FreeAddr(t), testenv.FreeAddr(t)
	s := newStack(t, nil, map[string]map[string]string{
		"worker":     {"KINFLOW_METRICS_LISTEN": workerMetrics},
		"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow, "KINFLOW_METRICS_LISTEN": gpuMetrics},
	})
	const n = 40
	job := s.submit(csvRows(randSeed(), n, 150), []string{"kcat"}, map[string]string{"kcat": "B"})

	var seen []int
	var percents []float64
	phases := map[string]bool{}
	deadline := time.Now().Add(120 * time.Second)
	var st status
	for {
		st = s.status(job)
		// The whole job's percentage never goes back, and the
		// embedding phase is told in sequences.
		if p := st.Overall.Percent; len(percents) == 0 || percents[len(percents)-1] != p {
			percents = append(percents, p)
		}
		phases[st.Overall.Phase] = true
		if st.Overall.Phase == "embedding" && (st.Overall.Sequences == nil || *st.Overall.Sequences != n ||
			!strings.Contains(st.Overall.Text, "embedding sequences, about ") || st.Overall.Rows != n) {
			t.Errorf("embedding phase: %+v", st.Overall)
		}
		if len(st.Stages) > 0 {
			c := st.Stages[0].Embedding.Computed
			if len(seen) == 0 || seen[len(seen)-1] != c {
				seen = append(seen, c)
			}
			if e := st.Progress.Embedding; e != nil && e.Computed != c {
				t.Errorf("progress.embedding.computed %d, stage says %d", e.Computed, c)
			}
		}
		if st.Status == "Completed" || st.Status == "Failed" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("job still %s; computed values %v", st.Status, seen)
		}
		time.Sleep(40 * time.Millisecond)
	}
	if st.Status != "Completed" {
		t.Fatalf("job %s: %s", st.Status, st.Error)
	}
	t.Logf("computed values seen: %v", seen)
	t.Logf("percentages seen: %v; phases %v", percents, phases)
	for i := 1; i < len(percents); i++ {
		if percents[i] < percents[i-1] {
			t.Errorf("the job's percentage went down: %v", percents)
		}
	}
	if !phases["embedding"] || st.Overall.Percent != 100 || st.Overall.Phase != "completed" || len(percents) < 4 {
		t.Errorf("overall: phases %v, percentages %v, final %+v", phases, percents, st.Overall)
	}
	for i := 1; i < len(seen); i++ {
		if seen[i] < seen[i-1] {
			t.Fatalf("computed went down: %v", seen)
		}
	}
	intermediate := 0
	for _, c := range seen {
		if c > 0 && c < n {
			intermediate++
		}
	}
	// 40 files at 80 ms each take over 3 s; sampled every 40 ms with
	// counts stored every 200 ms, a rising count shows many values.
	if intermediate < 3 {
		t.Fatalf("only %d intermediate computed values: %v", intermediate, seen)
	}
	if e := st.Stages[0].Embedding; e.Computed != n || e.Need != n || e.Total != n || e.State != "done" {
		t.Fatalf("final embedding %+v, want %d of %d computed, done", e, n, n)
	}

	// Metrics: the api's job states, the worker's steps and tracker, the GPU
	// host's step durations and HTTP API.
	wantMetrics(t, s.base+"/metrics",
		`kinflow_jobs{state="Completed"} 1`,
		`kinflow_http_request_duration_seconds_count{code="201",method="POST",route="/api/v1/submit/",server="api"} 1`)
	wantMetrics(t, "http://"+workerMetrics+"/metrics",
		`kinflow_step_duration_seconds_count{outcome="ok",step="BuildPlan"}`,
		`kinflow_step_duration_seconds_count{outcome="ok",step="Predict"} 1`,
		`kinflow_cache_files_total{family="prot_t5_last/mean_vecs",result="miss"} 40`,
		`kinflow_gpu_precompute_events_total{reason="done"} 1`,
		`kinflow_progress_files_found_total{source="notify"}`,
		// Slot pools per queue and the server's backlog (docs/workflows.md).
		`kinflow_worker_slots{kind="activity",task_queue="`+s.cpuQ+`"} 4`,
		`kinflow_worker_slots{kind="activity",task_queue="`+s.cpuQ+`-track"} 1000`,
		`kinflow_worker_slots_used{kind="activity",task_queue="`+s.cpuQ+`-track"} 0`,
		`kinflow_worker_slots{kind="activity",task_queue="`+s.cpuQ+`-notice"} 64`,
		`kinflow_task_queue_backlog_tasks{kind="activity",task_queue="`+s.cpuQ+`-notice"} 0`,
		`kinflow_worker_slots{kind="local_activity",task_queue="`+s.cpuQ+`"} 64`,
		`kinflow_task_queue_backlog_age_seconds{kind="activity",task_queue="`+s.cpuQ+`"} 0`,
		`kinflow_task_queue_backlog_tasks{kind="workflow",task_queue="`+s.cpuQ+`"} 0`)
	wantMetrics(t, "http://"+gpuMetrics+"/metrics",
		`kinflow_worker_slots{kind="activity",task_queue="`+s.gpuQ+`-small"} 8`,
		`kinflow_task_queue_backlog_age_seconds{kind="activity",task_queue="`+s.gpuQ+`-small"} 0`,
		`kinflow_task_queue_backlog_tasks{kind="workflow",task_queue="`+s.gpuQ+`"} 0`,
		`kinflow_step_duration_seconds_count{outcome="ok",step="prot_t5_mean"}`,
		`method="GET",route="/health",server="gpu"`)

	// Temporal: the memo's summary and the final Stage.
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	desc, err := s.tc.DescribeWorkflowExecution(ctx, workflows.PredictionWorkflowID(job), "")
	if err != nil {
		t.Fatal(err)
	}
	var sum workflows.JobSummary
	raw := desc.GetWorkflowExecutionInfo().GetMemo().GetFields()[workflows.MemoSummary]
	if raw == nil || json.Unmarshal(raw.GetData(), &sum) != nil {
		t.Fatalf("memo %v", desc.GetWorkflowExecutionInfo().GetMemo())
	}
	if sum.Targets != "kcat" || sum.Methods["kcat"] != "B" || sum.Rows != n {
		t.Fatalf("memo summary %+v", sum)
	}
	stage := desc.GetWorkflowExecutionInfo().GetSearchAttributes().GetIndexedFields()["Stage"]
	if stage == nil || !strings.Contains(string(stage.GetData()), "0 kcat/B completed") {
		t.Fatalf("Stage search attribute %v", stage)
	}

	// Logs: JSON lines naming the job, method and step.
	wantLog(t, s.logs["worker"], map[string]string{"job_id": job, "method": "B", "step": "track"})
	wantLog(t, s.logs["worker"], map[string]string{"job_id": job, "method": "B", "step": "predict"})
	wantLog(t, s.logs["gpu-worker"], map[string]string{"method": "B", "step": "prot_t5_mean"})
}

func wantMetrics(t *testing.T, url string, lines ...string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("scrape %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	body := string(b)
	for _, l := range lines {
		if !strings.Contains(body, l) {
			// The series with the name, for the reader of the failure.
			name, _, _ := strings.Cut(l, "{")
			var have []string
			for _, bl := range strings.Split(body, "\n") {
				if strings.HasPrefix(bl, name) {
					have = append(have, bl)
				}
			}
			t.Errorf("%s lacks %s; it has:\n%s", url, l, strings.Join(have, "\n"))
		}
	}
}

// wantLog finds a JSON log line holding every field of want.
func wantLog(t *testing.T, path string, want map[string]string) {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var rec map[string]any
		if json.Unmarshal(sc.Bytes(), &rec) != nil {
			continue
		}
		ok := true
		for k, v := range want {
			if s, _ := rec[k].(string); s != v {
				ok = false
				break
			}
		}
		if ok {
			return
		}
	}
	t.Errorf("no log line in %s with %v", path, want)
}
