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
	lru "github.com/hashicorp/golang-lru/v2"

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
// Waiting reads (waitingRead: the event stream, a long poll that sends an
// ETag, and the first read of a wait) draw from a bucket of their own, so
// that a key's client polling in a loop cannot starve the same key's clients
// that wait the way the 429 asks them to (seen in `make bench-load`: 8
// looping readers on the jobs' key cut the burst's waiters to 0.2 jobs/s).
// A waiting read costs one request per change, and is still bounded per key.
func (s *Server) limitStatusReads(c *gin.Context) {
	h := c.GetHeader("Authorization")
	if !strings.HasPrefix(h, "Bearer ") || strings.TrimSpace(h[len("Bearer "):]) == "" {
		c.Next()
		return
	}
	hash := store.HashKey(strings.TrimSpace(h[len("Bearer "):]))
	now := time.Now()
	bucket := s.statusRate
	if s.waitingRead(c, hash, now) {
		bucket = s.waitRate
	}
	ok, retry := bucket.take(hash, now)
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
// instead of polling: the event stream, a read with a waitSeconds above 0
// and an If-None-Match that names a state (a long poll), or the first read
// of a wait (waitSeconds without an ETag, which it has yet to learn) when
// it is the first such read of its key for that job within
// firstReadWindow. Repeated ones are plain reads: a loop of
// `?waitSeconds=1` reads that never send the ETag waits for nothing, and
// would otherwise drain the budget of the key's real long polls.
func (s *Server) waitingRead(c *gin.Context, keyHash string, now time.Time) bool {
	path := strings.TrimSuffix(c.Request.URL.Path, "/")
	if strings.HasSuffix(path, "/events") {
		return true
	}
	d, err := parseWaitSeconds(c.Query("waitSeconds"), time.Second)
	if err != nil || d <= 0 {
		return false
	}
	switch inm := strings.TrimSpace(c.GetHeader("If-None-Match")); inm {
	case "*":
		return false
	case "":
		return s.firstReads.first(keyHash+" "+path, now)
	}
	return true
}

// firstReadWindow is how long a wait's first read of one job counts once
// among its key's waiting reads.
const firstReadWindow = 10 * time.Second

// firstReads remembers the waits' first reads of the last firstReadWindow,
// by key hash and path: the most recent firstReadsMax of them (a read that
// fell out counts as waiting once more, which is harmless).
type firstReads struct {
	once sync.Once
	seen *lru.Cache[string, time.Time]
}

const firstReadsMax = 65536

// first reports whether id's first read is the first within the window,
// and records it.
func (f *firstReads) first(id string, now time.Time) bool {
	f.once.Do(func() { f.seen, _ = lru.New[string, time.Time](firstReadsMax) })
	if at, ok := f.seen.Get(id); ok && now.Sub(at) < firstReadWindow {
		return false
	}
	f.seen.Add(id, now)
	return true
}
