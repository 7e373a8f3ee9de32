package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// healthResponse keeps the reference deployment's four keys first, in order,
// then adds kinflow's dependency checks.
type healthResponse struct {
	Status    string            `json:"status"`
	Service   string            `json:"service"`
	Version   string            `json:"version"`
	Timestamp string            `json:"timestamp"`
	Checks    map[string]string `json:"checks"`
}

// health answers 200 {"status":"ok",…} when the database and Temporal answer
// and the media root is there with its identity, else 503 with
// "status":"unavailable" and the failing check named.
func (s *Server) health(c *gin.Context) {
	// Each check gets its own short deadline: a health probe must answer
	// quickly even when a dependency hangs.
	check := func(p Pinger) string {
		if p == nil {
			return "not configured"
		}
		ctx, cancel := context.WithTimeout(c.Request.Context(), 2*time.Second)
		defer cancel()
		if err := p(ctx); err != nil {
			return "unreachable"
		}
		return "ok"
	}
	var db Pinger
	if s.deps.Store != nil {
		db = s.deps.Store.Ping
	}
	checks := map[string]string{"database": check(db), "temporal": check(s.deps.TemporalHealth)}
	status, code := "ok", http.StatusOK
	for _, v := range checks {
		if v != "ok" {
			status, code = "unavailable", http.StatusServiceUnavailable
		}
	}
	// storage.go: "media" (and "database_storage" after a write failed
	// for lack of space) is "ok" or "full"; full storage refuses submits
	// (503) but reads still work, so it does not make /health/ fail. A
	// media root that is not there with its identity fails reads and
	// writes alike: it does.
	if s.storageChecks(checks) {
		status, code = "unavailable", http.StatusServiceUnavailable
	}
	// mmseqs is reported when a similarity dataset is configured, but it
	// does not make the API unavailable: only /validate/'s runSimilarity
	// and the similarity columns depend on it.
	if sim := s.deps.Similarity; sim != nil && len(sim.Present()) > 0 {
		checks["mmseqs"] = check(sim.Searcher.Available)
	}
	c.JSON(code, healthResponse{Status: status, Service: "kinflow API", Version: "1", Timestamp: isoformat(s.now()), Checks: checks})
}
