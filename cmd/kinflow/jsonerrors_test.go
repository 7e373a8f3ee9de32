package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestGoServerErrorsAreJSON: the answers net/http gives by itself (431 for
// huge headers, 400 for a malformed request) come out as {"error": ...}
// through serveHTTP, and normal answers are untouched.
func TestGoServerErrorsAreJSON(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	addrc := make(chan net.Addr, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.Header().Set("Connection", "close")
		w.WriteHeader(400)
		_, _ = io.WriteString(w, "handler")
	})
	go func() {
		_ = serveHTTP(ctx, "127.0.0.1:0", h, slog.New(slog.DiscardHandler), func(a net.Addr) { addrc <- a })
	}()
	addr := (<-addrc).String()
	raw := func(req string) *http.Response {
		t.Helper()
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		_ = c.SetDeadline(time.Now().Add(10 * time.Second))
		if _, err := io.WriteString(c, req); err != nil {
			t.Fatal(err)
		}
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err != nil {
			t.Fatal(err)
		}
		return resp
	}
	for req, code := range map[string]int{
		fmt.Sprintf("GET / HTTP/1.1\r\nHost: x\r\nX-Big: %s\r\n\r\n", strings.Repeat("a", 2<<20)): 431,
		// 900 KB in one header, and 42 KB in six headers of 7 KB each:
		// past the server's budget (api.MaxHeaderBytes), far below Go's
		// default of 1 MiB.
		fmt.Sprintf("GET / HTTP/1.1\r\nHost: x\r\nIf-None-Match: %s\r\n\r\n", strings.Repeat("a", 900<<10)):        431,
		"GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Part: "+strings.Repeat("b", 7<<10)+"\r\n", 6) + "\r\n": 431,
		"GET / HTTP/1.1\r\nHost: x\r\nBad Header Line\r\n\r\n":                                                     400,
	} {
		resp := raw(req)
		var body map[string]string
		err := json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != code || err != nil || body["error"] == "" || !strings.HasPrefix(resp.Header.Get("Content-Type"), "application/json") {
			t.Errorf("%d: %d %v %v", code, resp.StatusCode, body, err)
		}
	}
	// A handler's own plain answer is left alone.
	resp := raw("GET / HTTP/1.1\r\nHost: x\r\n\r\n")
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || string(b) != "handler" {
		t.Errorf("handler answer changed: %d %q", resp.StatusCode, b)
	}
	// 18 KB of headers, three of 6 KB (cookies, tokens): within the budget.
	resp = raw("GET / HTTP/1.1\r\nHost: x\r\n" + strings.Repeat("X-Part: "+strings.Repeat("b", 6<<10)+"\r\n", 3) + "\r\n")
	b, _ = io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 400 || string(b) != "handler" {
		t.Errorf("18 KB of headers: %d %q, want the handler's answer", resp.StatusCode, b)
	}
}
