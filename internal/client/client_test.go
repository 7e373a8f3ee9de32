package client_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinflow/kinflow/api"
	"github.com/kinflow/kinflow/internal/client"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// startRecorder stands in for Temporal: it records the jobs the API queued.
// The test then plays the worker's part through the store.
type startRecorder struct {
	mu  sync.Mutex
	ids []string
}

func (r *startRecorder) StartJob(_ context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, id)
	return nil
}

type env struct {
	c     *client.Client
	st    *store.Store
	media string
	jobs  *startRecorder
}

// newEnv serves the real API router over real HTTP on a fresh SQLite store.
func newEnv(t *testing.T) *env {
	t.Helper()
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.MediaRoot = t.TempDir()
	st := testenv.OpenStore(t, store.SQLite)
	rec := &startRecorder{}
	srv := httptest.NewServer(api.New(api.Deps{Config: cfg, Store: st, Jobs: rec,
		Log: slog.New(slog.NewTextHandler(io.Discard, nil))}))
	t.Cleanup(srv.Close)
	return &env{c: client.New(srv.URL+"/", ""), st: st, media: cfg.MediaRoot, jobs: rec}
}

const exampleCSV = "Protein Sequence,Substrate\nMKTAYIAKQRQISFVKSHFSRQ,CC(=O)O\nMSKGEELFTGVV,OC(=O)CCC(=O)O\n"

func TestKeyLifecycle(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	ks, err := e.c.KeyStatus(ctx)
	if err != nil || ks.HasKey {
		t.Fatalf("fresh status %+v %v", ks, err)
	}
	k, err := e.c.GenerateKey(ctx)
	if err != nil || !strings.HasPrefix(k.Key, "ak_") || k.KeySuffix != "…"+k.Key[len(k.Key)-6:] {
		t.Fatalf("generate %+v %v", k, err)
	}
	ks, err = e.c.KeyStatus(ctx)
	if err != nil || !ks.HasKey || ks.KeySuffix != k.KeySuffix {
		t.Fatalf("status after generate %+v %v", ks, err)
	}
	_, err = e.c.GenerateKey(ctx)
	if !client.IsStatus(err, 409) || !strings.Contains(err.Error(), "Revoke it first") {
		t.Fatalf("second generate: %v", err)
	}
	if err := e.c.RevokeKey(ctx); err != nil {
		t.Fatal(err)
	}
	err = e.c.RevokeKey(ctx)
	if !client.IsStatus(err, 404) || !strings.Contains(err.Error(), "No active API key") {
		t.Fatalf("second revoke: %v", err)
	}
	// A revoked key no longer authenticates, with the API's own message.
	e.c.Key = k.Key
	_, err = e.c.Status(ctx, "abc")
	if !client.IsStatus(err, 401) || !strings.Contains(err.Error(), "Invalid or revoked API key.") {
		t.Fatalf("revoked key: %v", err)
	}
}

func TestNoKeyAndUnreachable(t *testing.T) {
	ctx := context.Background()
	c := client.New("http://127.0.0.1:1", "")
	if _, err := c.Status(ctx, "x"); err != client.ErrNoKey {
		t.Fatalf("no key: %v", err)
	}
	c.Key = "ak_x"
	_, err := c.Status(ctx, "x")
	if err == nil || !strings.Contains(err.Error(), "cannot reach kinflow at http://127.0.0.1:1") {
		t.Fatalf("unreachable: %v", err)
	}
	if d := client.New("", ""); d.BaseURL != client.DefaultBaseURL {
		t.Fatalf("default URL %q", d.BaseURL)
	}
}

// TestNonJSONError: an answer from something that is not kinflow is named
// as such, with a bounded excerpt.
func TestNonJSONError(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(502)
		_, _ = io.WriteString(w, strings.Repeat("<html>oops</html>", 100))
	}))
	defer srv.Close()
	_, err := client.New(srv.URL, "").KeyStatus(context.Background())
	var ae *client.APIError
	if !errors.As(err, &ae) || ae.Status != 502 || !strings.Contains(ae.Message, "unexpected answer from") || len(ae.Message) > 300 {
		t.Fatalf("%v", err)
	}
}

func TestMethodsValidateSubmitStatusResult(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	m, err := e.c.Methods(ctx)
	if err != nil || len(m.PredictionTypes) != 3 || len(m.Methods["kcat"]) == 0 {
		t.Fatalf("methods %+v %v", m, err)
	}
	k, err := e.c.GenerateKey(ctx)
	if err != nil {
		t.Fatal(err)
	}
	e.c.Key = k.Key

	rep, err := e.c.Validate(ctx, "in.csv", strings.NewReader(exampleCSV+"MKT1X,notasmiles((\n"))
	if err != nil {
		t.Fatal(err)
	}
	if rep.RowCount != 3 || rep.Problems() != 2 || rep.InvalidProteins[0].Row != 3 || !json.Valid(rep.Raw) {
		t.Fatalf("report %+v %s", rep, rep.Raw)
	}
	_, err = e.c.Validate(ctx, "in.txt", strings.NewReader(exampleCSV))
	if !client.IsStatus(err, 400) {
		t.Fatalf("non-csv name: %v", err)
	}

	_, err = e.c.Submit(ctx, "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "nope"}})
	if !client.IsStatus(err, 400) || !strings.Contains(err.Error(), "nope") {
		t.Fatalf("unknown method: %v", err)
	}
	no := false
	job, err := e.c.Submit(ctx, "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{
		Targets: []string{"kcat", "Km"}, Methods: map[string]string{"kcat": "B", "Km": "C"},
		HandleLongSequences: "skip", CanonicalizeSubstrates: &no, DisableGPUPrecompute: true,
		NotifyURL: "https://hooks.example.com/kinflow"})
	if err != nil {
		t.Fatal(err)
	}
	if j, err := e.st.Job(ctx, job.JobID); err != nil || j.NotifyURL != "https://hooks.example.com/kinflow" {
		t.Fatalf("the job's notify URL: %+v %v", j, err)
	}
	if len(job.JobID) != 22 || job.Status != "Pending" || len(e.jobs.ids) != 1 || e.jobs.ids[0] != job.JobID {
		t.Fatalf("submit %+v, queued %v", job, e.jobs.ids)
	}
	st, err := e.c.Status(ctx, job.JobID)
	if err != nil || st.Status != "Pending" || len(st.Stages) != 2 || st.Stages[1].Target != "Km" || st.Finished() {
		t.Fatalf("status %+v %v", st, err)
	}
	err = e.c.Result(ctx, job.JobID, false, io.Discard)
	if !client.IsStatus(err, 409) || !strings.Contains(err.Error(), "is not completed") {
		t.Fatalf("early result: %v", err)
	}
	_, err = e.c.Status(ctx, "NoSuchJob")
	if !client.IsStatus(err, 404) || !strings.Contains(err.Error(), "No job found with id 'NoSuchJob'.") {
		t.Fatalf("unknown job: %v", err)
	}

	// Play the worker: start, count embeddings, finish with an output file,
	// while Wait follows; Wait must see the progress and the end. The
	// worker moves on once Wait has seen its last write.
	lines := make(chan string, 64)
	observed := func(want string) {
		for {
			select {
			case l := <-lines:
				if l == want {
					return
				}
			case <-time.After(5 * time.Second):
				return // Wait stopped; its own error tells why
			}
		}
	}
	go func() {
		now := time.Now()
		_ = e.st.StartJob(ctx, job.JobID, now)
		_ = e.st.UpdateStage(ctx, job.JobID, 0, map[string]any{"status": "running", "embedding_total": 2, "embedding_need": 2, "embedding_state": "running"})
		observed("Processing/0")
		_ = e.st.SetEmbeddingComputed(ctx, job.JobID, 0, 2, now)
		observed("Processing/2")
		out := filepath.Join("jobs", job.JobID, "output.csv")
		_ = os.MkdirAll(filepath.Join(e.media, "jobs", job.JobID), 0o755)
		_ = os.WriteFile(filepath.Join(e.media, out), []byte("Protein Sequence,kcat (1/s)\nMKT,1.5\nMSK,\n"), 0o644)
		_, _ = e.st.FinishJob(ctx, job.JobID, store.JobCompleted, "", store.Refund{}, true, out, time.Now())
	}()
	var seen []string
	final, err := e.c.Wait(ctx, job.JobID, 20*time.Millisecond, func(s *client.Status) {
		line := s.Status
		if s.Progress.Embedding != nil {
			line += "/" + strconv.Itoa(s.Progress.Embedding.Computed)
		}
		lines <- line
		if len(seen) == 0 || seen[len(seen)-1] != line {
			seen = append(seen, line)
		}
	})
	if err != nil || final.Status != "Completed" {
		t.Fatalf("wait: %+v %v", final, err)
	}
	if len(seen) < 2 || seen[len(seen)-1] != "Completed/2" {
		t.Fatalf("progress seen %v", seen)
	}
	var csv, js bytes.Buffer
	if err := e.c.Result(ctx, job.JobID, false, &csv); err != nil || csv.String() != "Protein Sequence,kcat (1/s)\nMKT,1.5\nMSK,\n" {
		t.Fatalf("csv %q %v", csv.String(), err)
	}
	if err := e.c.Result(ctx, job.JobID, true, &js); err != nil || !strings.Contains(js.String(), `"kcat (1/s)":null`) {
		t.Fatalf("json %s %v", js.String(), err)
	}
}

func TestWaitHonoursContext(t *testing.T) {
	e := newEnv(t)
	ctx := context.Background()
	k, _ := e.c.GenerateKey(ctx)
	e.c.Key = k.Key
	job, err := e.c.Submit(ctx, "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "B"}})
	if err != nil {
		t.Fatal(err)
	}
	cctx, cancel := context.WithTimeout(ctx, 150*time.Millisecond)
	defer cancel()
	st, err := e.c.Wait(cctx, job.JobID, 30*time.Millisecond, nil)
	if err == nil || st == nil || st.Status != "Pending" {
		t.Fatalf("wait on a job nobody runs: %+v %v", st, err)
	}
}

// TestSubmitRetriesWithItsIdempotencyKey: the API creates the job but the
// answer is lost (the connection drops); the client retries with the same
// Idempotency-Key and gets that job, and the key lists exactly one job.
func TestSubmitRetriesWithItsIdempotencyKey(t *testing.T) {
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.MediaRoot = t.TempDir()
	st := testenv.OpenStore(t, store.SQLite)
	h := api.New(api.Deps{Config: cfg, Store: st, Jobs: &startRecorder{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var (
		mu    sync.Mutex
		calls int
		keys  []string
	)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/api/v1/submit/" {
			h.ServeHTTP(w, r)
			return
		}
		mu.Lock()
		calls++
		first := calls == 1
		keys = append(keys, r.Header.Get("Idempotency-Key"))
		mu.Unlock()
		if !first {
			h.ServeHTTP(w, r)
			return
		}
		// The job is made; the answer never reaches the client.
		h.ServeHTTP(httptest.NewRecorder(), r)
		conn, _, _ := w.(http.Hijacker).Hijack()
		conn.Close()
	}))
	t.Cleanup(srv.Close)
	c := client.New(srv.URL, "")
	k, err := c.GenerateKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c.Key = k.Key
	job, err := c.Submit(context.Background(), "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "B"}})
	if err != nil {
		t.Fatal(err)
	}
	if len(keys) != 2 || keys[0] == "" || keys[0] != keys[1] {
		t.Fatalf("Idempotency-Keys sent: %q", keys)
	}
	page, err := c.Jobs(context.Background(), "", 0, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(page.Jobs) != 1 || page.Jobs[0].JobID != job.JobID || page.Jobs[0].Rows != 2 || page.NextCursor != nil {
		t.Fatalf("jobs %+v, submitted %s", page, job.JobID)
	}
	// A different request with the same key is refused, not retried.
	_, err = c.Submit(context.Background(), "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "C"}, IdempotencyKey: keys[0]})
	if !client.IsStatus(err, 422) {
		t.Fatalf("reused key: %v", err)
	}
}

// countingServer serves the real API through wrap, counting status reads.
func countingServer(t *testing.T, wrap func(http.Handler) http.Handler) (*env, *atomic.Int64) {
	t.Helper()
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.MediaRoot = t.TempDir()
	st := testenv.OpenStore(t, store.SQLite)
	h := api.New(api.Deps{Config: cfg, Store: st, Jobs: &startRecorder{}, Log: slog.New(slog.NewTextHandler(io.Discard, nil))})
	var reads atomic.Int64
	var inner http.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, "/api/v1/status/") {
			reads.Add(1)
		}
		h.ServeHTTP(w, r)
	})
	if wrap != nil {
		inner = wrap(inner)
	}
	srv := httptest.NewServer(inner)
	t.Cleanup(srv.Close)
	e := &env{c: client.New(srv.URL, ""), st: st, media: cfg.MediaRoot}
	k, err := e.c.GenerateKey(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	e.c.Key = k.Key
	return e, &reads
}

// playJob moves a job through four states, step apart.
func playJob(e *env, id string, step time.Duration) {
	ctx := context.Background()
	time.Sleep(step)
	_ = e.st.StartJob(ctx, id, time.Now())
	time.Sleep(step)
	_ = e.st.UpdateStage(ctx, id, 0, map[string]any{"status": "running"})
	time.Sleep(step)
	_, _ = e.st.FinishJob(ctx, id, store.JobCompleted, "", store.Refund{}, true, "", time.Now())
}

// TestWaitRidesLongPoll: Wait asks about once per change, not once per
// interval.
func TestWaitRidesLongPoll(t *testing.T) {
	e, reads := countingServer(t, nil)
	job, err := e.c.Submit(context.Background(), "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "B"}})
	if err != nil {
		t.Fatal(err)
	}
	go playJob(e, job.JobID, 600*time.Millisecond)
	start := time.Now()
	updates := 0
	st, err := e.c.Wait(context.Background(), job.JobID, 20*time.Millisecond, func(*client.Status) { updates++ })
	if err != nil || st.Status != "Completed" {
		t.Fatalf("wait: %+v %v", st, err)
	}
	took := time.Since(start)
	// Polling every 20 ms for ~1.8 s would be ~90 reads; the long poll
	// makes one per state (4) and a few for changes seen in two steps.
	if n := reads.Load(); n > 8 || updates < 2 {
		t.Fatalf("%d status reads, %d updates in %v", n, updates, took)
	}
}

// TestWaitFallsBackToPolling: against a server without ETags (an older
// kinflow, or the reference), Wait polls every interval.
func TestWaitFallsBackToPolling(t *testing.T) {
	e, reads := countingServer(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			r.Header.Del("If-None-Match")
			q := r.URL.Query()
			q.Del("waitSeconds")
			r.URL.RawQuery = q.Encode()
			rec := httptest.NewRecorder()
			next.ServeHTTP(rec, r)
			for k, v := range rec.Header() {
				if k != "Etag" {
					w.Header()[k] = v
				}
			}
			w.WriteHeader(rec.Code)
			_, _ = w.Write(rec.Body.Bytes())
		})
	})
	job, err := e.c.Submit(context.Background(), "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "B"}})
	if err != nil {
		t.Fatal(err)
	}
	go playJob(e, job.JobID, 300*time.Millisecond)
	st, err := e.c.Wait(context.Background(), job.JobID, 50*time.Millisecond, nil)
	if err != nil || st.Status != "Completed" {
		t.Fatalf("wait: %+v %v", st, err)
	}
	if n := reads.Load(); n < 8 {
		t.Fatalf("%d status reads in ~0.9 s at a 50 ms interval: not polling", n)
	}
}

// TestWaitHonoursRetryAfter: a 429 is waited out, not an error.
func TestWaitHonoursRetryAfter(t *testing.T) {
	var refused atomic.Bool
	e, _ := countingServer(t, func(next http.Handler) http.Handler {
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if strings.HasPrefix(r.URL.Path, "/api/v1/status/") && refused.CompareAndSwap(false, true) {
				w.Header().Set("Retry-After", "1")
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(429)
				_, _ = w.Write([]byte(`{"error":"Too many status reads"}`))
				return
			}
			next.ServeHTTP(w, r)
		})
	})
	job, err := e.c.Submit(context.Background(), "in.csv", strings.NewReader(exampleCSV), client.SubmitOptions{Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "B"}})
	if err != nil {
		t.Fatal(err)
	}
	_, _ = e.st.FinishJob(context.Background(), job.JobID, store.JobCompleted, "", store.Refund{}, true, "", time.Now())
	start := time.Now()
	st, err := e.c.Wait(context.Background(), job.JobID, 20*time.Millisecond, nil)
	if err != nil || st.Status != "Completed" || time.Since(start) < time.Second {
		t.Fatalf("wait: %+v %v after %v", st, err, time.Since(start))
	}
}
