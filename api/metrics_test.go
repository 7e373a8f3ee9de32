package api

import (
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestMetricsEndpoint scrapes /metrics after real requests: jobs by state
// from the database, HTTP latency by route pattern (never a job id), quota
// rejections; no key is needed.
func TestMetricsEndpoint(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		m := metrics.New()
		if err := m.RegisterJobs(st.JobCountsByStatus, nil); err != nil {
			t.Fatal(err)
		}
		h := newHarness(t, st, func(c *config.Config, d *Deps) { c.DefaultDailyQuota = 3; d.Metrics = m })
		const ip = "198.51.100.40"
		key := h.newKey(ip)
		ok := []string{"targets", `["kcat"]`, "methods", `{"kcat":"B"}`}
		r := h.submitCSV(ip, key, csvRows(2), ok...)
		wantStatus(t, r, 201)
		id := r.json(t)["jobId"].(string)
		wantStatus(t, h.submitCSV(ip, key, csvRows(2), ok...), 429)
		wantStatus(t, h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil), 200)

		for _, path := range []string{"/metrics", "/metrics/"} {
			r = h.do("GET", path, "192.0.2.9", "", nil)
			wantStatus(t, r, 200)
			if ct := r.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/plain") {
				t.Fatalf("Content-Type %q", ct)
			}
		}
		body := r.Body.String()
		for _, want := range []string{
			`kinflow_jobs{state="Pending"} 1`,
			`kinflow_jobs{state="Completed"} 0`,
			`kinflow_quota_rejections_total 1`,
			`kinflow_http_request_duration_seconds_count{code="201",method="POST",route="/api/v1/submit/",server="api"} 1`,
			`kinflow_http_request_duration_seconds_count{code="429",method="POST",route="/api/v1/submit/",server="api"} 1`,
			`route="/api/v1/status/:id/"`,
			"go_goroutines",
		} {
			if !strings.Contains(body, want) {
				t.Errorf("/metrics lacks %s", want)
			}
		}
		if strings.Contains(body, id) {
			t.Error("a job id became a label value")
		}
		if t.Failed() {
			t.Log(body)
		}
	})
}
