package webhook

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"
)

func TestSignVerify(t *testing.T) {
	body := []byte(`{"jobId":"x"}`)
	now := time.Unix(1764100000, 0)
	h := Sign("whsec_s", now, body)
	if !strings.HasPrefix(h, "t=1764100000,v1=") || len(h) != len("t=1764100000,v1=")+64 {
		t.Fatalf("header %q", h)
	}
	if !Verify("whsec_s", h, body, now.Add(time.Minute), 5*time.Minute) {
		t.Fatal("a valid signature fails")
	}
	for name, ok := range map[string]bool{
		"other secret": Verify("whsec_t", h, body, now, 5*time.Minute),
		"other body":   Verify("whsec_s", h, []byte(`{"jobId":"y"}`), now, 5*time.Minute),
		"too old":      Verify("whsec_s", h, body, now.Add(10*time.Minute), 5*time.Minute),
		"no v1":        Verify("whsec_s", "t=1764100000", body, now, 5*time.Minute),
	} {
		if ok {
			t.Errorf("%s verifies", name)
		}
	}
}

func TestRefusedRanges(t *testing.T) {
	for _, a := range []string{"127.0.0.1", "10.0.0.8", "172.16.5.4", "192.168.1.1", "169.254.169.254", "100.64.0.1", "0.0.0.0", "::1", "fe80::1", "fd00::1", "::ffff:127.0.0.1", "224.0.0.1"} {
		if !Refused(netip.MustParseAddr(a)) {
			t.Errorf("%s allowed", a)
		}
	}
	for _, a := range []string{"93.184.216.34", "8.8.8.8", "2606:4700::1111", "172.32.0.1"} {
		if Refused(netip.MustParseAddr(a)) {
			t.Errorf("%s refused", a)
		}
	}
	if err := CheckURL("https://hooks.example.org/k?x=1", false); err != nil {
		t.Errorf("public URL: %v", err)
	}
	if err := CheckURL("http://127.0.0.1:8000/", true); err != nil {
		t.Errorf("allowed private: %v", err)
	}
	for _, u := range []string{"http://127.0.0.1/", "http://localhost:80/", "file:///etc/passwd", "https://user:pw@example.org/", "//example.org", strings.Repeat("a", 2001)} {
		if CheckURL(u, false) == nil {
			t.Errorf("%s accepted", u)
		}
	}
}

// TestClientRefusesLoopbackAfterResolution: the address is checked when
// connecting, so a URL whose host is a name is refused too.
func TestClientRefusesLoopbackAfterResolution(t *testing.T) {
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits++ }))
	defer srv.Close()
	url := strings.Replace(srv.URL, "127.0.0.1", "localhost", 1)
	_, err := Send(context.Background(), Client(false), url, "s", "", []byte("{}"), time.Now())
	if !errors.Is(err, ErrRefused) || hits != 0 {
		t.Fatalf("err %v, hits %d", err, hits)
	}
	// Allowed by the setting: delivered, signed.
	var got http.Header
	var body []byte
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, body = r.Header.Clone(), nil
		body, _ = io.ReadAll(r.Body)
	})
	code, err := Send(context.Background(), Client(true), url, "s", "dlv_1", []byte(`{"a":1}`), time.Now())
	if err != nil || code != 200 || !Verify("s", got.Get(SignatureHeader), body, time.Now(), time.Minute) || got.Get(DeliveryHeader) != "dlv_1" {
		t.Fatalf("allowed: %d %v %v", code, err, got)
	}
	// A non-2xx answer is an error (retried by the activity).
	srv.Config.Handler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(503) })
	if code, err := Send(context.Background(), Client(true), url, "s", "", nil, time.Now()); err == nil || code != 503 {
		t.Fatalf("503: %d %v", code, err)
	}
}
