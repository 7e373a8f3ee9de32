package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"strconv"
)

// net/http answers some requests itself, before any handler runs: 431 for
// headers over MaxHeaderBytes, 400 for a malformed request. It writes them
// straight to the connection as plain text, in one write, with this exact
// header block; a handler's answer never has it (ours are JSON and carry
// other headers). jsonErrorListener rewrites those answers to the API's
// {"error": ...} form so that every error of the API is JSON.
var goServerErrorHeaders = []byte("\r\nContent-Type: text/plain; charset=utf-8\r\nConnection: close\r\n\r\n")

// jsonErrorListener wraps every accepted connection with jsonErrorConn.
type jsonErrorListener struct{ net.Listener }

func (l jsonErrorListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &jsonErrorConn{Conn: c}, nil
}

// jsonErrorConn rewrites net/http's own plain-text error answers. Every
// write is checked (a keep-alive connection may get one after normal
// answers); the check is a prefix comparison, free for everything else.
type jsonErrorConn struct{ net.Conn }

func (c *jsonErrorConn) Write(p []byte) (int, error) {
	if out, ok := rewriteGoServerError(p); ok {
		if _, err := c.Conn.Write(out); err != nil {
			return 0, err
		}
		return len(p), nil
	}
	return c.Conn.Write(p)
}

// rewriteGoServerError turns "HTTP/1.1 431 Request Header Fields Too
// Large<headers>431 Request Header Fields Too Large" into the same status
// with a JSON body.
func rewriteGoServerError(p []byte) ([]byte, bool) {
	if !bytes.HasPrefix(p, []byte("HTTP/1.1 4")) {
		return nil, false
	}
	line, rest, ok := bytes.Cut(p, []byte("\r\n"))
	if !ok || !bytes.HasPrefix(rest, goServerErrorHeaders[2:]) {
		return nil, false
	}
	body := rest[len(goServerErrorHeaders)-2:]
	codeText := line[len("HTTP/1.1 "):]
	code, err := strconv.Atoi(string(codeText[:3]))
	if err != nil {
		return nil, false
	}
	msg := string(bytes.TrimSpace(body))
	switch code {
	case http.StatusRequestHeaderFieldsTooLarge:
		msg = "Request headers are too large."
	case http.StatusBadRequest:
		msg = "Malformed HTTP request: " + msg
	}
	jb, _ := json.Marshal(map[string]string{"error": msg})
	var out bytes.Buffer
	fmt.Fprintf(&out, "HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %d\r\nConnection: close\r\n\r\n",
		code, http.StatusText(code), len(jb))
	out.Write(jb)
	return out.Bytes(), true
}
