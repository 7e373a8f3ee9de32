package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// corsAllowHeaders are the request headers the contract allows (WIRE §1.0).
const corsAllowHeaders = "accept, accept-encoding, authorization, content-type, dnt, idempotency-key, origin, user-agent, x-csrftoken, x-requested-with"

// corsExposeHeaders lets browser clients read kinflow's own response headers.
const corsExposeHeaders = "X-Request-ID, Idempotent-Replayed, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Content-Disposition"

// cors applies CORS to every path (WIRE §1.0). Because credentials are
// allowed, the allowed origin is echoed back, never sent as "*". A preflight
// is answered here, before authentication, with 204.
func (s *Server) cors(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" {
		c.Next()
		return
	}
	h := c.Writer.Header()
	h.Add("Vary", "Origin")
	if !s.originAllowed(origin) {
		c.Next()
		return
	}
	h.Set("Access-Control-Allow-Origin", origin)
	h.Set("Access-Control-Allow-Credentials", "true")
	h.Set("Access-Control-Expose-Headers", corsExposeHeaders)
	if c.Request.Method == http.MethodOptions && c.GetHeader("Access-Control-Request-Method") != "" {
		h.Set("Access-Control-Allow-Methods", "DELETE, GET, OPTIONS, PATCH, POST, PUT")
		h.Set("Access-Control-Allow-Headers", corsAllowHeaders)
		// A day: browsers cap it lower anyway; it only spares repeat preflights.
		h.Set("Access-Control-Max-Age", "86400")
		c.AbortWithStatus(http.StatusNoContent)
		return
	}
	c.Next()
}

func (s *Server) originAllowed(origin string) bool {
	var allowed []string
	if s.deps.Config != nil {
		allowed = s.deps.Config.CORSOrigins
	}
	return slices.ContainsFunc(allowed, func(a string) bool {
		return a == "*" || strings.EqualFold(strings.TrimRight(a, "/"), origin)
	})
}
