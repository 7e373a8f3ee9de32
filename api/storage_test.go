package api

import (
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestSubmitWhileMediaFullIs503AndChargesNothing (issue 33): with less free
// space on the media root than KINFLOW_MEDIA_MIN_FREE_MB (here a minimum
// no disk meets), a submit answers 503 "Storage full" with Retry-After and
// charges nothing, /health/ says the media root is full, and
// once the minimum is met again submits go through. On both databases.
// (internal/e2e's TestFullDiskJobsEndAndRecover fills a real tmpfs.)
func TestSubmitWhileMediaFullIs503AndChargesNothing(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.135"
		key := h.newKey(ip)
		h.cfg.MediaMinFreeBytes = 1 << 62
		body, ct := multipartBody(t, "in.csv", "Protein Sequence,Substrate\n"+seqA+",CCO\n", "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
		r := h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct)
		wantStatus(t, r, 503)
		if r.Header().Get("Retry-After") == "" || !strings.Contains(r.json(t)["error"].(string), "Storage full") {
			t.Fatalf("answer: %v %s", r.Header(), r.Body)
		}
		var jobs int64
		st.DB.Model(&store.Job{}).Count(&jobs)
		used, _ := st.QuotaUsed(t.Context(), authKeyID(t, st, ip), store.QuotaDay(t0))
		if jobs != 0 || used != 0 {
			t.Fatalf("a refused submit left %d jobs, %d rows charged", jobs, used)
		}
		r = h.do("GET", "/api/v1/health/", ip, "", nil)
		if checks := r.json(t)["checks"].(map[string]any); checks["media"] != "full" {
			t.Fatalf("health checks: %v", checks)
		}
		h.cfg.MediaMinFreeBytes = 1
		body, ct = multipartBody(t, "in.csv", "Protein Sequence,Substrate\n"+seqA+",CCO\n", "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
		wantStatus(t, h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct), 201)
		if checks := h.do("GET", "/api/v1/health/", ip, "", nil).json(t)["checks"].(map[string]any); checks["media"] != "ok" {
			t.Fatalf("health checks after: %v", checks)
		}
	})
}
