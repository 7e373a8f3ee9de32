package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	enumspb "go.temporal.io/api/enums/v1"
	historypb "go.temporal.io/api/history/v1"
	"google.golang.org/protobuf/proto"

	"github.com/kinflow/kinflow/internal/loadgen"
	"github.com/kinflow/kinflow/internal/store"
)

// BenchmarkCachedJobs measures, on the full stack (api, worker, gpu-worker
// processes, dev server, Postgres), jobs whose embeddings are all cached:
//   - overhead: submit → Completed (server timestamps) minus the Predict
//     activity's own run time, over 50 jobs run one after another;
//   - throughput: 100 jobs submitted at once, jobs per second until the last
//     one completes.
//
// Run with -benchtime 1x: one iteration is the whole measurement.
func BenchmarkCachedJobs(b *testing.B) {
	s := newStack(b, nil, nil)
	input := csvRows(7, 5, 300)
	sel := map[string]string{"kcat": "B"}
	if st := s.waitDone(s.submit(input, []string{"kcat"}, sel), 60*time.Second); st.Status != "Completed" {
		b.Fatalf("warm-up job: %s", st.Error)
	}
	db, err := store.Open(context.Background(), s.env["KINFLOW_DATABASE_URL"])
	if err != nil {
		b.Fatal(err)
	}
	defer db.Close()

	for i := 0; i < b.N; i++ {
		const sequential = 50
		var overheads []time.Duration
		for j := 0; j < sequential; j++ {
			id := s.submit(input, []string{"kcat"}, sel)
			if st := s.waitDone(id, 60*time.Second); st.Status != "Completed" {
				b.Fatalf("job %s: %s", id, st.Error)
			}
			overheads = append(overheads, s.overhead(db, id))
		}
		sort.Slice(overheads, func(a, c int) bool { return overheads[a] < overheads[c] })
		b.ReportMetric(ms(overheads[len(overheads)/2]), "overhead-p50-ms")
		b.ReportMetric(ms(overheads[len(overheads)*95/100]), "overhead-p95-ms")

		const burst = 100
		start := time.Now()
		ids := make([]string, burst)
		var wg sync.WaitGroup
		for j := range ids {
			wg.Add(1)
			go func() {
				defer wg.Done()
				ids[j] = s.submit(input, []string{"kcat"}, sel)
			}()
		}
		wg.Wait()
		for _, id := range ids {
			if st := s.waitDone(id, 5*time.Minute); st.Status != "Completed" {
				b.Fatalf("job %s: %s", id, st.Error)
			}
		}
		var last time.Time
		for _, id := range ids {
			j, err := db.Job(context.Background(), id)
			if err != nil {
				b.Fatal(err)
			}
			if j.CompletedAt.After(last) {
				last = *j.CompletedAt
			}
		}
		b.ReportMetric(float64(burst)/last.Sub(start).Seconds(), "jobs/s")
	}
}

// overhead is the job's submit → completion time minus its Predict
// activities' run time, read from the server's own timestamps.
func (s *stack) overhead(db *store.Store, jobID string) time.Duration {
	s.t.Helper()
	j, err := db.Job(context.Background(), jobID)
	if err != nil || j.CompletedAt == nil {
		s.t.Fatalf("job %s: %v", jobID, err)
	}
	total := j.CompletedAt.Sub(j.SubmittedAt)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	iter := s.tc.GetWorkflowHistory(ctx, "prediction:"+jobID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	scheduled := map[int64]string{}
	started := map[int64]time.Time{}
	var engine time.Duration
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			s.t.Fatal(err)
		}
		switch ev.EventType {
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			scheduled[ev.EventId] = ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_STARTED:
			started[ev.GetActivityTaskStartedEventAttributes().GetScheduledEventId()] = ev.EventTime.AsTime()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			sid := ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
			if scheduled[sid] == "Predict" {
				engine += ev.EventTime.AsTime().Sub(started[sid])
			}
		}
	}
	return total - engine
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// BenchmarkColdJob10k runs one method A-H job over 10,000 new sequences on
// the synthetic backends (GPU road) and reports where the time goes, from
// the workflow's history: PrepareInput (parsing, validation), BuildPlan
// (seq-id mapping and planning), the EmbedJob child (artefact writes on the
// GPU host), Predict and Finalize; and the artefact write throughput beside
// the disk's own sequential write speed measured in the same run.
// Run with -benchtime 1x (KINFLOW_BENCH_ROWS overrides the 10,000 rows).
func BenchmarkColdJob10k(b *testing.B) {
	rows := 10000
	if v := os.Getenv("KINFLOW_BENCH_ROWS"); v != "" {
		fmt.Sscan(v, &rows)
	}
	s := newStack(b, map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "7200", "KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "120"}, nil)
	for i := 0; i < b.N; i++ {
		input := csvRows(randSeed(), rows, 400)
		start := time.Now()
		id := s.submit(input, []string{"kcat"}, map[string]string{"kcat": "A-H"})
		submitted := time.Since(start)
		st := s.waitDone(id, 2*time.Hour)
		if st.Status != "Completed" {
			b.Fatalf("job: %s", st.Error)
		}
		total := time.Since(start)
		phases, events, histBytes := s.phases("prediction:" + id)
		var bytes int64
		files := 0
		_ = filepath.Walk(filepath.Join(s.media, "sequence_info"), func(p string, fi os.FileInfo, err error) error {
			if err == nil && !fi.IsDir() && (strings.HasSuffix(p, ".npy") || strings.HasSuffix(p, ".pt") || strings.HasSuffix(p, ".tsv")) {
				bytes += fi.Size()
				files++
			}
			return nil
		})
		b.ReportMetric(total.Seconds(), "total-s")
		b.ReportMetric(submitted.Seconds(), "submit-s")
		for _, name := range []string{"PrepareInput", "BuildPlan", "EmbedJob", "Predict", "Finalize"} {
			b.ReportMetric(phases[name].Seconds(), name+"-s")
		}
		b.ReportMetric(float64(files), "files")
		b.ReportMetric(float64(bytes)/1e6/phases["EmbedJob"].Seconds(), "artefact-MB/s")
		b.ReportMetric(diskWriteMBps(b, s.media), "disk-seq-MB/s")
		b.ReportMetric(float64(files)/phases["EmbedJob"].Seconds(), "artefact-files/s")
		b.ReportMetric(diskCreateFilesPerSec(b, s.media, int(bytes)/max(files, 1)), "disk-create-files/s")
		b.ReportMetric(float64(events), "history-events")
		b.ReportMetric(float64(histBytes)/1e3, "history-kB")
	}
}

// phases sums the durations of each activity type and child workflow of a
// workflow's history; it also returns the history's event count and size.
func (s *stack) phases(workflowID string) (map[string]time.Duration, int, int) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	iter := s.tc.GetWorkflowHistory(ctx, workflowID, "", false, enumspb.HISTORY_EVENT_FILTER_TYPE_ALL_EVENT)
	out := map[string]time.Duration{}
	names := map[int64]string{}
	starts := map[int64]time.Time{}
	n, size := 0, 0
	// A local activity leaves only a marker, written when its workflow task
	// completes; its own completion time (ReplayTime) is in the marker's
	// data. It started when the workflow task started or the previous local
	// activity of the task ended.
	var since time.Time
	for iter.HasNext() {
		ev, err := iter.Next()
		if err != nil {
			s.t.Fatal(err)
		}
		n++
		size += proto.Size(ev)
		switch ev.EventType {
		case enumspb.EVENT_TYPE_WORKFLOW_TASK_STARTED:
			since = ev.EventTime.AsTime()
		case enumspb.EVENT_TYPE_MARKER_RECORDED:
			var md struct {
				ActivityType string
				ReplayTime   time.Time
			}
			if p := ev.GetMarkerRecordedEventAttributes().GetDetails()["data"].GetPayloads(); len(p) > 0 && json.Unmarshal(p[0].Data, &md) == nil && md.ActivityType != "" {
				if md.ReplayTime.After(since) {
					out[md.ActivityType] += md.ReplayTime.Sub(since)
					since = md.ReplayTime
				}
			}
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_SCHEDULED:
			names[ev.EventId] = ev.GetActivityTaskScheduledEventAttributes().GetActivityType().GetName()
			starts[ev.EventId] = ev.EventTime.AsTime()
		case enumspb.EVENT_TYPE_ACTIVITY_TASK_COMPLETED:
			sid := ev.GetActivityTaskCompletedEventAttributes().GetScheduledEventId()
			out[names[sid]] += ev.EventTime.AsTime().Sub(starts[sid])
		case enumspb.EVENT_TYPE_START_CHILD_WORKFLOW_EXECUTION_INITIATED:
			names[ev.EventId] = ev.GetStartChildWorkflowExecutionInitiatedEventAttributes().GetWorkflowType().GetName()
			starts[ev.EventId] = ev.EventTime.AsTime()
		case enumspb.EVENT_TYPE_CHILD_WORKFLOW_EXECUTION_COMPLETED:
			sid := ev.GetChildWorkflowExecutionCompletedEventAttributes().GetInitiatedEventId()
			out[names[sid]] += ev.EventTime.AsTime().Sub(starts[sid])
		}
	}
	return out, n, size
}

// diskWriteMBps writes 512 MiB sequentially into dir, fsynced, and returns MB/s.
func diskWriteMBps(tb testing.TB, dir string) float64 {
	f, err := os.CreateTemp(dir, "disk-bench-*")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.Remove(f.Name())
	defer f.Close()
	buf := make([]byte, 4<<20)
	for i := range buf {
		buf[i] = byte(i * 7)
	}
	start := time.Now()
	const total = 512 << 20
	for w := 0; w < total; w += len(buf) {
		if _, err := f.Write(buf); err != nil {
			tb.Fatal(err)
		}
	}
	if err := f.Sync(); err != nil {
		tb.Fatal(err)
	}
	return float64(total) / 1e6 / time.Since(start).Seconds()
}

// diskCreateFilesPerSec creates 5,000 files of size bytes in one folder of
// dir (create, write, close; no sync) and returns files per second: the file
// system's own floor for a cache of many small files.
func diskCreateFilesPerSec(tb testing.TB, dir string, size int) float64 {
	d, err := os.MkdirTemp(dir, "create-bench-")
	if err != nil {
		tb.Fatal(err)
	}
	defer os.RemoveAll(d)
	data := make([]byte, size)
	const n = 5000
	start := time.Now()
	for i := 0; i < n; i++ {
		if err := os.WriteFile(filepath.Join(d, fmt.Sprintf("f%d.npy", i)), data, 0o644); err != nil {
			tb.Fatal(err)
		}
	}
	return n / time.Since(start).Seconds()
}

// events is a workflow's whole history.
func (s *stack) events(workflowID string) ([]*historypb.HistoryEvent, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return loadgen.History(ctx, s.tc, workflowID)
}

// childIDs are the ids of the child workflows a history starts.
func childIDs(evs []*historypb.HistoryEvent) []string {
	var ids []string
	for _, ev := range evs {
		if a := ev.GetStartChildWorkflowExecutionInitiatedEventAttributes(); a != nil {
			ids = append(ids, a.GetWorkflowId())
		}
	}
	return ids
}

// childWorkflows are the ids of the child workflows a workflow started.
func (s *stack) childWorkflows(workflowID string) []string {
	s.t.Helper()
	evs, err := s.events(workflowID)
	if err != nil {
		s.t.Fatal(err)
	}
	return childIDs(evs)
}

// timeline is a workflow's history as one line per event, each with its
// time since the workflow started, and the same for a child workflow the
// history starts (a straggler's explanation: where did its time go?).
func (s *stack) timeline(workflowID string) string {
	evs, err := s.events(workflowID)
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	var t0 time.Time
	for _, ev := range evs {
		at := ev.EventTime.AsTime()
		if t0.IsZero() {
			t0 = at
			fmt.Fprintf(&b, "%s (started %s)\n", workflowID, at.Format(time.RFC3339Nano))
		}
		fmt.Fprintf(&b, "  %7.3f s  %s", at.Sub(t0).Seconds(), strings.TrimPrefix(ev.EventType.String(), "EVENT_TYPE_"))
		if a := ev.GetWorkflowTaskStartedEventAttributes(); a != nil {
			fmt.Fprintf(&b, " by %s", a.GetIdentity())
		}
		if a := ev.GetActivityTaskStartedEventAttributes(); a != nil {
			fmt.Fprintf(&b, " by %s", a.GetIdentity())
		}
		b.WriteByte('\n')
	}
	for _, c := range childIDs(evs) {
		b.WriteString(s.timeline(c))
	}
	return b.String()
}

// problems are the last n warning and error lines of each process's log.
func (s *stack) problems(n int) string {
	var b strings.Builder
	names := make([]string, 0, len(s.logs))
	for name := range s.logs {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		if p := s.procs[name]; p != nil && p.Process != nil {
			fmt.Fprintf(&b, "  %s is process %d\n", name, p.Process.Pid)
		}
	}
	for _, name := range names {
		data, err := os.ReadFile(s.logs[name])
		if err != nil {
			continue
		}
		var lines []string
		for _, l := range strings.Split(string(data), "\n") {
			if (strings.Contains(l, "WARN") || strings.Contains(l, "ERROR")) && !strings.Contains(l, "similarity.not_configured") {
				lines = append(lines, l)
			}
		}
		if len(lines) > n {
			lines = lines[len(lines)-n:]
		}
		for _, l := range lines {
			fmt.Fprintf(&b, "  %s: %s\n", name, l)
		}
	}
	return b.String()
}
