package api

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestSubmitWhileMediaFullIs503AndChargesNothing: with less free
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

// TestMediaRootAwayRefusesAndRecovers: with the media root renamed away
// (a lost network mount), a submit answers 503 "Storage unavailable" with
// Retry-After, naming no path, and leaves the quota and the jobs as they
// were and nothing at the old path; a completed job's result (CSV and
// JSON) answers 503 with Retry-After, not 500; /health/ fails with
// "media": "missing". An empty folder put at the path (a mount point
// without its mount) is refused the same way and stays empty. Once the
// root is back, health is ok, the result reads 200 with its rows and
// submits go through. On both databases.
func TestMediaRootAwayRefusesAndRecovers(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		// Temporal answers: the media root is what fails the probe.
		h := newHarness(t, st, func(_ *config.Config, d *Deps) { d.TemporalHealth = func(context.Context) error { return nil } })
		root, err := mediaroot.Open(h.cfg.MediaRoot, mediaroot.Options{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(root.Close)
		if err := root.Check(); err != nil {
			t.Fatal(err)
		}
		if r := h.do("GET", "/api/v1/health/", "198.51.100.137", "", nil); r.Code != 200 {
			t.Fatalf("health before: %d %s", r.Code, r.Body)
		}
		const ip = "198.51.100.137"
		key := h.newKey(ip)
		keyID := authKeyID(t, st, ip)
		r := h.submitCSV(ip, key, csvRows(2), kcatB...)
		wantStatus(t, r, 201)
		id := r.json(t)["jobId"].(string)
		const output = "Protein Sequence,Substrate,kcat\n" + seqA + ",CCO,1.5\n"
		if err := os.WriteFile(filepath.Join(h.cfg.MediaRoot, "jobs", id, "output.csv"), []byte(output), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := st.FinishJob(t.Context(), id, store.JobCompleted, "", store.Refund{}, true, "jobs/"+id+"/output.csv", t0); err != nil {
			t.Fatal(err)
		}
		if r := h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil); r.Code != 200 || r.Body.String() != output {
			t.Fatalf("result before: %d %s", r.Code, r.Body)
		}
		usedBefore, _ := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(t0))
		countJobs := func() int64 {
			var n int64
			st.DB.Model(&store.Job{}).Count(&n)
			return n
		}
		jobsBefore := countJobs()

		path := h.cfg.MediaRoot
		aside := path + ".aside"
		if err := os.Rename(path, aside); err != nil {
			t.Fatal(err)
		}
		leaks := func(r resp) bool {
			b := r.Body.String()
			return strings.Contains(b, path) || strings.Contains(b, "jobs/") || strings.Contains(b, "/tmp")
		}
		refused := func(when string) {
			t.Helper()
			// The first submit may meet the identity check's reuse (a
			// second) and fail at its write instead: 503 either way.
			r := h.submitCSV(ip, key, csvRows(3), kcatB...)
			wantStatus(t, r, 503)
			msg, _ := r.json(t)["error"].(string)
			if r.Header().Get("Retry-After") == "" || !strings.Contains(msg, "Storage unavailable") || !strings.Contains(msg, "Nothing was charged") || leaks(r) {
				t.Fatalf("submit %s: %v %s", when, r.Header(), r.Body)
			}
			if used, _ := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(t0)); used != usedBefore || countJobs() != jobsBefore {
				t.Fatalf("submit %s: %d rows charged (was %d), %d jobs (was %d)", when, used, usedBefore, countJobs(), jobsBefore)
			}
			for _, q := range []string{"", "?format=json"} {
				r := h.do("GET", "/api/v1/result/"+id+"/"+q, ip, key, nil)
				wantStatus(t, r, 503)
				if r.Header().Get("Retry-After") == "" || !strings.Contains(r.json(t)["error"].(string), "Storage unavailable") || leaks(r) {
					t.Fatalf("result%s %s: %v %s", q, when, r.Header(), r.Body)
				}
			}
			r = h.do("GET", "/api/v1/health/", ip, "", nil)
			wantStatus(t, r, 503)
			if b := r.json(t); b["status"] != "unavailable" || b["checks"].(map[string]any)["media"] != "missing" {
				t.Fatalf("health %s: %s", when, r.Body)
			}
		}
		refused("while the root is away")
		if _, err := os.Lstat(path); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("the media root was recreated: %v", err)
		}
		// An empty folder at the path: not adopted, nothing written in it.
		if err := os.Mkdir(path, 0o755); err != nil {
			t.Fatal(err)
		}
		_ = root.CheckNow()
		refused("with an empty folder at the path")
		if es, _ := os.ReadDir(path); len(es) != 0 {
			t.Fatalf("the empty folder holds %d entries", len(es))
		}
		if err := os.Remove(path); err != nil {
			t.Fatal(err)
		}

		if err := os.Rename(aside, path); err != nil {
			t.Fatal(err)
		}
		_ = root.CheckNow()
		r = h.do("GET", "/api/v1/health/", ip, "", nil)
		if b := r.json(t); r.Code != 200 || b["checks"].(map[string]any)["media"] != "ok" {
			t.Fatalf("health after: %d %s", r.Code, r.Body)
		}
		if r := h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil); r.Code != 200 || r.Body.String() != output {
			t.Fatalf("result after: %d %s", r.Code, r.Body)
		}
		wantStatus(t, h.do("GET", "/api/v1/result/"+id+"/?format=json", ip, key, nil), 200)
		wantStatus(t, h.submitCSV(ip, key, csvRows(3), kcatB...), 201)
	})
}
