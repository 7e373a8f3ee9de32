package api

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// csvStream is a CSV body of exactly n bytes made on the fly (the test
// holds none of it), which blocks on its first read until gate is closed.
type csvStream struct {
	gate    <-chan struct{}
	started func()
	once    sync.Once
	left    int64
	buf     []byte
}

func (r *csvStream) Read(p []byte) (int, error) {
	r.once.Do(func() {
		r.started()
		<-r.gate
	})
	if r.left <= 0 {
		return 0, io.EOF
	}
	if len(r.buf) == 0 {
		r.buf = []byte(seqA + ",CCO\n")
	}
	n := 0
	for n < len(p) && r.left > 0 {
		k := copy(p[n:], r.buf)
		if int64(k) > r.left {
			k = int(r.left)
		}
		n += k
		r.left -= int64(k)
	}
	return n, nil
}

// bigUpload is a multipart upload whose .csv part is size bytes, with its
// declared length.
func bigUpload(size int64, gate <-chan struct{}, started func()) (io.Reader, string, int64) {
	var head bytes.Buffer
	w := multipart.NewWriter(&head)
	_, _ = w.CreateFormFile("file", "big.csv")
	prefix := head.String() + "Protein Sequence,Substrate\n"
	suffix := "\r\n--" + w.Boundary() + "--\r\n"
	body := io.MultiReader(strings.NewReader(prefix), &csvStream{gate: gate, started: started, left: size}, strings.NewReader(suffix))
	return body, w.FormDataContentType(), int64(len(prefix)) + size + int64(len(suffix))
}

// rssMB is the process's resident and peak resident memory (MB).
func rssMB() (rss, hwm int) {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return -1, -1
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		var kb int
		if _, err := fmt.Sscanf(sc.Text(), "VmRSS: %d kB", &kb); err == nil {
			rss = kb / 1024
		}
		if _, err := fmt.Sscanf(sc.Text(), "VmHWM: %d kB", &kb); err == nil {
			hwm = kb / 1024
		}
	}
	return rss, hwm
}

// TestBodyBudget: twelve concurrent 120 MB bodies, free of quota on
// /validate/. Those that fit the byte budget (KINFLOW_BODY_BUDGET_BYTES, 256
// MiB by default: two of them) are read; every other one is answered 503
// with Retry-After before a byte of it is read, charging nothing (a submit
// among them too). Once the two are done the budget is whole again. The
// process's memory is logged, not asserted: it is a shared machine.
func TestBodyBudget(t *testing.T) {
	h := newHarness(t, testenv.OpenStore(t, store.SQLite))
	if h.cfg.BodyBudgetBytes != 256<<20 {
		t.Fatalf("default budget %d", h.cfg.BodyBudgetBytes)
	}
	// Each request from its own key: the per-key bound of /validate/ is
	// TestValidatePerKeyLimit's.
	ips := make([]string, 13)
	keys := make([]string, 13)
	for i := range ips {
		ips[i] = fmt.Sprintf("198.51.100.%d", 80+i)
		keys[i] = h.newKey(ips[i])
	}
	const size = 120 << 20
	rss0, hwm0 := rssMB()
	gate := make(chan struct{})
	var startedMu sync.Mutex
	started := 0
	onStart := func() { startedMu.Lock(); started++; startedMu.Unlock() }
	type answer struct {
		code  int
		retry string
		body  string
	}
	results := make(chan answer, 13)
	send := func(path string, i int) {
		body, ct, n := bigUpload(size, gate, onStart)
		req := httptest.NewRequest("POST", path, body)
		req.ContentLength = n
		req.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(ips[i]), 40000).String()
		req.Header.Set("Authorization", "Bearer "+keys[i])
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		results <- answer{rec.Code, rec.Header().Get("Retry-After"), rec.Body.String()}
	}
	for i := range 12 {
		go send("/api/v1/validate/", i)
	}
	go send("/api/v1/submit/", 12)
	// Ten validates and the submit are refused at once; two wait, admitted,
	// on their first byte.
	var refused []answer
	for len(refused) < 11 {
		select {
		case a := <-results:
			if a.code != 503 || a.retry == "" || !strings.Contains(a.body, "nothing was charged") {
				t.Fatalf("an answer while the budget is full: %d %q %s", a.code, a.retry, a.body)
			}
			refused = append(refused, a)
		case <-time.After(2 * time.Minute):
			t.Fatalf("only %d of 11 requests refused", len(refused))
		}
	}
	startedMu.Lock()
	if started > 2 {
		t.Fatalf("%d bodies were being read at once; the budget holds two", started)
	}
	startedMu.Unlock()
	close(gate)
	for range 2 {
		if a := <-results; a.code == 503 {
			t.Fatalf("an admitted body was refused: %s", a.body)
		}
	}
	rss1, hwm1 := rssMB()
	t.Logf("memory (MB, shared machine, test and api in one process): RSS %d → %d, peak %d → %d, for 13 concurrent 120 MB bodies of which 2 were read", rss0, rss1, hwm0, hwm1)
	if used := h.do("GET", "/api/v1/quota/", ips[12], keys[12], nil).json(t)["used"]; used != 0.0 {
		t.Fatalf("a refused submit charged %v", used)
	}
	// The budget is whole again: a large body is admitted.
	gate2 := make(chan struct{})
	close(gate2)
	body, ct, n := bigUpload(2<<20, gate2, func() {})
	req := httptest.NewRequest("POST", "/api/v1/validate/", body)
	req.ContentLength = n
	req.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(ips[0]), 40000).String()
	req.Header.Set("Content-Type", ct)
	req.Header.Set("Authorization", "Bearer "+keys[0])
	rec := httptest.NewRecorder()
	h.srv.ServeHTTP(rec, req)
	if rec.Code == 503 {
		t.Fatalf("after the large bodies: %d %s", rec.Code, rec.Body)
	}
}

// TestValidatePerKeyLimit: /validate/ is free of quota, so one key runs at
// most KINFLOW_VALIDATE_PER_KEY calls at once (default 2); a third is
// refused at once with 429 and Retry-After, another key is not, and the
// slots come back when the calls answer. A call whose checks run past
// KINFLOW_VALIDATE_TIMEOUT_SECONDS is stopped with a 503.
func TestValidatePerKeyLimit(t *testing.T) {
	h := newHarness(t, testenv.OpenStore(t, store.SQLite))
	const ip, ip2 = "198.51.100.71", "198.51.100.72"
	key, key2 := h.newKey(ip), h.newKey(ip2)
	gate := make(chan struct{})
	var wg sync.WaitGroup
	startedCh := make(chan struct{}, 2)
	codes := make(chan int, 2)
	for range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			body, ct, n := bigUpload(2<<20, gate, func() { startedCh <- struct{}{} })
			req := httptest.NewRequest("POST", "/api/v1/validate/", body)
			req.ContentLength = n
			req.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr(ip), 40000).String()
			req.Header.Set("Authorization", "Bearer "+key)
			req.Header.Set("Content-Type", ct)
			rec := httptest.NewRecorder()
			h.srv.ServeHTTP(rec, req)
			codes <- rec.Code
		}()
	}
	<-startedCh
	<-startedCh
	small := func(ip, key string) resp {
		body, ct := multipartBody(t, "input.csv", csvRows(2))
		return h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
	}
	r := small(ip, key)
	if r.Code != 429 || r.Header().Get("Retry-After") == "" || !strings.Contains(r.json(t)["error"].(string), "2 /validate/ calls running") {
		t.Fatalf("third call of the key: %d %v %s", r.Code, r.Header(), r.Body)
	}
	wantStatus(t, small(ip2, key2), 200)
	close(gate)
	wg.Wait()
	for range 2 {
		if c := <-codes; c == 429 {
			t.Fatalf("a held call was refused")
		}
	}
	wantStatus(t, small(ip, key), 200)

	h2 := newHarness(t, testenv.OpenStore(t, store.SQLite), func(c *config.Config, _ *Deps) { c.ValidateTimeout = time.Nanosecond })
	k3 := h2.newKey(ip)
	body, ct := multipartBody(t, "input.csv", csvRows(50))
	r = h2.do("POST", "/api/v1/validate/", ip, k3, body, "Content-Type", ct)
	if r.Code != 503 || r.Header().Get("Retry-After") == "" || !strings.Contains(r.Body.String(), "split it into smaller files") {
		t.Fatalf("a call past its time bound: %d %s", r.Code, r.Body)
	}
}

// TestBodyBudgetRefusalIsReadable: a large body refused because the budget
// is spent gets its 503 and JSON error over a real connection, both from a
// client that reads the answer while it sends (Go's) and from one that
// sends the whole request before it reads (Python's http.client, curl
// without Expect), instead of a connection reset.
func TestBodyBudgetRefusalIsReadable(t *testing.T) {
	h := newHarness(t, testenv.OpenStore(t, store.SQLite), func(c *config.Config, _ *Deps) { c.BodyBudgetBytes = 4 << 20 })
	srv := httptest.NewServer(h.srv)
	defer srv.Close()
	const ip = "127.0.0.1" // the test server's peer
	key := h.newKey(ip)
	// One admitted upload holds the whole budget, waiting on its first byte.
	gate := make(chan struct{})
	started := make(chan struct{})
	held := make(chan int, 1)
	go func() {
		body, ct, n := bigUpload(4<<20, gate, func() { close(started) })
		req := httptest.NewRequest("POST", "/api/v1/validate/", body)
		req.ContentLength = n
		req.RemoteAddr = netip.AddrPortFrom(netip.MustParseAddr("198.51.100.90"), 40000).String()
		req.Header.Set("Authorization", "Bearer "+h.newKey("198.51.100.90"))
		req.Header.Set("Content-Type", ct)
		rec := httptest.NewRecorder()
		h.srv.ServeHTTP(rec, req)
		held <- rec.Code
	}()
	<-started
	defer func() {
		close(gate)
		if c := <-held; c == 503 {
			t.Errorf("the admitted upload was refused")
		}
	}()

	const size = 32 << 20 // far past what net/http drains by itself (256 KiB)
	check := func(who string, code int, header http.Header, body []byte) {
		t.Helper()
		var e map[string]any
		if err := json.Unmarshal(body, &e); err != nil {
			t.Fatalf("%s: body is not JSON: %v: %q", who, err, body)
		}
		msg, _ := e["error"].(string)
		if code != 503 || header.Get("Retry-After") == "" || !strings.Contains(msg, "nothing was charged") {
			t.Fatalf("%s: %d Retry-After %q, %q", who, code, header.Get("Retry-After"), body)
		}
	}

	// A Go client: reads the answer as soon as it comes.
	req, err := http.NewRequest("POST", srv.URL+"/api/v1/submit/", bytes.NewReader(make([]byte, size)))
	if err != nil {
		t.Fatal(err)
	}
	req.Header.Set("Authorization", "Bearer "+key)
	req.Header.Set("Content-Type", "text/csv")
	res, err := srv.Client().Do(req)
	if err != nil {
		t.Fatalf("Go client: %v", err)
	}
	b, err := io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("Go client, reading the answer: %v", err)
	}
	check("Go client", res.StatusCode, res.Header, b)

	// A client that sends everything, then reads.
	conn, err := net.Dial("tcp", srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(time.Minute))
	head := fmt.Sprintf("POST /api/v1/validate/ HTTP/1.1\r\nHost: kinflow\r\nAuthorization: Bearer %s\r\nContent-Type: text/csv\r\nContent-Length: %d\r\n\r\n", key, size)
	if _, err := io.WriteString(conn, head); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Write(make([]byte, size)); err != nil {
		t.Fatalf("send-then-read client, sending the body: %v", err)
	}
	res, err = http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("send-then-read client, reading the answer: %v", err)
	}
	b, err = io.ReadAll(res.Body)
	res.Body.Close()
	if err != nil {
		t.Fatalf("send-then-read client, reading the body: %v", err)
	}
	check("send-then-read client", res.StatusCode, res.Header, b)
}
