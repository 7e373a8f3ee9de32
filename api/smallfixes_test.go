package api

import (
	"bytes"
	"context"
	"log/slog"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestQuotaLoweredBelowUsed: a limit lowered below what was used today
// gives a 429 that says 0 rows remaining, as /quota/ does, never a
// negative count.
func TestQuotaLoweredBelowUsed(t *testing.T) {
	st := testenv.OpenStore(t, store.SQLite)
	h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.DefaultDailyQuota = 10000 })
	const ip = "198.51.100.70"
	key := h.newKey(ip)
	wantStatus(t, h.submitCSV(ip, key, csvRows(50), kcatB...), 201)
	st.DB.Model(&store.APIKey{}).Where("ip_address = ?", ip).Update("custom_daily_limit", 20)
	r := h.submitCSV(ip, key, csvRows(3), kcatB...)
	wantStatus(t, r, 429)
	if msg := r.json(t)["error"].(string); !strings.Contains(msg, ": 0 rows remaining today; this upload requires 3 rows.") {
		t.Fatalf("429: %s", msg)
	}
	if got := h.do("GET", "/api/v1/quota/", ip, key, nil).json(t)["remaining"]; got != 0.0 {
		t.Fatalf("/quota/ remaining %v", got)
	}
}

// lockedBuffer is a log sink safe for concurrent handlers.
type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestClientGoneIsNotAnError: a status request whose client has
// disconnected (its context cancelled) is logged at debug, not as an ERROR
// of the service, and recorded as 499. (Here the first read to fail is the
// key lookup; job.read_failed, job.stages_failed and job.events_failed go
// through the same internalError.)
func TestClientGoneIsNotAnError(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		var logs lockedBuffer
		h := newHarness(t, st, func(_ *config.Config, d *Deps) {
			d.Log = slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
		})
		const ip = "198.51.100.71"
		key := h.newKey(ip)
		r := h.submitCSV(ip, key, csvRows(2), kcatB...)
		wantStatus(t, r, 201)
		id := r.json(t)["jobId"].(string)
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		req := httptest.NewRequest("GET", "/api/v1/status/"+id+"/", nil).WithContext(ctx)
		req.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(ip), 40000).String()
		req.Header.Set("Authorization", "Bearer "+key)
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		out := logs.String()
		if strings.Contains(out, "level=ERROR") {
			t.Fatalf("a client that went away logged an error:\n%s", out)
		}
		if rec.Code != statusClientClosed {
			t.Fatalf("status %d: %s", rec.Code, rec.Body)
		}
	})
}
