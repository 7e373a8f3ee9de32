package api

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// heldPoll starts a long poll of path that waits (If-None-Match: tag) and
// returns a channel with its status code once answered.
func heldPoll(ctx context.Context, base, path, key, tag string) <-chan int {
	out := make(chan int, 1)
	go func() {
		req, _ := http.NewRequestWithContext(ctx, "GET", base+path+"?waitSeconds=30", nil)
		req.Header.Set("Authorization", "Bearer "+key)
		req.Header.Set("If-None-Match", tag)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			out <- 0
			return
		}
		resp.Body.Close()
		out <- resp.StatusCode
	}()
	return out
}

// waitOpen waits until the server holds n waits of key id and all in all.
func waitOpen(t *testing.T, w *waits, id int64, n, all int) {
	t.Helper()
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		got, gotAll := w.open(id)
		if got == n && gotAll == all {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("open waits of key %d: %d of %d in all, want %d of %d", id, got, gotAll, n, all)
		}
	}
}

func keyID(t *testing.T, st *store.Store, key string) int64 {
	t.Helper()
	k, err := st.ActiveKeyByHash(context.Background(), store.HashKey(key), store.QuotaDay(t0))
	if err != nil {
		t.Fatal(err)
	}
	return k.ID
}

// TestWaitsBoundedPerKeyAndInAll: event streams and held long polls take
// places of their key (KINFLOW_WAITS_PER_KEY) and of the process
// (KINFLOW_WAITS_MAX); one more is a 429 with Retry-After and a JSON
// error, and a place given back is taken again.
func TestWaitsBoundedPerKeyAndInAll(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.WaitsPerKey, c.WaitsMax = 3, 5 })
		srv := httptest.NewServer(h.srv)
		defer srv.Close()
		const ipA, ipB = "203.0.113.70", "203.0.113.71"
		keyA, keyB := h.newKey(ipA), h.newKey(ipB)
		idA, idB := keyID(t, st, keyA), keyID(t, st, keyB)
		jobA, jobB := h.submitted(ipA, keyA), h.submitted(ipB, keyB)
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var streams []*http.Response
		for range 2 {
			resp := openStream(t, ctx, srv.URL+"/api/v1/status/"+jobA+"/events", keyA, "")
			if resp.StatusCode != 200 {
				t.Fatalf("stream: %d", resp.StatusCode)
			}
			streams = append(streams, resp)
		}
		r := h.do("GET", "/api/v1/status/"+jobA+"/", ipA, keyA, nil)
		tagA := r.Header().Get("ETag")
		poll := heldPoll(ctx, srv.URL, "/api/v1/status/"+jobA+"/", keyA, tagA)
		waitOpen(t, h.srv.waits, idA, 3, 3)

		refused := func(resp *http.Response, what string) {
			t.Helper()
			var body errorBody
			_ = json.NewDecoder(resp.Body).Decode(&body)
			resp.Body.Close()
			if resp.StatusCode != 429 || resp.Header.Get("Retry-After") == "" || !strings.Contains(body.Error, what) {
				t.Fatalf("want 429 with Retry-After naming %q: %d %q %q", what, resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
			}
		}
		// Key A is at its bound: a fourth stream and a fourth long poll
		// are refused; a plain read still answers.
		refused(openStream(t, ctx, srv.URL+"/api/v1/status/"+jobA+"/events", keyA, ""), "at most 3")
		resp, _, _ := getStatus(t, srv.URL, "/api/v1/status/"+jobA+"/?waitSeconds=30", keyA, "If-None-Match", tagA)
		if resp.StatusCode != 429 {
			t.Fatalf("fourth long poll: %d", resp.StatusCode)
		}
		if r := h.do("GET", "/api/v1/status/"+jobA+"/", ipA, keyA, nil); r.Code != 200 {
			t.Fatalf("plain read beside full waits: %d", r.Code)
		}
		// Key B takes the process's last two places, then finds none.
		for range 2 {
			resp := openStream(t, ctx, srv.URL+"/api/v1/status/"+jobB+"/events", keyB, "")
			if resp.StatusCode != 200 {
				t.Fatalf("key B's stream: %d", resp.StatusCode)
			}
			streams = append(streams, resp)
		}
		waitOpen(t, h.srv.waits, idB, 2, 5)
		refused(openStream(t, ctx, srv.URL+"/api/v1/status/"+jobB+"/events", keyB, ""), "as many waiting requests")
		// A stream closed by its client gives its place back.
		streams[0].Body.Close()
		waitOpen(t, h.srv.waits, idA, 2, 4)
		resp = openStream(t, ctx, srv.URL+"/api/v1/status/"+jobB+"/events", keyB, "")
		if resp.StatusCode != 200 {
			t.Fatalf("stream after a place was freed: %d", resp.StatusCode)
		}
		streams = append(streams, resp)
		// The long poll still answers when its job changes.
		if err := st.UpdateJob(context.Background(), jobA, map[string]any{"status": store.JobProcessing, "started_at": t0}); err != nil {
			t.Fatal(err)
		}
		select {
		case code := <-poll:
			if code != 200 {
				t.Fatalf("held long poll answered %d", code)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("held long poll not answered after a change")
		}
		for _, s := range streams {
			s.Body.Close()
		}
		waitOpen(t, h.srv.waits, idA, 0, 0)
	})
}

// TestStreamMaxAge: a stream ends at KINFLOW_STREAM_MAX_SECONDS without
// "end", and the client's reconnect with Last-Event-ID resumes it without
// the state it had.
func TestStreamMaxAge(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.StreamMaxAge = 500 * time.Millisecond })
		srv := httptest.NewServer(h.srv)
		defer srv.Close()
		const ip = "203.0.113.72"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		url := srv.URL + "/api/v1/status/" + id + "/events"
		start := time.Now()
		resp := openStream(t, context.Background(), url, key, "")
		events := readEvents(bufio.NewReader(resp.Body))
		first := nextEvent(t, events)
		if first.event != "status" {
			t.Fatalf("first event %+v", first)
		}
		for ev := range events {
			t.Fatalf("event after the first on an unchanged job: %+v", ev)
		}
		resp.Body.Close()
		if took := time.Since(start); took < 500*time.Millisecond || took > 5*time.Second {
			t.Fatalf("stream ended after %v, want its lifetime (0.5 s)", took)
		}
		if n, all := h.srv.waits.open(keyID(t, st, key)); n != 0 || all != 0 {
			t.Fatalf("ended stream still holds a place: %d/%d", n, all)
		}
		if err := st.UpdateJob(context.Background(), id, map[string]any{"status": store.JobProcessing, "started_at": t0}); err != nil {
			t.Fatal(err)
		}
		resp = openStream(t, context.Background(), url, key, first.id)
		defer resp.Body.Close()
		ev := nextEvent(t, readEvents(bufio.NewReader(resp.Body)))
		if ev.event != "status" || ev.id == first.id || !strings.Contains(ev.data, `"status":"Processing"`) {
			t.Fatalf("after reconnect: %+v", ev)
		}
	})
}

// TestRevokeEndsOpenWaits: a key revoked through this process ends its open
// streams (an "error" event) and held long polls (401) at once; an owner
// blocked elsewhere (the database changed by another process) ends them at
// the next key check.
func TestRevokeEndsOpenWaits(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		h.srv.waits.checkEvery = 200 * time.Millisecond
		srv := httptest.NewServer(h.srv)
		defer srv.Close()
		const ip, other = "203.0.113.73", "203.0.113.74"
		key, otherKey := h.newKey(ip), h.newKey(other)
		id, otherJob := h.submitted(ip, key), h.submitted(other, otherKey)
		ctx := context.Background()
		resp := openStream(t, ctx, srv.URL+"/api/v1/status/"+id+"/events", key, "")
		defer resp.Body.Close()
		events := readEvents(bufio.NewReader(resp.Body))
		nextEvent(t, events)
		otherResp := openStream(t, ctx, srv.URL+"/api/v1/status/"+otherJob+"/events", otherKey, "")
		defer otherResp.Body.Close()
		otherEvents := readEvents(bufio.NewReader(otherResp.Body))
		nextEvent(t, otherEvents)
		tag := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil).Header().Get("ETag")
		poll := heldPoll(ctx, srv.URL, "/api/v1/status/"+id+"/", key, tag)
		waitOpen(t, h.srv.waits, keyID(t, st, key), 2, 3)

		start := time.Now()
		if r := h.do("POST", "/api/api-key/revoke/", ip, "", nil); r.Code != 200 {
			t.Fatalf("revoke: %d %s", r.Code, r.Body)
		}
		ev := nextEvent(t, events)
		if ev.event != "error" || !strings.Contains(ev.data, msgInvalidKey) {
			t.Fatalf("revoked stream's event %+v", ev)
		}
		select {
		case code := <-poll:
			if code != 401 {
				t.Fatalf("revoked long poll: %d", code)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("revoked long poll still held")
		}
		if took := time.Since(start); took > 2*time.Second {
			t.Fatalf("revocation took %v to end the waits", took)
		}
		// The other key's stream goes on, until its owner is blocked by
		// another process (here: the database changed behind the API's
		// back): the key check ends it.
		if err := st.DB.Exec("UPDATE api_users SET is_blocked = ? WHERE ip_address = ?", true, other).Error; err != nil {
			t.Fatal(err)
		}
		ev = nextEvent(t, otherEvents)
		if ev.event != "error" {
			t.Fatalf("blocked owner's stream: %+v", ev)
		}
	})
}

// TestWaitSecondsParse: waitSeconds is capped before it becomes a duration
// (1e19 s is the cap, not an overflow that answers at once).
func TestWaitSecondsParse(t *testing.T) {
	for in, want := range map[string]time.Duration{
		"": 0, "0": 0, "1": time.Second, "1.5": 1500 * time.Millisecond, " 2 ": 2 * time.Second,
		"60": time.Minute, "3600": time.Minute, "1e19": time.Minute, "1e308": time.Minute, "9223372036": time.Minute,
	} {
		got, err := parseWaitSeconds(in, time.Minute)
		if err != nil || got != want {
			t.Errorf("parseWaitSeconds(%q) = %v, %v; want %v", in, got, err, want)
		}
	}
	for _, in := range []string{"-1", "NaN", "Inf", "-Inf", "soon", "1e400", "0x10p"} {
		if _, err := parseWaitSeconds(in, time.Minute); err == nil {
			t.Errorf("parseWaitSeconds(%q) accepted", in)
		}
	}
}

// TestLongPollEdges: a huge waitSeconds is held for the cap; If-None-Match:
// * answers 304 at once (any current state matches), never held; a list of
// more than maxETagEntries tags is a 431; a header value over 8 KiB is a
// 431 before anything reads it.
func TestLongPollEdges(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.StatusWaitMax = time.Second })
		srv := httptest.NewServer(h.srv)
		defer srv.Close()
		const ip = "203.0.113.75"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		path := "/api/v1/status/" + id + "/"
		resp, _, _ := getStatus(t, srv.URL, path, key)
		tag := resp.Header.Get("ETag")
		resp, _, took := getStatus(t, srv.URL, path+"?waitSeconds=1e19", key, "If-None-Match", tag)
		if resp.StatusCode != 304 || took < time.Second || took > 4*time.Second {
			t.Fatalf("waitSeconds=1e19: %d after %v, want 304 after the 1 s cap", resp.StatusCode, took)
		}
		resp, _, took = getStatus(t, srv.URL, path+"?waitSeconds=30", key, "If-None-Match", "*")
		if resp.StatusCode != 304 || took > 500*time.Millisecond {
			t.Fatalf("If-None-Match: * with waitSeconds: %d after %v, want 304 at once", resp.StatusCode, took)
		}
		tags := make([]string, maxETagEntries)
		for i := range tags {
			tags[i] = fmt.Sprintf(`W/"t%d"`, i)
		}
		if r := h.do("GET", path, ip, key, nil, "If-None-Match", strings.Join(tags, ", ")); r.Code != 200 {
			t.Fatalf("%d tags: %d", len(tags), r.Code)
		}
		r := h.do("GET", path, ip, key, nil, "If-None-Match", strings.Join(append(tags, tag), ", "))
		wantStatus(t, r, 431)
		r = h.do("GET", path, ip, key, nil, "If-None-Match", strings.Repeat("a", 9<<10))
		wantStatus(t, r, 431)
		if !strings.Contains(r.json(t)["error"].(string), "If-None-Match") {
			t.Fatalf("431 names no header: %s", r.Body)
		}
		r = h.do("GET", "/api/v1/methods/", ip, "", nil, "X-Filler", strings.Repeat("b", 8<<10))
		wantStatus(t, r, 200)
	})
}

// TestWaitingBudgetOnlyForRealWaits: reads that cannot wait (a waitSeconds
// with *, or without If-None-Match past a wait's first read of the job)
// spend the plain budget, not the waiting one, so the same key's real long
// polls still get in while a loop of them is refused.
func TestWaitingBudgetOnlyForRealWaits(t *testing.T) {
	s := &Server{}
	now := time.Now()
	for i, c := range []struct {
		path, inm string
		after     time.Duration
		waiting   bool
	}{
		{"/api/v1/status/x/events", "", 0, true},
		{"/api/v1/status/x/events/", "", 0, true},
		{"/api/v1/status/x/?waitSeconds=5", `W/"t"`, 0, true},
		{"/api/v1/status/x/?waitSeconds=0.5", `W/"t"`, 0, true},
		// A wait's first read of job x counts once in the window.
		{"/api/v1/status/x/?waitSeconds=1", "", 0, true},
		{"/api/v1/status/x/?waitSeconds=30", "", time.Second, false},
		{"/api/v1/status/y/?waitSeconds=1", "", time.Second, true},
		{"/api/v1/status/x/?waitSeconds=1", "", firstReadWindow + time.Second, true},
		{"/api/v1/status/x/?waitSeconds=1", "*", 0, false},
		{"/api/v1/status/x/?waitSeconds=0", `W/"t"`, 0, false},
		{"/api/v1/status/x/", `W/"t"`, 0, false},
		{"/api/v1/status/x/?waitSeconds=soon", `W/"t"`, 0, false},
	} {
		req := httptest.NewRequest("GET", c.path, nil)
		if c.inm != "" {
			req.Header.Set("If-None-Match", c.inm)
		}
		if got := s.waitingRead(newGinContext(req), "k", now.Add(c.after)); got != c.waiting {
			t.Errorf("%d: waitingRead(%s, If-None-Match %q) = %v", i, c.path, c.inm, got)
		}
	}
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.StatusReadsPerSecond = 2 })
		const ip = "203.0.113.76"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		path := "/api/v1/status/" + id + "/"
		tag := h.do("GET", path, ip, key, nil).Header().Get("ETag")
		refused := 0
		for range 20 {
			if r := h.do("GET", path+"?waitSeconds=1", ip, key, nil); r.Code == 429 {
				refused++
			}
		}
		if refused == 0 {
			t.Fatal("a loop of 20 reads at 2 a second was never refused")
		}
		// The waiting budget is untouched: a real long poll (answered at
		// once here: the tag is another state's) gets in.
		if r := h.do("GET", path+"?waitSeconds=1", ip, key, nil, "If-None-Match", `W/"older"`); r.Code != 200 {
			t.Fatalf("long poll after the loop: %d %s (tag %s)", r.Code, r.Body, tag)
		}
	})
}

// TestWaitsBudgetForLimit: the waits fit the open-file limit beside
// fdReserve descriptors, lowered with a warning when they do not.
func TestWaitsBudgetForLimit(t *testing.T) {
	for _, c := range []struct {
		want  int
		limit uint64
		got   int
		warn  bool
	}{
		{4096, 1 << 20, 4096, false},
		{4096, 4096 + fdReserve, 4096, false},
		{4096, 4096, 4096 - fdReserve, true},
		{4096, 2048, 1024, true},
		{4096, 1024, 256, true},
		{10, 256, 10, true},
		{4096, 1, 1, true},
	} {
		got, warn := waitsBudgetFor(c.want, c.limit)
		if got != c.got || (warn != "") != c.warn {
			t.Errorf("waitsBudgetFor(%d, %d) = %d, %q; want %d, warning %v", c.want, c.limit, got, warn, c.got, c.warn)
		}
	}
}

// TestStreamsFromManyKeysStayBounded: 20 keys each open streams without end
// (more than they may); the process holds at most KINFLOW_WAITS_MAX of them,
// its descriptors stay bounded, every refusal is a 429, and a calm key's
// status read is answered at once.
func TestStreamsFromManyKeysStayBounded(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		const perKey, maxAll, keys, tries = 8, 60, 20, 20
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.WaitsPerKey, c.WaitsMax = perKey, maxAll })
		srv := httptest.NewServer(h.srv)
		defer srv.Close()
		type attacker struct{ key, job string }
		var as []attacker
		for i := range keys {
			ip := fmt.Sprintf("198.51.100.%d", 10+i)
			k := h.newKey(ip)
			as = append(as, attacker{k, h.submitted(ip, k)})
		}
		const calmIP = "203.0.113.77"
		calmKey := h.newKey(calmIP)
		calmJob := h.submitted(calmIP, calmKey)
		fdsBefore := openFDs(t)
		// No keep-alive: a refused request's connection is closed, as a
		// hostile client's would be by the server's idle timeout.
		hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		var (
			mu       sync.Mutex
			open     []*http.Response
			codes    = map[int]int{}
			wg       sync.WaitGroup
			fdsPeak  int
			peakStop = make(chan struct{})
		)
		go func() {
			for {
				select {
				case <-peakStop:
					return
				case <-time.After(20 * time.Millisecond):
				}
				if n := openFDs(t); n > fdsPeak {
					mu.Lock()
					fdsPeak = n
					mu.Unlock()
				}
			}
		}()
		for _, a := range as {
			wg.Add(1)
			go func() {
				defer wg.Done()
				for range tries {
					req, _ := http.NewRequestWithContext(ctx, "GET", srv.URL+"/api/v1/status/"+a.job+"/events", nil)
					req.Header.Set("Authorization", "Bearer "+a.key)
					resp, err := hc.Do(req)
					if err != nil {
						continue
					}
					mu.Lock()
					codes[resp.StatusCode]++
					if resp.StatusCode == 200 {
						open = append(open, resp)
					} else {
						resp.Body.Close()
					}
					mu.Unlock()
				}
			}()
		}
		wg.Wait()
		all := h.srv.waits.held()
		start := time.Now()
		r, _, _ := getStatus(t, srv.URL, "/api/v1/status/"+calmJob+"/", calmKey)
		calm := time.Since(start)
		close(peakStop)
		mu.Lock()
		defer mu.Unlock()
		t.Logf("%d keys × %d streams: answers %v, %d held; descriptors %d before, %d at the peak; a calm status read took %v",
			keys, tries, codes, all, fdsBefore, fdsPeak, calm)
		if codes[200] != maxAll || all != maxAll || codes[429] != keys*tries-maxAll {
			t.Fatalf("answers %v, %d held; want %d streams held and the rest 429", codes, all, maxAll)
		}
		// Each held stream is two descriptors in this process (the test's
		// client end and the server's); the refused ones are closed.
		if bound := fdsBefore + 2*maxAll + 64; fdsPeak > bound {
			t.Fatalf("descriptors peaked at %d, want at most %d", fdsPeak, bound)
		}
		if r.StatusCode != 200 || calm > 2*time.Second {
			t.Fatalf("calm key's status read: %d after %v", r.StatusCode, calm)
		}
		for _, resp := range open {
			resp.Body.Close()
		}
	})
}

// openFDs is how many descriptors this process has open.
func openFDs(t *testing.T) int {
	t.Helper()
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatalf("count descriptors: %v", err)
	}
	return len(ents)
}

// newGinContext is a gin context of req, for middleware helpers.
func newGinContext(req *http.Request) *gin.Context {
	c, _ := gin.CreateTestContext(httptest.NewRecorder())
	c.Request = req
	return c
}
