package api

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"sync"
	"testing"
	"time"

	"go.temporal.io/api/serviceerror"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
)

// testClock is a settable clock for Deps.Now.
type testClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *testClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *testClock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

// fakeStarter stands in for the Temporal-backed JobStarter (wired in the
// integration tests): it records started ids and fails when err is set.
type fakeStarter struct {
	mu  sync.Mutex
	ids []string
	err error
	// onStart, when set, runs before each start (outside mu): a test's
	// stand-in for what happens meanwhile elsewhere.
	onStart func(id string)
}

func (f *fakeStarter) StartJob(_ context.Context, id string) error {
	if f.onStart != nil {
		f.onStart(id)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return f.err
	}
	// Temporal refuses a second start of one workflow id.
	if slices.Contains(f.ids, id) {
		return serviceerror.NewWorkflowExecutionAlreadyStarted("already started", "", "")
	}
	f.ids = append(f.ids, id)
	return nil
}

func (f *fakeStarter) started() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string(nil), f.ids...)
}

// fakeGPU stands in for the GPU service's cached health.
type fakeGPU struct{ configured, online bool }

func (f fakeGPU) GPUStatus(context.Context) (bool, bool) { return f.configured, f.online }

var errQueueDown = errors.New("temporal unreachable")

type harness struct {
	t       testing.TB
	srv     *Server
	st      *store.Store
	cfg     *config.Config
	clock   *testClock
	starter *fakeStarter
}

// t0 is mid-day UTC, so that a day change is an explicit clock move.
var t0 = time.Date(2026, 3, 4, 14, 30, 0, 123456000, time.UTC)

func testConfig(tb testing.TB) *config.Config {
	tb.Helper()
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	if err != nil {
		tb.Fatal(err)
	}
	cfg.MediaRoot = tb.TempDir()
	return cfg
}

func newHarness(tb testing.TB, st *store.Store, tune ...func(*config.Config, *Deps)) *harness {
	tb.Helper()
	h := &harness{t: tb, st: st, cfg: testConfig(tb), clock: &testClock{t: t0}, starter: &fakeStarter{}}
	d := Deps{Config: h.cfg, Store: st, Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Now: h.clock.Now, Jobs: h.starter}
	for _, f := range tune {
		f(h.cfg, &d)
	}
	h.srv = New(d)
	return h
}

type resp struct {
	*httptest.ResponseRecorder
}

func (r resp) json(tb testing.TB) map[string]any {
	tb.Helper()
	var m map[string]any
	if err := json.Unmarshal(r.Body.Bytes(), &m); err != nil {
		tb.Fatalf("body is not a JSON object: %v: %q", err, r.Body.String())
	}
	return m
}

// do sends one request through the real router from ip (a socket peer).
func (h *harness) do(method, path, ip, key string, body io.Reader, header ...string) resp {
	req := httptest.NewRequest(method, path, body)
	req.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(ip), 40000).String()
	if key != "" {
		req.Header.Set("Authorization", "Bearer "+key)
	}
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	return resp{rec}
}

// newKey generates a key for ip through the API.
func (h *harness) newKey(ip string) string {
	h.t.Helper()
	r := h.do("POST", "/api/api-key/generate/", ip, "", nil)
	if r.Code != http.StatusCreated {
		h.t.Fatalf("generate: %d %s", r.Code, r.Body)
	}
	return r.json(h.t)["key"].(string)
}

func jsonBody(tb testing.TB, v any) io.Reader {
	tb.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		tb.Fatal(err)
	}
	return bytes.NewReader(b)
}

func wantStatus(tb testing.TB, r resp, code int) {
	tb.Helper()
	if r.Code != code {
		tb.Fatalf("status %d, want %d: %s", r.Code, code, r.Body)
	}
	if ct := r.Header().Get("Content-Type"); r.Body.Len() > 0 && code >= 400 && !bytes.HasPrefix([]byte(ct), []byte("application/json")) {
		tb.Fatalf("error with Content-Type %q", ct)
	}
}
