package api

import (
	"crypto/rand"
	"encoding/hex"
	"errors"
	"net/http"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/store"
)

// keySuffixOf is how a key is shown after generation: an ellipsis and its
// last 6 characters, in GET and generate alike (docs/api.md, "Choices",
// keySuffix), where the reference deployment sends the 6 characters alone.
func keySuffixOf(suffix string) string { return "…" + suffix }

// newAPIKey draws a key: "ak_" + 64 lowercase hex from 32 CSPRNG bytes.
func newAPIKey() (string, error) {
	var b [32]byte
	if _, err := rand.Read(b[:]); err != nil {
		return "", err
	}
	return "ak_" + hex.EncodeToString(b[:]), nil
}

type keyStatusBody struct {
	HasKey    bool   `json:"hasKey"`
	KeySuffix string `json:"keySuffix,omitempty"`
}

// keyStatus answers GET /api/api-key/: whether the caller IP has an active key.
func (s *Server) keyStatus(c *gin.Context) {
	k, err := s.deps.Store.ActiveKeyForIP(c.Request.Context(), s.callerIP(c))
	if errors.Is(err, store.ErrNotFound) {
		c.JSON(http.StatusOK, keyStatusBody{})
		return
	}
	if err != nil {
		s.internalError(c, "apikey.status_failed", err)
		return
	}
	c.JSON(http.StatusOK, keyStatusBody{HasKey: true, KeySuffix: keySuffixOf(k.KeySuffix)})
}

type generatedKeyBody struct {
	Key       string `json:"key"`
	KeySuffix string `json:"keySuffix"`
	Message   string `json:"message"`
}

// generateKey answers POST /api/api-key/generate/: a new key for the caller
// IP, shown this once.
func (s *Server) generateKey(c *gin.Context) {
	ctx := c.Request.Context()
	ip := s.callerIP(c)
	now := s.now()
	blocked, err := s.deps.Store.TouchUser(ctx, ip, now)
	if err != nil {
		s.internalError(c, "apikey.user_failed", err)
		return
	}
	if blocked {
		abortError(c, http.StatusForbidden, msgSuspended)
		return
	}
	key, err := newAPIKey()
	if err != nil {
		s.internalError(c, "apikey.random_failed", err)
		return
	}
	suffix := key[len(key)-6:]
	_, err = s.deps.Store.ActivateKey(ctx, ip, store.HashKey(key), suffix, now)
	if errors.Is(err, store.ErrConflict) {
		abortError(c, http.StatusConflict, "An active API key already exists for this address. Revoke it first, then generate a new one.")
		return
	}
	if err != nil {
		s.internalError(c, "apikey.generate_failed", err)
		return
	}
	c.JSON(http.StatusCreated, generatedKeyBody{Key: key, KeySuffix: keySuffixOf(suffix),
		Message: "Store this key securely: it is shown only once and cannot be recovered."})
}

// revokeKey answers POST /api/api-key/revoke/.
func (s *Server) revokeKey(c *gin.Context) {
	id, ok, err := s.deps.Store.RevokeActiveKey(c.Request.Context(), s.callerIP(c), s.now())
	s.keys.forget()
	if ok {
		// Its open event streams and held long polls end now.
		s.waits.endKey(id)
	}
	if err != nil {
		s.internalError(c, "apikey.revoke_failed", err)
		return
	}
	if !ok {
		abortError(c, http.StatusNotFound, "No active API key for this address.")
		return
	}
	c.JSON(http.StatusOK, gin.H{"revoked": true})
}

// callerIP is the request's caller address (see clientIP), computed once.
func (s *Server) callerIP(c *gin.Context) string {
	if ip := c.GetString(ctxIP); ip != "" {
		return ip
	}
	var trusted = s.trustedProxies()
	ip := clientIP(c.Request, trusted)
	c.Set(ctxIP, ip)
	return ip
}
