package api

import (
	"time"

	"github.com/gin-gonic/gin"

	"github.com/kinflow/kinflow/internal/metrics"
)

// observe records every request's latency by route pattern (c.FullPath, so
// job ids never become label values; unmatched paths share one label).
func (s *Server) observe(c *gin.Context) {
	start := time.Now()
	c.Next()
	s.deps.Metrics.HTTPRequest("api", c.Request.Method, c.FullPath(), c.Writer.Status(), time.Since(start))
}

// metricsHandler serves the process's registry in the Prometheus text
// format; without Deps.Metrics an empty registry of its own.
func (s *Server) metricsHandler() gin.HandlerFunc {
	m := s.deps.Metrics
	if m == nil {
		m = metrics.New()
	}
	h := m.Handler()
	return func(c *gin.Context) { h.ServeHTTP(c.Writer, c.Request) }
}
