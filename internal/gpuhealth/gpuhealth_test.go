package gpuhealth

import (
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
)

// service is a GPU service stand-in answering /health with body and status,
// counting its calls and checking the bearer token.
func service(t *testing.T, status int, body string) (*httptest.Server, *atomic.Int32) {
	t.Helper()
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		calls.Add(1)
		if r.URL.Path != "/health" || r.Header.Get("Authorization") != "Bearer tok" {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		w.WriteHeader(status)
		_, _ = w.Write([]byte(body))
	}))
	t.Cleanup(srv.Close)
	return srv, &calls
}

func TestCheck(t *testing.T) {
	ctx := context.Background()
	if got := New(&config.Config{}).Check(ctx); got != (Health{Reason: "not_configured"}) {
		t.Errorf("unconfigured: %+v", got)
	}
	for _, c := range []struct {
		status int
		body   string
		want   Health
	}{
		{200, `{"online": true}`, Health{Configured: true, Online: true}},
		{200, `{}`, Health{Configured: true, Online: true}},
		{200, `{"online": true, "executor": "command"}`, Health{Configured: true, Online: true, Executor: "command"}},
		{200, `{"online": false}`, Health{Configured: true, Reason: "remote_offline"}},
		{503, `{}`, Health{Configured: true, Reason: "unreachable: HTTP 503"}},
		{200, `not json`, Health{Configured: true, Reason: "unreachable: invalid JSON from /health"}},
	} {
		srv, _ := service(t, c.status, c.body)
		h := New(&config.Config{GPUEmbedServiceURL: srv.URL, GPUEmbedServiceToken: "tok"})
		if got := h.Check(ctx); got != c.want {
			t.Errorf("%d %s: %+v, want %+v", c.status, c.body, got, c.want)
		}
		if conf, online := h.GPUStatus(ctx); conf != c.want.Configured || online != c.want.Online {
			t.Errorf("%d %s: GPUStatus %v %v", c.status, c.body, conf, online)
		}
	}
}

func TestCheckCachesForTheTTL(t *testing.T) {
	ctx := context.Background()
	srv, calls := service(t, 200, `{"online": true}`)
	h := New(&config.Config{GPUEmbedServiceURL: srv.URL, GPUEmbedServiceToken: "tok", GPUEmbedHealthTTL: time.Hour})
	for range 3 {
		h.Check(ctx)
	}
	if n := calls.Load(); n != 1 {
		t.Errorf("%d calls within the TTL, want 1", n)
	}
	h.Config.GPUEmbedHealthTTL = 0
	h.Check(ctx)
	if n := calls.Load(); n != 2 {
		t.Errorf("%d calls after the TTL, want 2", n)
	}
}

// TestCheckSeveralHosts: with several GPU hosts the service is online while
// any answers online, whatever the others do, and the answer does not wait
// for a host that hangs (its check has no timeout here, so waiting for it
// would hang the test); with none online the first host's answer is the
// reason.
func TestCheckSeveralHosts(t *testing.T) {
	ctx := context.Background()
	down := httptest.NewServer(http.NotFoundHandler())
	downURL := down.URL
	down.Close()
	offline, _ := service(t, 200, `{"online": false}`)
	online, calls := service(t, 200, `{"online": true, "executor": "command"}`)
	release := make(chan struct{})
	hanging := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hanging.Close)
	t.Cleanup(func() { close(release) })

	cfg, err := config.Load(func(k string) (string, bool) {
		if k == "GPU_EMBED_SERVICE_URL" {
			return " " + downURL + "/, " + hanging.URL + "," + offline.URL + " ," + online.URL + "/", true
		}
		return "", false
	})
	if err != nil {
		t.Fatal(err)
	}
	cfg.GPUEmbedServiceToken = "tok"
	if got := URLs(cfg); len(got) != 4 || got[0] != downURL || got[3] != online.URL {
		t.Fatalf("URLs %q", got)
	}
	h := New(cfg)
	h.Timeout = 0
	if got := h.Check(ctx); got != (Health{Configured: true, Online: true, Executor: "command"}) {
		t.Fatalf("one host online among four: %+v", got)
	}
	if calls.Load() != 1 {
		t.Errorf("online host asked %d times", calls.Load())
	}

	// None online: the first host's answer, after every host answered.
	cfg.GPUEmbedServiceURL = offline.URL + "," + downURL
	h = New(cfg)
	h.Config.GPUEmbedHealthTTL = 0
	if got := h.Check(ctx); got != (Health{Configured: true, Reason: "remote_offline"}) {
		t.Errorf("none online: %+v", got)
	}
	cfg.GPUEmbedServiceURL = downURL + "," + offline.URL
	if got := h.Check(ctx); got.Online || !strings.HasPrefix(got.Reason, "unreachable: ") {
		t.Errorf("first host down, second offline: %+v", got)
	}
}

// TestCheckRefusesOtherFolderNaming: a host whose KINFLOW_CACHE_FOLDERS
// differs from this process's is offline with a reason naming both values; a
// host that does not say uses kinflow's naming.
func TestCheckRefusesOtherFolderNaming(t *testing.T) {
	ctx := context.Background()
	for _, c := range []struct {
		body, ours string
		online     bool
	}{
		{`{"online": true, "cache_folders": "reference"}`, "reference", true},
		{`{"online": true, "cache_folders": "kinflow"}`, "kinflow", true},
		{`{"online": true}`, "kinflow", true},
		{`{"online": true, "cache_folders": "reference"}`, "kinflow", false},
		{`{"online": true, "cache_folders": "kinflow"}`, "reference", false},
		{`{"online": true}`, "reference", false},
	} {
		srv, _ := service(t, 200, c.body)
		h := New(&config.Config{GPUEmbedServiceURL: srv.URL, GPUEmbedServiceToken: "tok", CacheFolders: c.ours})
		got := h.Check(ctx)
		if got.Online != c.online {
			t.Errorf("%s with ours %s: %+v", c.body, c.ours, got)
		}
		if !c.online && (!strings.HasPrefix(got.Reason, ReasonCacheFoldersMismatch+": ") || !strings.Contains(got.Reason, "KINFLOW_CACHE_FOLDERS="+got.CacheFolders) ||
			!strings.Contains(got.Reason, "this process "+c.ours)) {
			t.Errorf("%s with ours %s: reason %q", c.body, c.ours, got.Reason)
		}
	}
}
