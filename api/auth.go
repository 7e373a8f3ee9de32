package api

import (
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/store"
)

// Error texts of authentication (docs/api.md, "Choices", Authentication).
const (
	msgAuthRequired = "Authentication required. Include the header Authorization: Bearer <your_api_key>."
	msgInvalidKey   = "Invalid or revoked API key."
	msgSuspended    = "This account has been suspended. Contact the service operator."
)

// lastUsedInterval bounds how often a key's last_used_at is written: once a
// minute is precise enough for an operator and spares a write per request.
const lastUsedInterval = time.Minute

const (
	ctxKey   = "kinflow.key"
	ctxLimit = "kinflow.limit"
	ctxIP    = "kinflow.ip"
)

// authenticate is the middleware of every metered route: it resolves the
// bearer key, refuses blocked owners, and sets the X-RateLimit-* headers for
// the key's own limit.
func (s *Server) authenticate(c *gin.Context) { s.authenticateWith(c, false) }

// authenticateStatus is authenticate for status reads: the key's lookup may
// come from the key cache (keycache.go).
func (s *Server) authenticateStatus(c *gin.Context) { s.authenticateWith(c, true) }

func (s *Server) authenticateWith(c *gin.Context, cached bool) {
	h := c.GetHeader("Authorization")
	if !strings.HasPrefix(h, "Bearer ") {
		abortError(c, http.StatusUnauthorized, msgAuthRequired)
		return
	}
	token := strings.TrimSpace(h[len("Bearer "):])
	if token == "" {
		abortError(c, http.StatusUnauthorized, msgInvalidKey)
		return
	}
	hash := store.HashKey(token)
	ctx := c.Request.Context()
	now := s.now()
	day := store.QuotaDay(now)
	var (
		k   *store.AuthKey
		err error
		hit bool
		gen uint64
	)
	if cached {
		k, gen, hit = s.keys.get(hash, day)
	}
	if !hit {
		k, err = s.deps.Store.ActiveKeyByHash(ctx, hash, day)
	}
	if errors.Is(err, store.ErrNotFound) {
		abortError(c, http.StatusUnauthorized, msgInvalidKey)
		return
	}
	if err != nil {
		s.internalError(c, "auth.lookup_failed", err)
		return
	}
	// The row was found by its hash; the constant-time compare keeps the
	// final equality check free of timing differences all the same.
	if subtle.ConstantTimeCompare([]byte(k.KeyHash), []byte(hash)) != 1 {
		abortError(c, http.StatusUnauthorized, msgInvalidKey)
		return
	}
	if k.IsBlocked {
		abortError(c, http.StatusForbidden, msgSuspended)
		return
	}
	if k.LastUsedAt == nil || now.Sub(*k.LastUsedAt) >= lastUsedInterval {
		if err := s.deps.Store.TouchKeyUsed(ctx, k.ID, now, now.Add(-lastUsedInterval)); err != nil {
			// Bookkeeping only: the request goes on.
			s.log.Warn("auth.touch_failed", "request_id", c.GetString(requestIDKey), "error", err)
		}
		k.LastUsedAt = &now // so that a cached copy does not touch again
	}
	if cached && !hit {
		s.keys.put(hash, day, k, gen)
	}
	limit := s.limitOf(k)
	c.Set(ctxKey, k)
	c.Set(ctxLimit, limit)
	setRateHeaders(c, limit, limit-k.UsedToday, now)
	c.Next()
}

// limitOf is k's daily limit, per key and not per caller IP: 0 when its owner
// is blocked, its custom limit when set and non-zero, else the default.
func (s *Server) limitOf(k *store.AuthKey) int64 {
	switch {
	case k.IsBlocked:
		return 0
	case k.CustomDailyLimit != nil && *k.CustomDailyLimit > 0:
		return int64(*k.CustomDailyLimit)
	case s.deps.Config != nil && s.deps.Config.DefaultDailyQuota > 0:
		return int64(s.deps.Config.DefaultDailyQuota)
	default:
		return 20000
	}
}

func setRateHeaders(c *gin.Context, limit, remaining int64, now time.Time) {
	c.Header("X-RateLimit-Limit", strconv.FormatInt(limit, 10))
	c.Header("X-RateLimit-Remaining", strconv.FormatInt(max(0, remaining), 10))
	c.Header("X-RateLimit-Reset", strconv.Itoa(store.SecondsToReset(now)))
}

func authKey(c *gin.Context) *store.AuthKey {
	k, _ := c.MustGet(ctxKey).(*store.AuthKey)
	return k
}

// quotaBody is /quota/'s body and the submit response's quota object.
type quotaBody struct {
	Limit           int64 `json:"limit"`
	Used            int64 `json:"used"`
	Remaining       int64 `json:"remaining"`
	ResetsInSeconds int   `json:"resetsInSeconds"`
}

func newQuotaBody(limit, used int64, now time.Time) quotaBody {
	return quotaBody{Limit: limit, Used: used, Remaining: max(0, limit-used), ResetsInSeconds: store.SecondsToReset(now)}
}

// quota answers GET /quota/ for the authenticated key.
func (s *Server) quota(c *gin.Context) {
	k := authKey(c)
	// The authentication query read today's consumption already.
	c.JSON(http.StatusOK, newQuotaBody(c.GetInt64(ctxLimit), k.UsedToday, s.now()))
}
