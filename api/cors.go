package api

import (
	"net/http"
	"slices"
	"strings"

	"github.com/gin-gonic/gin"
)

// corsAllowHeaders are the request headers browsers may send: the
// reference deployment's list, and Idempotency-Key.
const corsAllowHeaders = "accept, accept-encoding, authorization, content-type, dnt, idempotency-key, origin, user-agent, x-csrftoken, x-requested-with"

// corsExposeHeaders lets browser clients read kinflow's own response headers.
const corsExposeHeaders = "X-Request-ID, Idempotent-Replayed, X-RateLimit-Limit, X-RateLimit-Remaining, X-RateLimit-Reset, Content-Disposition"

// cors applies CORS to every path. An origin listed by name is echoed back
// with Access-Control-Allow-Credentials: true, as the reference deployment
// does. The wildcard "*" never carries credentials: echoing any origin with
// credentials would let every site on the web make credentialed requests, a
// combination the well-kept CORS libraries refuse (gin-contrib/cors panics on
// it, the Fetch standard forbids "*" with credentials). kinflow's API keys
// travel in the Authorization header, which a browser sends under "*" as long
// as the page does not ask for credentials mode, so the reference's browser
// clients keep working. A preflight is answered here, before authentication,
// with 204.
func (s *Server) cors(c *gin.Context) {
	origin := c.GetHeader("Origin")
	if origin == "" {
		c.Next()
		return
	}
	h := c.Writer.Header()
	h.Add("Vary", "Origin")
	switch s.originAllowed(origin) {
	case originNamed:
		h.Set("Access-Control-Allow-Origin", origin)
		h.Set("Access-Control-Allow-Credentials", "true")
	case originAny:
		h.Set("Access-Control-Allow-Origin", "*")
	default:
		c.Next()
		return
	}
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

// originGrant is what CORS grants an origin.
type originGrant int

const (
	originRefused originGrant = iota
	// originAny: allowed only through "*", so without credentials.
	originAny
	// originNamed: listed by name, so with credentials.
	originNamed
)

// originAllowed says whether origin is listed by name (credentials allowed),
// allowed only by the wildcard (no credentials), or refused.
func (s *Server) originAllowed(origin string) originGrant {
	var allowed []string
	if s.deps.Config != nil {
		allowed = s.deps.Config.CORSOrigins
	}
	if slices.ContainsFunc(allowed, func(a string) bool { return strings.EqualFold(strings.TrimRight(a, "/"), origin) }) {
		return originNamed
	}
	if slices.Contains(allowed, "*") {
		return originAny
	}
	return originRefused
}
