package api

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/gin-gonic/gin"
)

// keySlots bounds the /validate/ calls one key runs at once
// (KINFLOW_VALIDATE_PER_KEY): /validate/ is free of quota, so it gets its
// own limit. A call over it is refused at once (429 with
// Retry-After), never queued: a queued call would hold its body.
type keySlots struct {
	mu   sync.Mutex
	max  int
	busy map[int64]int
}

func (k *keySlots) acquire(id int64) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.busy[id] >= k.max {
		return false
	}
	k.busy[id]++
	return true
}

func (k *keySlots) release(id int64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.busy[id]--; k.busy[id] <= 0 {
		delete(k.busy, id)
	}
}

// validateRetryAfter is the Retry-After of a /validate/ refused for the
// key's limit, in seconds: most calls answer within a second or two.
const validateRetryAfter = "2"

// validateLimits takes one of the key's /validate/ slots and returns the
// context the call's checks run under (bounded by KINFLOW_VALIDATE_TIMEOUT_SECONDS)
// and the function that ends it; ok is false when the 429 has been written.
func (s *Server) validateLimits(c *gin.Context) (ctx context.Context, done func(), ok bool) {
	ctx, done = c.Request.Context(), func() {}
	if s.validateSlots != nil {
		if k := authKey(c); k != nil {
			if !s.validateSlots.acquire(k.ID) {
				c.Header("Retry-After", validateRetryAfter)
				abortError(c, http.StatusTooManyRequests, fmt.Sprintf(
					"This key already has %d /validate/ calls running: send this one when one of them has answered.", s.validateSlots.max))
				return nil, nil, false
			}
			done = func() { s.validateSlots.release(k.ID) }
		}
	}
	if s.deps.Config != nil && s.deps.Config.ValidateTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.deps.Config.ValidateTimeout)
		release := done
		done = func() { cancel(); release() }
	}
	return ctx, done, true
}

// validateTimedOut answers a /validate/ whose checks ran past
// KINFLOW_VALIDATE_TIMEOUT_SECONDS; false when err is not that.
func (s *Server) validateTimedOut(c *gin.Context, ctx context.Context, err error) bool {
	if !errors.Is(err, context.DeadlineExceeded) || ctx.Err() == nil || c.Request.Context().Err() != nil {
		return false
	}
	c.Header("Retry-After", validateRetryAfter)
	abortError(c, http.StatusServiceUnavailable, fmt.Sprintf(
		"Checking this file took longer than the %s this server allows one /validate/ call: split it into smaller files.", s.deps.Config.ValidateTimeout.Round(time.Second)))
	return true
}
