package api

import (
	"os"
	"path/filepath"
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

// TestSubmitWhileMediaUnwritableIs503AndChargesNothing: a submit whose
// input cannot be written because the media root cannot be written (here
// its jobs folder is a regular file, so creating the job's folder fails
// with ENOTDIR, as it does for root too; read-only and permission errors are
// told apart the same way, fsutil's TestUnwritable) answers 503 "Storage
// unavailable" with Retry-After and the full quota remaining, names no
// server path, leaves no job row, no charge and nothing under the media
// root; once the media root is fixed, submits go through.
func TestSubmitWhileMediaUnwritableIs503AndChargesNothing(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.136"
		key := h.newKey(ip)
		jobs := filepath.Join(h.cfg.MediaRoot, "jobs")
		const planted = "not a folder\n"
		if err := os.WriteFile(jobs, []byte(planted), 0o644); err != nil {
			t.Fatal(err)
		}
		r := h.submitCSV(ip, key, csvRows(3), kcatB...)
		wantStatus(t, r, 503)
		msg, _ := r.json(t)["error"].(string)
		if r.Header().Get("Retry-After") == "" || !strings.Contains(msg, "Storage unavailable") || !strings.Contains(msg, "Nothing was charged") ||
			strings.Contains(r.Body.String(), h.cfg.MediaRoot) || strings.Contains(r.Body.String(), "jobs/") {
			t.Fatalf("answer: %v %s", r.Header(), r.Body)
		}
		if got, want := r.Header().Get("X-RateLimit-Remaining"), r.Header().Get("X-RateLimit-Limit"); got == "" || got != want {
			t.Fatalf("X-RateLimit-Remaining %q after a refused submit, limit %q", got, want)
		}
		var n int64
		st.DB.Model(&store.Job{}).Count(&n)
		used, _ := st.QuotaUsed(t.Context(), authKeyID(t, st, ip), store.QuotaDay(t0))
		if n != 0 || used != 0 {
			t.Fatalf("a refused submit left %d jobs, %d rows charged", n, used)
		}
		if b, err := os.ReadFile(jobs); err != nil || string(b) != planted {
			t.Fatalf("the media root's jobs file: %q, %v", b, err)
		}
		if es, _ := os.ReadDir(h.cfg.MediaRoot); len(es) != 1 {
			t.Fatalf("the media root holds %d entries, want the planted file only", len(es))
		}
		if err := os.Remove(jobs); err != nil {
			t.Fatal(err)
		}
		wantStatus(t, h.submitCSV(ip, key, csvRows(3), kcatB...), 201)
	})
}
