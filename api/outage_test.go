package api

import (
	"context"
	"io"
	"log/slog"
	"net"
	"net/url"
	"strings"
	"sync"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/internal/usermsg"
)

// tcpProxy forwards a local port to target until Close, which drops every
// connection and stops listening: the database behind it is then down for
// its clients, as a stopped server would be, without touching the shared
// Postgres.
type tcpProxy struct {
	l     net.Listener
	mu    sync.Mutex
	conns []net.Conn
}

func newTCPProxy(t *testing.T, target string) *tcpProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &tcpProxy{l: l}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			u, err := net.Dial("tcp", target)
			if err != nil {
				c.Close()
				continue
			}
			p.mu.Lock()
			p.conns = append(p.conns, c, u)
			p.mu.Unlock()
			go func() { _, _ = io.Copy(u, c); u.Close() }()
			go func() { _, _ = io.Copy(c, u); c.Close() }()
		}
	}()
	t.Cleanup(p.Close)
	return p
}

func (p *tcpProxy) Close() {
	p.l.Close()
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, c := range p.conns {
		c.Close()
	}
	p.conns = nil
}

// TestNoConnectionDetailsDuringDatabaseOutage: during a database outage every
// user-facing answer names the failing part ("the database was unreachable")
// and carries no connection string, host, port, database user or name; the
// details are in the operator's log under the request id. A job whose stored
// error is a driver's text (an older worker's) is shown redacted as well.
func TestNoConnectionDetailsDuringDatabaseOutage(t *testing.T) {
	direct := testenv.PostgresURL(t)
	u, err := url.Parse(direct)
	if err != nil {
		t.Fatal(err)
	}
	proxy := newTCPProxy(t, u.Host)
	u.Host = proxy.l.Addr().String()
	st, err := store.Open(context.Background(), u.String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Close() })
	if err := st.Migrate(context.Background()); err != nil {
		t.Fatal(err)
	}
	logs := &lockedBuffer{}
	h := newHarness(t, st, func(_ *config.Config, d *Deps) { d.Log = slog.New(slog.NewTextHandler(logs, nil)) })
	const ip = "198.51.100.60"
	key := h.newKey(ip)
	r := h.submitCSV(ip, key, csvRows(2), kcatB...)
	wantStatus(t, r, 201)
	id := r.json(t)["jobId"].(string)
	// The worker recorded a driver's error as the job's message.
	dbUser, dbName := u.User.Username(), strings.TrimPrefix(u.Path, "/")
	_, port, _ := net.SplitHostPort(u.Host)
	raw := "predict stage 0: failed to connect to `user=" + dbUser + " database=" + dbName + "`: 127.0.0.1:" + port +
		" (127.0.0.1): dial error: dial tcp 127.0.0.1:" + port + ": connect: connection refused"
	if err := st.DB.Exec("UPDATE jobs SET status = ?, error_message = ? WHERE id = ?", store.JobFailed, raw, id).Error; err != nil {
		t.Fatal(err)
	}
	leak := func(what, body string) {
		t.Helper()
		for _, s := range []string{dbUser, dbName, "127.0.0.1", ":" + port, "host=", "user=", "database=", "postgres://"} {
			if strings.Contains(body, s) {
				t.Fatalf("%s leaks %q: %s", what, s, body)
			}
		}
	}
	s := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil)
	wantStatus(t, s, 200)
	leak("status of the failed job", s.Body.String())
	if !strings.Contains(s.Body.String(), usermsg.DatabaseUnreachable) {
		t.Fatalf("status does not name the failing part: %s", s.Body)
	}

	proxy.Close() // the outage
	answers := map[string]resp{
		"status": h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil),
		"submit": h.submitCSV(ip, key, csvRows(2), kcatB...),
		"quota":  h.do("GET", "/api/v1/quota/", ip, key, nil),
		"jobs":   h.do("GET", "/api/v1/jobs/", ip, key, nil),
	}
	for what, a := range answers {
		body := a.Body.String()
		leak(what+" during the outage", body)
		if a.Code >= 500 {
			if a.Code != 503 || !strings.Contains(body, "database was unreachable") || a.Header().Get("Retry-After") == "" {
				t.Fatalf("%s: %d %s %v\nlog: %s", what, a.Code, body, a.Header(), logs.String())
			}
			rid := a.Header().Get("X-Request-ID")
			if rid == "" || !strings.Contains(body, rid) {
				t.Fatalf("%s: no request id in %s", what, body)
			}
			// The operator's log holds the details under that request id.
			var line string
			for _, l := range strings.Split(logs.String(), "\n") {
				if strings.Contains(l, rid) {
					line = l
				}
			}
			if !strings.Contains(line, "error=") || (strings.Contains(line, "failed to connect") && !strings.Contains(line, port)) {
				t.Fatalf("%s: the log line of request %s lacks the details: %q", what, rid, line)
			}
		}
	}
	if answers["status"].Code < 500 && answers["submit"].Code < 500 {
		t.Fatalf("no answer saw the outage: %v %v", answers["status"].Code, answers["submit"].Code)
	}
}
