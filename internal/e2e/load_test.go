package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"net/http"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/loadgen"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/workflows"
)

// Load tests: many users at once is the normal case for a public service,
// which must never stop under load. Each test starts the embedded default
// (`kinflow dev`: its own Temporal dev server, SQLite, synthetic backends) on
// loopback ports and sends bursts of jobs through the public API. They assert
// completion and exact charges, never speed (that is `make bench-load`);
// every burst is bounded by its count and by a timeout far above what it
// needs.

// startDev starts an embedded-default deployment with env on top of the
// defaults and returns it with an API key.
func startDev(t *testing.T, env ...string) (*loadgen.Dev, string) {
	t.Helper()
	cli := testenv.TemporalPath()
	if _, err := os.Stat(cli); err != nil {
		testenv.Unavailable(t, "the Temporal CLI is not at %s (make bin/temporal)", cli)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	d, err := loadgen.StartDev(ctx, loadgen.DevOptions{Kinflow: kinflowBin, TemporalCLI: cli, Env: env})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("---- kinflow dev log (tail) ----\n%s", d.Log("dev", 8000))
		}
		d.Stop()
	})
	key, err := loadgen.GenerateKey(ctx, d.BaseURL)
	if err != nil {
		t.Fatal(err)
	}
	return d, key
}

// quotaUsed is the key's rows charged today.
func quotaUsed(t *testing.T, base, key string) int {
	t.Helper()
	req, _ := http.NewRequest("GET", base+"/api/v1/quota/", nil)
	req.Header.Set("Authorization", "Bearer "+key)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var q struct {
		Used int `json:"used"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&q); err != nil || resp.StatusCode != 200 {
		t.Fatalf("quota: %d %v", resp.StatusCode, err)
	}
	return q.Used
}

// burst runs o against d and requires every job Completed.
func burst(t *testing.T, base, key string, o loadgen.Options) *loadgen.Result {
	t.Helper()
	o.BaseURL, o.Key = base, key
	if o.Timeout == 0 {
		o.Timeout = 8 * time.Minute
	}
	if o.Poll == 0 {
		o.Poll = 250 * time.Millisecond
	}
	r, err := loadgen.Run(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Log(r.Summary())
	if err := r.Check(); err != nil {
		t.Fatal(err)
	}
	return r
}

// TestLoadBurstsOnEmbeddedDefault: 200 visitors submit a 3-row job at the
// same moment; then one 10,000-row job runs while 100 small ones arrive.
// Every job completes and the quota holds exactly the rows submitted (no row
// lost or charged twice).
func TestLoadBurstsOnEmbeddedDefault(t *testing.T) {
	d, key := startDev(t)
	burst(t, d.BaseURL, key, loadgen.Options{Jobs: 200, Rows: 3})
	if got := quotaUsed(t, d.BaseURL, key); got != 600 {
		t.Fatalf("quota used %d after 200 jobs of 3 rows, want 600", got)
	}
	r := burst(t, d.BaseURL, key, loadgen.Options{Jobs: 100, Rows: 3, BigRows: 10000, Timeout: 12 * time.Minute})
	if r.Big == nil || r.Big.Status != "Completed" {
		t.Fatalf("the large job: %+v", r.Big)
	}
	if got := quotaUsed(t, d.BaseURL, key); got != 600+300+10000 {
		t.Fatalf("quota used %d, want %d", got, 600+300+10000)
	}
}

// TestLoadBurstEveryJobTracked is the shape that once stopped the service for
// good: every job runs a progress tracker and regular activities, and the CPU
// worker has only two activity slots. Trackers now live on their own queue,
// so 100 concurrent jobs all complete (17 s here). Built with the tracker
// back in the CPU pool and GPUHealth a regular activity (the shape before the
// fix), this test hangs until its timeout: two trackers fill both slots and
// their jobs wait for a slot for ever.
func TestLoadBurstEveryJobTracked(t *testing.T) {
	d, key := startDev(t,
		"KINFLOW_TRACK_MIN_FILES=1",
		"KINFLOW_CPU_ACTIVITY_SLOTS=2",
		"KINFLOW_SMALL_JOB_ROWS=0",
		"KINFLOW_GPU_SMALL_STEP_SEQS=0",
		// Slow embeddings keep every tracker alive while the others run.
		"GPU_EMBED_SYNTHETIC_DELAY_MS=5",
	)
	burst(t, d.BaseURL, key, loadgen.Options{Jobs: 100, Rows: 3})
	if got := quotaUsed(t, d.BaseURL, key); got != 300 {
		t.Fatalf("quota used %d after 100 jobs of 3 rows, want 300", got)
	}
}

// TestLoadBurstOnProductionTopology: the same burst of 200 concurrent 3-row
// jobs on the production topology (Temporal server on Postgres, two api,
// two worker and two gpu-worker processes), half through each api. Every job
// completes and the quota holds exactly the rows submitted.
func TestLoadBurstOnProductionTopology(t *testing.T) {
	tp := startTopology(t, TopologyOptions{})
	results := make([]*loadgen.Result, len(tp.APIURLs))
	errs := make([]error, len(tp.APIURLs))
	done := make(chan int, len(tp.APIURLs))
	for i, base := range tp.APIURLs {
		go func() {
			results[i], errs[i] = loadgen.Run(context.Background(), loadgen.Options{
				BaseURL: base, Key: tp.key, Jobs: 100, Rows: 3, Poll: 250 * time.Millisecond, Timeout: 10 * time.Minute,
			})
			done <- i
		}()
	}
	for range tp.APIURLs {
		<-done
	}
	for i, r := range results {
		if errs[i] != nil {
			t.Fatalf("api-%d: %v", i+1, errs[i])
		}
		t.Logf("api-%d: %s", i+1, r.Summary())
		if err := r.Check(); err != nil {
			t.Fatalf("api-%d: %v", i+1, err)
		}
		// Where the half's jobs waited (loadgen.WaitsOf).
		var ws []loadgen.Waits
		for _, j := range r.Jobs {
			evs, err := tp.events(workflows.PredictionWorkflowID(j.ID))
			if err != nil {
				t.Fatalf("api-%d: history of job %s: %v", i+1, j.ID, err)
			}
			w := loadgen.WaitsOf(evs)
			w.Submit = j.Submit
			ws = append(ws, w)
		}
		t.Logf("api-%d: %s", i+1, loadgen.SummarizeWaits(ws))
		// The slowest job, explained: its workflow's events and their times
		// (the client saw it end at its latency after its submit).
		slow := slices.MaxFunc(r.Jobs, func(a, b loadgen.Job) int { return cmp.Compare(a.Latency, b.Latency) })
		tl := tp.timeline(workflows.PredictionWorkflowID(slow.ID))
		t.Logf("api-%d: slowest job %s, seen ended %.2f s after its submit:\n%s", i+1, slow.ID, slow.Latency.Seconds(), tl)
		if strings.Contains(tl, "TimedOut") || strings.Contains(tl, "Failed") {
			t.Logf("the processes' warnings and errors:\n%s\nthe Temporal server's log on the workflow:\n%s\nthe Temporal server's log (end):\n%s",
				tp.problems(40), tp.Server.LogLines(slow.ID, 20), tp.Server.LogTail(4000))
		}
	}
	if got := quotaUsed(t, tp.APIURLs[0], tp.key); got != 600 {
		t.Fatalf("quota used %d after 200 jobs of 3 rows, want 600", got)
	}
}

// TestReplayManyUsersShapes runs the workflow shapes of many users at once on
// a real stack and replays their histories (recorded into workflows/testdata
// with KINFLOW_RECORD_HISTORIES=1): a small job (Predict and annotations
// local, GPU health local, its step on the GPU small lane run inside its own
// workflow, its Stage upserted only where it waits: the changes
// "i35-quiet-stages" and "small-job-inline-gpu"; the shapes before them are
// prediction_small_job_local, prediction_small_job_quiet_stages and, before
// revision 1, prediction_small_job_inline_gpu) and a larger one (a tracker on
// its own queue, the step on the main GPU queue in an EmbedJob child; before
// revision 1, prediction_tracker_own_queue and embedjob_small_or_main_lane).
// Started at revision 1, neither records a version marker or an upsert of
// TemporalChangeVersion.
func TestReplayManyUsersShapes(t *testing.T) {
	s := newStack(t, nil, nil)
	small := s.submit(csvRows(randSeed(), 3, 150), []string{"kcat"}, map[string]string{"kcat": "B"})
	large := s.submit(csvRows(randSeed(), 60, 150), []string{"kcat"}, map[string]string{"kcat": "B"})
	for _, j := range []string{small, large} {
		if st := s.waitDone(j, 3*time.Minute); st.Status != "Completed" {
			t.Fatalf("job %s: %s %s", j, st.Status, st.Error)
		}
	}
	if got := s.childWorkflows("prediction:" + small); len(got) != 0 {
		t.Fatalf("the small job started child workflows %v; its step runs inside it", got)
	}
	for _, j := range []string{small, large} {
		evs, err := s.events("prediction:" + j)
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs {
			if m := ev.GetMarkerRecordedEventAttributes(); m != nil && m.GetMarkerName() == "Version" {
				t.Errorf("job %s: version marker at event %d; a run at revision 1 asks no GetVersion", j, ev.EventId)
			}
			if u := ev.GetUpsertWorkflowSearchAttributesEventAttributes(); u != nil {
				for k := range u.GetSearchAttributes().GetIndexedFields() {
					if k == "TemporalChangeVersion" {
						t.Errorf("job %s: upsert of %s at event %d", j, k, ev.EventId)
					}
				}
			}
		}
	}
	s.replay("prediction:"+small, "prediction_small_job_rev1")
	s.replay("prediction:"+large, "prediction_large_job_rev1")
	s.replayEmbedJobs("embedjob_rev1")
}
