package e2e

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"io"
	"mime/multipart"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/webhook"
	"github.com/kinflow/kinflow/workflows"
)

// sseEvent is one Server-Sent Event of /status/<id>/events.
type sseEvent struct{ id, event, data string }

// streamEvents reads a job's event stream from lastID until it ends,
// sending each event on the returned channel; stop (when it returns true
// for an event) closes the connection early.
func (s *stack) streamEvents(jobID, lastID string, stop func(sseEvent) bool) (int, []sseEvent) {
	s.t.Helper()
	req, _ := http.NewRequest("GET", s.base+"/api/v1/status/"+jobID+"/events", nil)
	req.Header.Set("Authorization", "Bearer "+s.key)
	if lastID != "" {
		req.Header.Set("Last-Event-ID", lastID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("events: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		return resp.StatusCode, nil
	}
	var out []sseEvent
	var ev sseEvent
	r := bufio.NewReader(resp.Body)
	for {
		line, err := r.ReadString('\n')
		if err != nil {
			return resp.StatusCode, out
		}
		line = strings.TrimRight(line, "\n")
		switch {
		case line == "":
			if ev.event != "" {
				out = append(out, ev)
				if stop != nil && stop(ev) {
					return resp.StatusCode, out
				}
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
}

func eventStatus(t *testing.T, ev sseEvent) string {
	t.Helper()
	var st struct {
		Status string `json:"status"`
	}
	if ev.event != "status" || json.Unmarshal([]byte(ev.data), &st) != nil || ev.id == "" {
		t.Fatalf("event %+v", ev)
	}
	return st.Status
}

// TestWaitingOnChangeAgainstStack follows one job through its whole life on
// a stack of separate processes (api, worker, GPU host; Postgres): by the
// event stream, dropped and resumed with Last-Event-ID; by the long poll;
// and by its webhook, whose receiver fails twice before it accepts.
func TestWaitingOnChangeAgainstStack(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=400")
	s := newStack(t, map[string]string{"KINFLOW_WEBHOOK_ALLOW_PRIVATE": "1", "KINFLOW_STATUS_CACHE_MS": "300"},
		map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow}})

	type call struct {
		sig       string
		delivery  string
		body      []byte
		jobStatus string
	}
	var mu sync.Mutex
	var calls []call
	recv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var p webhook.Payload
		_ = json.Unmarshal(body, &p)
		// What a reader of the API sees when the notice arrives.
		req, _ := http.NewRequest("GET", s.base+"/api/v1/status/"+p.JobID+"/", nil)
		req.Header.Set("Authorization", "Bearer "+s.key)
		st := ""
		if resp, err := http.DefaultClient.Do(req); err == nil {
			var b struct {
				Status string `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&b)
			resp.Body.Close()
			st = b.Status
		}
		mu.Lock()
		calls = append(calls, call{sig: r.Header.Get(webhook.SignatureHeader), delivery: r.Header.Get(webhook.DeliveryHeader), body: body, jobStatus: st})
		n := len(calls)
		mu.Unlock()
		if n <= 2 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	defer recv.Close()

	var hook struct {
		Secret string `json:"secret"`
	}
	if code := s.do("GET", "/api/v1/webhook/", nil, "", &hook); code != 200 || hook.Secret == "" {
		t.Fatalf("webhook settings: %d", code)
	}

	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csvRows(randSeed(), 6, 90)))
	_ = mw.WriteField("targets", `["kcat"]`)
	_ = mw.WriteField("methods", `{"kcat":"B"}`)
	_ = mw.WriteField("notifyUrl", recv.URL+"/hook")
	_ = mw.Close()
	var sub struct {
		JobID string `json:"jobId"`
	}
	if code := s.do("POST", "/api/v1/submit/", &buf, mw.FormDataContentType(), &sub); code != 201 {
		t.Fatalf("submit: %d", code)
	}
	id := sub.JobID

	// The long poll, beside the stream: each answer is a change or a 304.
	type pollOut struct {
		changes, notModified int
		final                string
	}
	polled := make(chan pollOut, 1)
	go func() {
		var o pollOut
		tag := ""
		for range 200 {
			req, _ := http.NewRequest("GET", s.base+"/api/v1/status/"+id+"/?waitSeconds=30", nil)
			req.Header.Set("Authorization", "Bearer "+s.key)
			if tag != "" {
				req.Header.Set("If-None-Match", tag)
			}
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				break
			}
			var b struct {
				Status string `json:"status"`
			}
			switch resp.StatusCode {
			case 200:
				o.changes++
				tag = resp.Header.Get("ETag")
				_ = json.NewDecoder(resp.Body).Decode(&b)
			case 304:
				o.notModified++
			}
			resp.Body.Close()
			if b.Status == "Completed" || b.Status == "Failed" {
				o.final = b.Status
				break
			}
		}
		polled <- o
	}()

	// The stream until its second event, then a drop and a resume.
	_, first := s.streamEvents(id, "", func(ev sseEvent) bool { return true })
	_, before := s.streamEvents(id, first[0].id, func(ev sseEvent) bool { return true })
	if len(first) != 1 || len(before) != 1 || before[0].id == first[0].id {
		t.Fatalf("events before the drop: %+v %+v", first, before)
	}
	code, rest := s.streamEvents(id, before[0].id, nil)
	if code != 200 || len(rest) < 2 {
		t.Fatalf("resumed stream: %d %+v", code, rest)
	}
	seen := map[string]bool{first[0].id: true, before[0].id: true}
	for _, ev := range rest[:len(rest)-1] {
		eventStatus(t, ev)
		if seen[ev.id] {
			t.Fatalf("state %s sent twice", ev.id)
		}
		seen[ev.id] = true
	}
	final := rest[len(rest)-2]
	if st := eventStatus(t, final); st != "Completed" {
		t.Fatalf("final event: %s %+v", st, final)
	}
	if end := rest[len(rest)-1]; end.event != "end" || end.data != `{"status":"Completed"}` {
		t.Fatalf("end event %+v", end)
	}
	if code, evs := s.streamEvents(id, final.id, nil); code != 204 || len(evs) != 0 {
		t.Fatalf("reconnect after the end: %d %+v", code, evs)
	}
	t.Logf("event stream: %d states", len(seen))

	select {
	case o := <-polled:
		if o.final != "Completed" || o.changes < 2 {
			t.Fatalf("long poll: %+v", o)
		}
		t.Logf("long poll: %d changes, %d 304s", o.changes, o.notModified)
	case <-time.After(2 * time.Minute):
		t.Fatal("long poll did not end")
	}

	// The notice: refused twice by the receiver, then delivered, once,
	// signed, after the job was Completed for every reader.
	deadline := time.Now().Add(90 * time.Second)
	for {
		mu.Lock()
		n := len(calls)
		mu.Unlock()
		if n >= 3 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d notice attempts in 90 s", n)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// The workflow ends once the notice is delivered; its history (with
	// the i35-notify-job marker and three NotifyJob attempts) replays.
	wctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := s.tc.GetWorkflow(wctx, workflows.PredictionWorkflowID(id), "").Get(wctx, nil); err != nil {
		t.Fatalf("workflow: %v", err)
	}
	s.replay(workflows.PredictionWorkflowID(id), "prediction_webhook_retried")
	time.Sleep(2 * time.Second)
	mu.Lock()
	defer mu.Unlock()
	if len(calls) != 3 {
		t.Fatalf("%d notice attempts, want 3 (two refused, one delivered)", len(calls))
	}
	for i, c := range calls {
		if !webhook.Verify(hook.Secret, c.sig, c.body, time.Now(), 5*time.Minute) {
			t.Fatalf("attempt %d: bad signature %q", i+1, c.sig)
		}
		if c.jobStatus != "Completed" {
			t.Fatalf("attempt %d came while the job was %q", i+1, c.jobStatus)
		}
		var p webhook.Payload
		if err := json.Unmarshal(c.body, &p); err != nil || p.JobID != id || p.Type != "job.completed" || p.Status != "Completed" ||
			p.ResultURL != "/api/v1/result/"+id+"/" || p.Charge == nil || p.Charge.RowsCharged != 6 {
			t.Fatalf("attempt %d payload %s", i+1, c.body)
		}
		// One delivery id on every attempt, in the header and the body.
		if first := calls[0].delivery; first == "" || c.delivery != first || p.DeliveryID != first {
			t.Fatalf("attempt %d: delivery id %q in the header, %q in the body; the first attempt's %q", i+1, c.delivery, p.DeliveryID, first)
		}
	}
}
