package api

import (
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
)

// statusCacheTTL is KINFLOW_STATUS_CACHE_MS (1 s without a configuration).
func statusCacheTTL(cfg *config.Config) time.Duration {
	if cfg == nil {
		return time.Second
	}
	return cfg.StatusCacheTTL
}

// statusReadsPerSecond is KINFLOW_STATUS_READS_PER_SECOND (100 without a
// configuration).
func statusReadsPerSecond(cfg *config.Config) int {
	if cfg == nil {
		return 100
	}
	return cfg.StatusReadsPerSecond
}

// keyRate is a token bucket per API key: rate tokens a second, up to
// 2 × rate stored (a burst of two seconds' worth, so a client that waits
// on many jobs and reads them all at once is not refused).
type keyRate struct {
	rate  float64
	burst float64
	mu    sync.Mutex
	keys  map[string]*bucket
	// sweepAt is the bucket count above which full buckets are dropped.
	sweepAt int
}

type bucket struct {
	tokens float64
	at     time.Time
}

func newKeyRate(perSecond int) *keyRate {
	return &keyRate{rate: float64(perSecond), burst: 2 * float64(perSecond), keys: map[string]*bucket{}, sweepAt: 4096}
}

// take spends one token of key; when none is left it returns false and how
// long until one is.
func (r *keyRate) take(key string, now time.Time) (bool, time.Duration) {
	if r.rate <= 0 {
		return true, 0
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	b := r.keys[key]
	if b == nil {
		if len(r.keys) >= r.sweepAt {
			for k, o := range r.keys {
				if o.tokens+now.Sub(o.at).Seconds()*r.rate >= r.burst {
					delete(r.keys, k)
				}
			}
			r.sweepAt = max(4096, 2*len(r.keys))
		}
		b = &bucket{tokens: r.burst, at: now}
		r.keys[key] = b
	}
	b.tokens = math.Min(r.burst, b.tokens+now.Sub(b.at).Seconds()*r.rate)
	b.at = now
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	return false, time.Duration((1 - b.tokens) / r.rate * float64(time.Second))
}

// limitStatusReads answers 429 with Retry-After to a key that reads
// statuses faster than KINFLOW_STATUS_READS_PER_SECOND. It runs before the
// key is looked up (the bucket is named by the key's hash), so a refused
// read costs no database round trip; requests without a key go on to the
// authentication's 401.
//
// Waiting reads (waitingRead: a long poll that sends an ETag, the event
// stream) draw from a bucket of their own, so that a key's client polling in
// a loop cannot starve the same key's clients that wait the way the 429 asks
// them to (seen in `make bench-load`: 8 looping readers on the jobs' key cut
// the burst's waiters to 0.2 jobs/s). A waiting read costs one request per
// change, and is still bounded per key. A read that cannot wait (no ETag to
// wait on, or If-None-Match: *) is a plain read whatever its waitSeconds: a
// loop of those would otherwise drain the waiting budget.
func (s *Server) limitStatusReads(c *gin.Context) {
	h := c.GetHeader("Authorization")
	if !strings.HasPrefix(h, "Bearer ") || strings.TrimSpace(h[len("Bearer "):]) == "" {
		c.Next()
		return
	}
	bucket := s.statusRate
	if waitingRead(c) {
		bucket = s.waitRate
	}
	ok, retry := bucket.take(store.HashKey(strings.TrimSpace(h[len("Bearer "):])), time.Now())
	if ok {
		c.Next()
		return
	}
	secs := max(1, int(math.Ceil(retry.Seconds())))
	c.Header("Retry-After", strconv.Itoa(secs))
	abortError(c, http.StatusTooManyRequests, fmt.Sprintf(
		"Too many status reads for this API key (at most %g a second). Retry after %d s, or wait for a change instead of polling: send If-None-Match with ?waitSeconds=, or read /status/<id>/events.",
		bucket.rate, secs))
}

// waitingRead says whether c comes from a client that waits for changes
// instead of polling: the event stream, or a read with a waitSeconds above 0
// and an If-None-Match that names a state (a long poll).
func waitingRead(c *gin.Context) bool {
	if strings.HasSuffix(strings.TrimSuffix(c.Request.URL.Path, "/"), "/events") {
		return true
	}
	inm := strings.TrimSpace(c.GetHeader("If-None-Match"))
	if inm == "" || inm == "*" {
		return false
	}
	d, err := parseWaitSeconds(c.Query("waitSeconds"), time.Second)
	return err == nil && d > 0
}
