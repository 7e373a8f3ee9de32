package api

import (
	"io"
	"net/http"
	"strings"
	"sync"

	"github.com/gin-gonic/gin"
)

// bodyBudget bounds the bytes of request bodies being read and held at
// once, over all requests (KINFLOW_BODY_BUDGET_BYTES). Each body is bounded
// on its own (KINFLOW_MAX_UPLOAD_BYTES), but not how many are read
// together: twelve concurrent 120 MB /validate/ calls, free of quota, took
// an api from 0.8 to 4 GB. A request takes its declared length
// (or, without one, the most a body may be) before a byte is read, and
// gives it back when its handler returns (a body of at most smallBody is
// always read); one that does not fit is
// answered 503 with Retry-After at once, having charged nothing and kept
// none of its body (refuseBody drains what the client still sends, so that
// the client can read the answer). It never waits: a waiting request would
// hold its connection and its client's bytes in the kernel's buffers all
// the same.
type bodyBudget struct {
	mu        sync.Mutex
	cap, used int64
}

// bodyTakenKey is the gin context key of the bytes a request took.
const bodyTakenKey = "kinflow.body_taken"

// smallBody is the largest body always read, budget or not: the many small
// submits of a public service cost little memory, and must not wait behind
// a few large uploads.
const smallBody = 1 << 20

// bodyRetryAfter is the Retry-After of a request refused for the budget, in
// seconds: a 120 MB body is read and validated in a few seconds.
const bodyRetryAfter = "5"

func (b *bodyBudget) take(n int64) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.used+n > b.cap && b.used > 0 {
		return false
	}
	// A lone body larger than the budget is still read: the per-body
	// limit, not the budget, decides what one request may send.
	b.used += n
	return true
}

func (b *bodyBudget) give(n int64) {
	b.mu.Lock()
	b.used -= n
	b.mu.Unlock()
}

// takeBody reserves the request's body bytes (limit: the per-body cap) and
// reports whether it may be read; when not, the 503 has been written.
func (s *Server) takeBody(c *gin.Context, limit int64) bool {
	if s.bodies == nil {
		return true
	}
	n := c.Request.ContentLength
	if n < 0 || n > limit {
		n = limit
	}
	if n <= smallBody {
		return true
	}
	if !s.bodies.take(n) {
		s.log.Warn("body.budget_full", "request_id", c.GetString(requestIDKey), "bytes", n, "budget", s.bodies.cap)
		refuseBody(c, limit)
		return false
	}
	c.Set(bodyTakenKey, n)
	return true
}

// refuseBody answers 503 with Retry-After to a request whose body the
// budget cannot take, then reads what the client sends of the body (up to
// limit bytes) and throws it away as it comes, holding none of it.
//
// Answering without reading is not enough: net/http then closes the
// connection with more than 256 KiB of the body unread, and a client still
// sending it gets a reset (a broken pipe, ECONNRESET) instead of the
// answer. Every client that sends the whole request before it reads one
// does: Python's http.client (requests), curl without Expect. So the answer
// is flushed first (a client that reads while it sends, as Go's does, has
// it at once), the rest of the body is drained through a small buffer, and
// the connection closes after: a refused body costs the bytes on the wire,
// not the memory the budget bounds. A client that waits for 100 Continue
// sends no body, and a connection that cannot be read after answering
// (HTTP/2, a test's recorder) has its body left alone.
func refuseBody(c *gin.Context, limit int64) {
	c.Header("Retry-After", bodyRetryAfter)
	r := c.Request
	rc := http.NewResponseController(c.Writer)
	drain := r.ProtoMajor == 1 && !strings.EqualFold(r.Header.Get("Expect"), "100-continue") && rc.EnableFullDuplex() == nil
	if drain {
		c.Header("Connection", "close")
	}
	abortError(c, http.StatusServiceUnavailable, "The server is reading too many large requests at once: send this one again in a few seconds (nothing was charged).")
	if !drain {
		return
	}
	if err := rc.Flush(); err != nil {
		return
	}
	_, _ = io.CopyN(io.Discard, r.Body, limit)
}

// releaseBody gives back, when the request's handler has returned, the
// body bytes it took.
func (s *Server) releaseBody(c *gin.Context) {
	c.Next()
	if n, ok := c.Get(bodyTakenKey); ok && s.bodies != nil {
		s.bodies.give(n.(int64))
	}
}
