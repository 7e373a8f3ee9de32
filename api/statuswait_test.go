package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"gorm.io/gorm"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// getStatus reads a status over real HTTP with the given headers.
func getStatus(t *testing.T, base, path, key string, header ...string) (*http.Response, []byte, time.Duration) {
	t.Helper()
	req, err := http.NewRequest("GET", base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	start := time.Now()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var b strings.Builder
	buf := make([]byte, 4096)
	for {
		n, err := resp.Body.Read(buf)
		b.Write(buf[:n])
		if err != nil {
			break
		}
	}
	return resp, []byte(b.String()), time.Since(start)
}

func TestStatusETagAndNotModified(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "203.0.113.60"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
		wantStatus(t, r, 200)
		tag := r.Header().Get("ETag")
		if !strings.HasPrefix(tag, `W/"`) || r.Header().Get("Cache-Control") != "private, no-cache" {
			t.Fatalf("ETag %q, Cache-Control %q", tag, r.Header().Get("Cache-Control"))
		}
		// The clock moves, the state does not: same tag, and 304 for it.
		h.clock.Set(t0.Add(30 * time.Second))
		r = h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil, "If-None-Match", tag)
		if r.Code != 304 || r.Body.Len() != 0 || r.Header().Get("ETag") != tag {
			t.Fatalf("If-None-Match: %d %q tag %q", r.Code, r.Body, r.Header().Get("ETag"))
		}
		// A list, the strong form and * match too; another tag does not.
		for _, inm := range []string{`"x", ` + tag, strings.TrimPrefix(tag, "W/"), "*"} {
			if r := h.do("GET", "/api/v1/status/"+id, ip, key, nil, "If-None-Match", inm); r.Code != 304 {
				t.Fatalf("If-None-Match %s: %d", inm, r.Code)
			}
		}
		if r := h.do("GET", "/api/v1/status/"+id, ip, key, nil, "If-None-Match", `W/"other"`); r.Code != 200 {
			t.Fatalf("another tag: %d", r.Code)
		}
		// A write changes the state: a full answer with a new tag.
		if err := st.UpdateJob(context.Background(), id, map[string]any{"status": store.JobProcessing, "started_at": t0.Add(10 * time.Second)}); err != nil {
			t.Fatal(err)
		}
		r = h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil, "If-None-Match", tag)
		wantStatus(t, r, 200)
		if nt := r.Header().Get("ETag"); nt == tag || r.json(t)["status"] != "Processing" {
			t.Fatalf("after a change: tag %q (was %q), %s", nt, tag, r.Body)
		}
		// Another key's job is 404 from memory too.
		other := h.newKey("203.0.113.61")
		if r := h.do("GET", "/api/v1/status/"+id+"/", "203.0.113.61", other, nil, "If-None-Match", tag); r.Code != 404 {
			t.Fatalf("another key: %d", r.Code)
		}
	})
}

func TestStatusLongPoll(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) {
			c.StatusWaitMax = 2 * time.Second
			c.StatusCacheTTL = 300 * time.Millisecond
		})
		srv := httptest.NewServer(h.srv)
		defer srv.Close()
		const ip = "203.0.113.62"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		path := "/api/v1/status/" + id + "/"
		resp, body, _ := getStatus(t, srv.URL, path, key)
		tag := resp.Header.Get("ETag")
		if resp.StatusCode != 200 || tag == "" || !strings.Contains(string(body), `"status":"Pending"`) {
			t.Fatalf("first read: %d %q %s", resp.StatusCode, tag, body)
		}

		// Without If-None-Match, waitSeconds answers at once.
		if resp, _, took := getStatus(t, srv.URL, path+"?waitSeconds=5", key); resp.StatusCode != 200 || took > time.Second {
			t.Fatalf("waitSeconds alone: %d after %v", resp.StatusCode, took)
		}
		// Nothing changes: 304 after N seconds.
		resp, body, took := getStatus(t, srv.URL, path+"?waitSeconds=1", key, "If-None-Match", tag)
		if resp.StatusCode != 304 || len(body) != 0 || took < time.Second || took > 3*time.Second {
			t.Fatalf("no change: %d %q after %v", resp.StatusCode, body, took)
		}
		// N is capped (KINFLOW_STATUS_WAIT_MAX_SECONDS, 2 s here).
		resp, _, took = getStatus(t, srv.URL, path+"?waitSeconds=3600", key, "If-None-Match", tag)
		if resp.StatusCode != 304 || took < 2*time.Second || took > 4*time.Second {
			t.Fatalf("capped wait: %d after %v", resp.StatusCode, took)
		}
		// Held until the state changes: a write of this process wakes it.
		go func() {
			time.Sleep(400 * time.Millisecond)
			_ = st.UpdateJob(context.Background(), id, map[string]any{"status": store.JobProcessing, "started_at": t0})
		}()
		h.cfg.StatusWaitMax = 20 * time.Second
		resp, body, took = getStatus(t, srv.URL, path+"?waitSeconds=20", key, "If-None-Match", tag)
		if resp.StatusCode != 200 || took < 350*time.Millisecond || took > 3*time.Second || !strings.Contains(string(body), `"status":"Processing"`) {
			t.Fatalf("change: %d after %v: %s", resp.StatusCode, took, body)
		}
		tag2 := resp.Header.Get("ETag")
		if tag2 == tag {
			t.Fatal("same tag after a change")
		}
		// A change written by another store on the database (as by a
		// separate worker process), which this one's callbacks do not see,
		// is noticed within the cache's TTL.
		other, err := st.OpenAnother(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		defer other.Close()
		if st.SeesAllWrites() {
			t.Fatal("another store is open: this one still counts itself alone")
		}
		go func() {
			time.Sleep(300 * time.Millisecond)
			_ = other.UpdateJob(context.Background(), id, map[string]any{"molecules_processed": 2})
		}()
		resp, body, took = getStatus(t, srv.URL, path+"?waitSeconds=20", key, "If-None-Match", tag2)
		if resp.StatusCode != 200 || took > 3*time.Second || !strings.Contains(string(body), `"moleculesProcessed":2`) {
			t.Fatalf("change by another process: %d after %v: %s", resp.StatusCode, took, body)
		}
		// A finished job is not held: its state cannot change.
		if _, err := st.FinishJob(context.Background(), id, store.JobCompleted, "", store.Refund{}, true, "", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		resp, _, _ = getStatus(t, srv.URL, path, key)
		resp, _, took = getStatus(t, srv.URL, path+"?waitSeconds=20", key, "If-None-Match", resp.Header.Get("ETag"))
		if resp.StatusCode != 304 || took > time.Second {
			t.Fatalf("finished job: %d after %v", resp.StatusCode, took)
		}
		// A bad waitSeconds is a 400 with a JSON error.
		r := h.do("GET", path+"?waitSeconds=soon", ip, key, nil)
		wantStatus(t, r, 400)
	})
}

func TestStatusServedFromMemory(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.StatusCacheTTL = time.Minute })
		const ip = "203.0.113.63"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		if err := st.UpdateJob(context.Background(), id, map[string]any{"status": store.JobProcessing, "started_at": t0}); err != nil {
			t.Fatal(err)
		}
		// Count the queries of the job's tables (not the key lookup).
		var reads atomic.Int64
		if err := st.DB.Callback().Query().After("gorm:query").Register("test:count_job_reads", func(tx *gorm.DB) {
			if _, ok := jobTables[tx.Statement.Table]; ok {
				reads.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		defer st.DB.Callback().Query().Remove("test:count_job_reads")
		for i := range 50 {
			h.clock.Set(t0.Add(time.Duration(i) * time.Second))
			r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
			wantStatus(t, r, 200)
			if got := r.json(t)["elapsedSeconds"]; got != float64(i) {
				t.Fatalf("read %d: elapsedSeconds %v", i, got)
			}
		}
		if n := reads.Load(); n == 0 || n > 3 {
			t.Fatalf("50 reads of an unchanged job made %d job queries, want one load (1–3)", n)
		}
		reads.Store(0)
		if err := st.UpdateStage(context.Background(), id, 0, map[string]any{"status": "running"}); err != nil {
			t.Fatal(err)
		}
		r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
		if reads.Load() == 0 || r.json(t)["progressStages"].([]any)[0].(map[string]any)["status"] != "running" {
			t.Fatalf("after a change: %d reads, %s", reads.Load(), r.Body)
		}
	})
}

// jobTables lists the tables a status is read from (for counting).
var jobTables = map[string]bool{"jobs": true, "job_stages": true, "job_events": true}

// listeningServer serves h over HTTP once its status listener runs and the
// store hears of every write (SQLite alone on its file; Postgres with its
// listener connected); both stop with the test.
func listeningServer(t *testing.T, h *harness, st *store.Store) *httptest.Server {
	t.Helper()
	go h.srv.RunStatusListener(t.Context())
	for deadline := time.Now().Add(10 * time.Second); !st.SeesAllWrites(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the store does not hear of every write")
		}
	}
	srv := httptest.NewServer(h.srv)
	t.Cleanup(srv.Close)
	return srv
}

// TestStatusWatchersReadOnlyWhatMoves: while the store hears of every write
// (SQLite alone on its file; Postgres with its listener), a job that waits
// unchanged is not read again at each time-to-live, and a Pending job's
// watcher reads only its queue position, which other jobs move.
func TestStatusWatchersReadOnlyWhatMoves(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) {
			c.StatusWaitMax = 5 * time.Second
			c.StatusCacheTTL = 200 * time.Millisecond
		})
		ctx := t.Context()
		srv := listeningServer(t, h, st)
		const ip = "203.0.113.64"
		key := h.newKey(ip)
		first := h.submitted(ip, key)
		second := h.submitted(ip, key)
		var reads sync.Map // table → *atomic.Int64
		count := func(table string) int64 {
			v, _ := reads.LoadOrStore(table, new(atomic.Int64))
			return v.(*atomic.Int64).Load()
		}
		if err := st.DB.Callback().Query().After("gorm:query").Register("test:count_job_reads", func(tx *gorm.DB) {
			v, _ := reads.LoadOrStore(tx.Statement.Table, new(atomic.Int64))
			v.(*atomic.Int64).Add(1)
		}); err != nil {
			t.Fatal(err)
		}
		defer st.DB.Callback().Query().Remove("test:count_job_reads")

		// A Processing job held unchanged for 1.5 s (7 time-to-lives).
		if err := st.UpdateJob(ctx, first, map[string]any{"status": store.JobProcessing, "started_at": t0}); err != nil {
			t.Fatal(err)
		}
		// On Postgres the trigger's notice of that write follows it: let it
		// come (and its re-read pass) before counting.
		time.Sleep(300 * time.Millisecond)
		path := "/api/v1/status/" + first + "/"
		resp, _, _ := getStatus(t, srv.URL, path, key)
		time.Sleep(100 * time.Millisecond)
		stagesBefore := count("job_stages")
		resp, _, took := getStatus(t, srv.URL, path+"?waitSeconds=1.5", key, "If-None-Match", resp.Header.Get("ETag"))
		if resp.StatusCode != 304 || took < 1400*time.Millisecond {
			t.Fatalf("unchanged job: %d after %v", resp.StatusCode, took)
		}
		if n := count("job_stages") - stagesBefore; n != 0 {
			t.Fatalf("an unchanged job was read %d times while it waited", n)
		}

		// The second job is Pending behind a third that goes first.
		third := h.submitted(ip, key)
		if err := st.UpdateJob(ctx, third, map[string]any{"status": store.JobPending, "submitted_at": t0.Add(-time.Hour)}); err != nil {
			t.Fatal(err)
		}
		path = "/api/v1/status/" + second + "/"
		resp, body, _ := getStatus(t, srv.URL, path, key)
		if !strings.Contains(string(body), `"queuePosition":2`) {
			t.Fatalf("second job: %s", body)
		}
		stagesBefore, jobsBefore := count("job_stages"), count("jobs")
		go func() {
			time.Sleep(300 * time.Millisecond)
			_ = st.UpdateJob(context.Background(), third, map[string]any{"status": store.JobProcessing, "started_at": t0})
		}()
		resp, body, took = getStatus(t, srv.URL, path+"?waitSeconds=5", key, "If-None-Match", resp.Header.Get("ETag"))
		if resp.StatusCode != 200 || took > 2*time.Second || !strings.Contains(string(body), `"queuePosition":1`) {
			t.Fatalf("queue position: %d after %v: %s", resp.StatusCode, took, body)
		}
		if n := count("job_stages") - stagesBefore; n != 0 {
			t.Fatalf("the Pending job's watcher read its stages %d times; only its queue position moved", n)
		}
		if n := count("jobs") - jobsBefore; n == 0 || n > 4 {
			t.Fatalf("%d reads of the jobs table for one moved queue position", n)
		}
	})
}

// TestQueueMoveReadOnceForEveryWaitingJob: when the queue moves, the
// watchers of many waiting Pending jobs learn their new positions from one
// shared list of the Pending jobs, not a count each (a count each once cost
// 13 queries per job in the topology's burst), and every waiter sees its own
// position.
func TestQueueMoveReadOnceForEveryWaitingJob(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) {
			c.StatusWaitMax = 10 * time.Second
			c.StatusCacheTTL = 200 * time.Millisecond
			c.StatusReadsPerSecond = 1000
		})
		ctx := t.Context()
		srv := listeningServer(t, h, st)
		const ip = "203.0.113.66"
		key := h.newKey(ip)
		const n = 16
		ids := make([]string, n)
		for i := range ids {
			h.clock.Set(t0.Add(time.Duration(i) * time.Second))
			ids[i] = h.submitted(ip, key)
		}
		etags := make([]string, n)
		for i, id := range ids {
			resp, body, _ := getStatus(t, srv.URL, "/api/v1/status/"+id+"/", key)
			if want := fmt.Sprintf(`"queuePosition":%d,`, i+1); !strings.Contains(string(body), want) {
				t.Fatalf("job %d: want %s in %s", i, want, body)
			}
			etags[i] = resp.Header.Get("ETag")
		}
		// Let the submits' notices and their re-reads pass.
		time.Sleep(400 * time.Millisecond)
		var jobReads atomic.Int64
		if err := st.DB.Callback().Query().After("gorm:query").Register("test:count_queue_reads", func(tx *gorm.DB) {
			if tx.Statement.Table == "jobs" {
				jobReads.Add(1)
			}
		}); err != nil {
			t.Fatal(err)
		}
		defer st.DB.Callback().Query().Remove("test:count_queue_reads")
		got := make([]string, n)
		var wg sync.WaitGroup
		for i := 1; i < n; i++ {
			wg.Go(func() {
				_, body, _ := getStatus(t, srv.URL, "/api/v1/status/"+ids[i]+"/?waitSeconds=8", key, "If-None-Match", etags[i])
				got[i] = string(body)
			})
		}
		time.Sleep(300 * time.Millisecond) // every waiter held
		if err := st.UpdateJob(ctx, ids[0], map[string]any{"status": store.JobProcessing, "started_at": t0}); err != nil {
			t.Fatal(err)
		}
		wg.Wait()
		for i := 1; i < n; i++ {
			if want := fmt.Sprintf(`"queuePosition":%d,`, i); !strings.Contains(got[i], want) {
				t.Fatalf("job %d: want %s in %s", i, want, got[i])
			}
		}
		// One list read per interval answers all 15 (a count each before).
		if r := jobReads.Load(); r > 6 {
			t.Fatalf("%d reads of the jobs table for one move of %d waiting jobs", r, n-1)
		}
		t.Logf("%d reads of the jobs table for one move of %d waiting jobs", jobReads.Load(), n-1)
	})
}

func TestStatusReadsRateLimited(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.StatusReadsPerSecond = 2 })
		const ip = "203.0.113.64"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		// A burst of twice the rate passes, the next read is refused.
		for i := range 4 {
			wantStatus(t, h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil), 200)
			_ = i
		}
		r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
		wantStatus(t, r, 429)
		if ra := r.Header().Get("Retry-After"); ra != "1" || !strings.Contains(r.json(t)["error"].(string), "waitSeconds") {
			t.Fatalf("Retry-After %q: %s", ra, r.Body)
		}
		// Another key is not affected.
		other := h.newKey("203.0.113.65")
		if r := h.do("GET", "/api/v1/status/"+id+"/", "203.0.113.65", other, nil); r.Code != 404 {
			t.Fatalf("another key: %d", r.Code)
		}
		// Waiting reads have a bucket of their own: the same key's long poll
		// still gets through while its plain reads are refused, and is
		// refused in turn past its own burst.
		for i := range 4 {
			hdr := []string{"If-None-Match", `W/"none"`}
			if i == 0 {
				hdr = nil // a wait's first read has no ETag yet
			}
			r := h.do("GET", "/api/v1/status/"+id+"/?waitSeconds=1", ip, key, nil, hdr...)
			if r.Code == 429 {
				t.Fatalf("long poll %d refused beside the plain reads' limit", i)
			}
		}
		// A second first read of the job at once waits for nothing: a plain
		// read, refused with them.
		if r := h.do("GET", "/api/v1/status/"+id+"/?waitSeconds=1", ip, key, nil); r.Code != 429 {
			t.Fatalf("a repeated read with waitSeconds and no ETag: %d, want the plain reads' 429", r.Code)
		}
		if r := h.do("GET", "/api/v1/status/"+id+"/?waitSeconds=1", ip, key, nil, "If-None-Match", `W/"none"`); r.Code != 429 {
			t.Fatalf("long poll past its own burst: %d", r.Code)
		}
		if r := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil); r.Code != 429 {
			t.Fatalf("plain read: %d", r.Code)
		}
		// The event stream shares the waiting reads' bucket.
		if r := h.do("GET", "/api/v1/status/"+id+"/events", ip, key, nil); r.Code != 429 {
			t.Fatalf("events: %d", r.Code)
		}
		// Without a key: still the authentication's 401.
		if r := h.do("GET", "/api/v1/status/"+id+"/", ip, "", nil); r.Code != 401 {
			t.Fatalf("no key: %d", r.Code)
		}
	})
}

// sseEvent is one parsed Server-Sent Event.
type sseEvent struct {
	id, event, data string
}

// readEvents parses a stream into a channel of events, closed at its end.
func readEvents(body *bufio.Reader) <-chan sseEvent {
	out := make(chan sseEvent, 16)
	go func() {
		defer close(out)
		var ev sseEvent
		for {
			line, err := body.ReadString('\n')
			if err != nil {
				return
			}
			line = strings.TrimRight(line, "\n")
			switch {
			case line == "":
				if ev.event != "" || ev.data != "" {
					out <- ev
				}
				ev = sseEvent{}
			case strings.HasPrefix(line, "id: "):
				ev.id = line[4:]
			case strings.HasPrefix(line, "event: "):
				ev.event = line[7:]
			case strings.HasPrefix(line, "data: "):
				ev.data = line[6:]
			}
		}
	}()
	return out
}

func nextEvent(t *testing.T, ch <-chan sseEvent) sseEvent {
	t.Helper()
	select {
	case ev, ok := <-ch:
		if !ok {
			t.Fatal("stream ended")
		}
		return ev
	case <-time.After(5 * time.Second):
		t.Fatal("no event within 5 s")
	}
	return sseEvent{}
}

func openStream(t *testing.T, ctx context.Context, url, key, lastID string) *http.Response {
	t.Helper()
	req, _ := http.NewRequestWithContext(ctx, "GET", url, nil)
	req.Header.Set("Authorization", "Bearer "+key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	return resp
}

func TestStatusEventStream(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		srv := httptest.NewServer(h.srv)
		defer srv.Close()
		const ip = "203.0.113.66"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		url := srv.URL + "/api/v1/status/" + id + "/events"
		ctx, cancel := context.WithCancel(context.Background())
		resp := openStream(t, ctx, url, key, "")
		if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
			t.Fatalf("stream: %d %q", resp.StatusCode, resp.Header.Get("Content-Type"))
		}
		events := readEvents(bufio.NewReader(resp.Body))
		statusOf := func(ev sseEvent) map[string]any {
			t.Helper()
			var m map[string]any
			if ev.event != "status" || json.Unmarshal([]byte(ev.data), &m) != nil || ev.id == "" {
				t.Fatalf("event %+v", ev)
			}
			return m
		}
		first := nextEvent(t, events)
		if statusOf(first)["status"] != "Pending" {
			t.Fatalf("first event %+v", first)
		}
		ctxb := context.Background()
		if err := st.UpdateJob(ctxb, id, map[string]any{"status": store.JobProcessing, "started_at": t0}); err != nil {
			t.Fatal(err)
		}
		second := nextEvent(t, events)
		if statusOf(second)["status"] != "Processing" || second.id == first.id {
			t.Fatalf("second event %+v", second)
		}
		// The client drops; a change happens meanwhile; it reconnects with
		// the last id it saw and gets the change, not the state it had.
		cancel()
		resp.Body.Close()
		if err := st.UpdateStage(ctxb, id, 0, map[string]any{"status": "running"}); err != nil {
			t.Fatal(err)
		}
		resp = openStream(t, ctxb, url, key, second.id)
		events = readEvents(bufio.NewReader(resp.Body))
		third := nextEvent(t, events)
		if m := statusOf(third); m["status"] != "Processing" || m["progressStages"].([]any)[0].(map[string]any)["status"] != "running" {
			t.Fatalf("after reconnect %+v", third)
		}
		if _, err := st.FinishJob(ctxb, id, store.JobCompleted, "", store.Refund{}, true, "", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		final := nextEvent(t, events)
		if statusOf(final)["status"] != "Completed" {
			t.Fatalf("final %+v", final)
		}
		if end := nextEvent(t, events); end.event != "end" || end.data != `{"status":"Completed"}` {
			t.Fatalf("end %+v", end)
		}
		select {
		case ev, ok := <-events:
			if ok {
				t.Fatalf("event after end: %+v", ev)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("the stream did not end")
		}
		resp.Body.Close()
		// Reconnecting with the final id: 204, EventSource stops.
		resp = openStream(t, ctxb, url, key, final.id)
		resp.Body.Close()
		if resp.StatusCode != 204 {
			t.Fatalf("reconnect after the end: %d", resp.StatusCode)
		}
		// Without an id: the final state and the end at once.
		resp = openStream(t, ctxb, url, key, "")
		events = readEvents(bufio.NewReader(resp.Body))
		if ev := nextEvent(t, events); statusOf(ev)["status"] != "Completed" {
			t.Fatalf("finished job's stream %+v", ev)
		}
		resp.Body.Close()
	})
}

// TestStatusEventStreamOutlivesWriteTimeout: the API's server has a write
// timeout (5 min in cmd/kinflow); a stream lifts it at each write, so an
// event after the timeout still arrives.
func TestStatusEventStreamOutlivesWriteTimeout(t *testing.T) {
	st := testenv.OpenStore(t, store.SQLite)
	h := newHarness(t, st)
	srv := httptest.NewUnstartedServer(h.srv)
	srv.Config.WriteTimeout = 500 * time.Millisecond
	srv.Start()
	defer srv.Close()
	const ip = "203.0.113.67"
	key := h.newKey(ip)
	id := h.submitted(ip, key)
	resp := openStream(t, context.Background(), srv.URL+"/api/v1/status/"+id+"/events", key, "")
	defer resp.Body.Close()
	events := readEvents(bufio.NewReader(resp.Body))
	if ev := nextEvent(t, events); ev.event != "status" {
		t.Fatalf("first %+v", ev)
	}
	time.Sleep(1200 * time.Millisecond)
	if err := st.UpdateJob(context.Background(), id, map[string]any{"status": store.JobProcessing, "started_at": t0}); err != nil {
		t.Fatal(err)
	}
	if ev := nextEvent(t, events); ev.event != "status" || !strings.Contains(ev.data, `"status":"Processing"`) {
		t.Fatalf("after the write timeout %+v", ev)
	}
}
