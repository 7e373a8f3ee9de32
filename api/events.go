package api

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/gin-gonic/gin"
)

// sseKeepAlive is how often an idle event stream sends a comment line: 15 s
// keeps the connection through proxies that cut idle ones at 30–60 s.
const sseKeepAlive = 15 * time.Second

// sseWriteTimeout bounds each write to a stream (the server's own write
// timeout is lifted for it): a client that stops reading is dropped.
const sseWriteTimeout = 30 * time.Second

// sseRetryMillis is the reconnection delay the stream asks EventSource
// clients to use.
const sseRetryMillis = 2000

// eventID is the event id of a snapshot: its ETag without W/ and quotes.
func eventID(etag string) string {
	return strings.Trim(strings.TrimPrefix(etag, "W/"), `"`)
}

// statusEvents answers GET /status/{id}/events with Server-Sent Events: an
// event "status" carrying the status object (the body of /status/) now and
// at each change, each with the state's id; once the job is Completed or
// Failed, its last "status" event and an event "end", and the stream ends.
// A reconnect with Last-Event-ID resumes: the state it names is not sent
// again, and a finished job whose last state the client has is answered 204
// (which tells EventSource to stop reconnecting).
//
// A stream holds one of its key's wait places (waits.go) and lasts at most
// KINFLOW_STREAM_MAX_SECONDS: then it ends without "end" and the client
// reconnects with Last-Event-ID. A key revoked or blocked while its stream
// is open gets an event "error" and the stream ends.
func (s *Server) statusEvents(c *gin.Context) {
	sn, ok := s.ownedSnap(c)
	if !ok {
		return
	}
	last := strings.TrimSpace(c.GetHeader("Last-Event-ID"))
	if last == "" {
		last = strings.TrimSpace(c.Query("lastEventId"))
	}
	if sn.finished() && last == eventID(sn.etag) {
		c.Status(http.StatusNoContent)
		c.Writer.WriteHeaderNow()
		return
	}
	ctx, leave, ok := s.enterWait(c)
	if !ok {
		return
	}
	defer leave()
	h := c.Writer.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	// nginx buffers proxied answers unless told not to.
	h.Set("X-Accel-Buffering", "no")
	c.Status(http.StatusOK)
	rc := http.NewResponseController(c.Writer)
	write := func(format string, args ...any) bool {
		// Not every writer supports deadlines (test recorders); the
		// stream works without.
		_ = rc.SetWriteDeadline(time.Now().Add(sseWriteTimeout))
		if _, err := fmt.Fprintf(c.Writer, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	if !write("retry: %d\n\n", sseRetryMillis) {
		return
	}
	end := time.Now().Add(s.streamMaxAge())
	for {
		if id := eventID(sn.etag); id != last {
			body, err := json.Marshal(s.statusBodyOf(sn, s.now()))
			if err != nil {
				s.log.Error("status.events_encode_failed", "job_id", sn.job.ID, "error", err)
				return
			}
			if !write("id: %s\nevent: status\ndata: %s\n\n", id, body) {
				return
			}
			last = id
		}
		if sn.finished() {
			write("event: end\ndata: {\"status\":%q}\n\n", jobStatusOnWire(sn.job.Status))
			return
		}
		if !time.Now().Before(end) {
			// The client reconnects with Last-Event-ID (retry: above).
			write(": stream lifetime reached; reconnect with Last-Event-ID\n\n")
			return
		}
		next, changed, err := s.statuses.wait(ctx, sn.job.ID, sn.etag, minTime(time.Now().Add(sseKeepAlive), end))
		if keyGone(ctx) {
			b, _ := json.Marshal(errorBody{Error: msgInvalidKey})
			write("event: error\ndata: %s\n\n", b)
			return
		}
		if err != nil {
			return
		}
		if next != nil {
			sn = next
		}
		if !changed && time.Now().Before(end) && !write(": keep-alive\n\n") {
			return
		}
	}
}

// streamMaxAge is KINFLOW_STREAM_MAX_SECONDS (15 min without a
// configuration).
func (s *Server) streamMaxAge() time.Duration {
	if s.deps.Config != nil && s.deps.Config.StreamMaxAge > 0 {
		return s.deps.Config.StreamMaxAge
	}
	return 15 * time.Minute
}

// minTime is the earlier of a and b.
func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}
