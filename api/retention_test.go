package api

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestRetentionExpiresJobFolders: a finished job's result is
// served until KINFLOW_JOB_RETENTION_DAYS after it ended; then the result
// answers 410 with a clear message, the jobs list says expired (and gives
// no resultUrl), and the retention pass removes its folder once. A job
// inside the period is untouched. On both databases.
func TestRetentionExpiresJobFolders(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		h.cfg.JobRetention = 2 * 24 * time.Hour
		ctx := t.Context()
		const ip = "198.51.100.134"
		key := h.newKey(ip)
		var ids []string
		for range 2 {
			body, ct := multipartBody(t, "in.csv", "Protein Sequence,Substrate\n"+seqA+",CCO\n", "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
			r := h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct)
			wantStatus(t, r, 201)
			ids = append(ids, r.json(t)["jobId"].(string))
		}
		// The first ends now, the second a day and a half later.
		for i, id := range ids {
			at := t0.Add(time.Duration(i) * 36 * time.Hour)
			out := filepath.Join(h.cfg.MediaRoot, "jobs", id, "output.csv")
			if err := os.WriteFile(out, []byte("Protein Sequence,Substrate,kcat\n"+seqA+",CCO,1.5\n"), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := st.FinishJob(ctx, id, store.JobCompleted, "", store.Refund{}, true, "jobs/"+id+"/output.csv", at); err != nil {
				t.Fatal(err)
			}
		}
		h.clock.Set(t0.Add(47 * time.Hour))
		wantStatus(t, h.do("GET", "/api/v1/result/"+ids[0]+"/", ip, key, nil), 200)
		if n, err := h.srv.ExpireJobs(ctx, 10); err != nil || n != 0 {
			t.Fatalf("pass inside the period: %d %v", n, err)
		}

		h.clock.Set(t0.Add(49 * time.Hour))
		r := h.do("GET", "/api/v1/result/"+ids[0]+"/", ip, key, nil)
		wantStatus(t, r, 410)
		if msg := r.json(t)["error"].(string); !strings.Contains(msg, "expired") || !strings.Contains(msg, "2 days") {
			t.Fatalf("410 message: %s", msg)
		}
		wantStatus(t, h.do("GET", "/api/v1/result/"+ids[0]+"/?format=json", ip, key, nil), 410)
		wantStatus(t, h.do("GET", "/api/v1/result/"+ids[1]+"/", ip, key, nil), 200)

		if n, err := h.srv.ExpireJobs(ctx, 10); err != nil || n != 1 {
			t.Fatalf("pass after the period: %d %v", n, err)
		}
		if _, err := os.Stat(filepath.Join(h.cfg.MediaRoot, "jobs", ids[0])); !os.IsNotExist(err) {
			t.Fatalf("expired job's folder still there: %v", err)
		}
		if _, err := os.Stat(filepath.Join(h.cfg.MediaRoot, "jobs", ids[1], "output.csv")); err != nil {
			t.Fatalf("kept job's result: %v", err)
		}
		if n, err := h.srv.ExpireJobs(ctx, 10); err != nil || n != 0 {
			t.Fatalf("second pass: %d %v", n, err)
		}
		wantStatus(t, h.do("GET", "/api/v1/result/"+ids[0]+"/", ip, key, nil), 410)
		// The status says so too, and points to no result.
		for i, id := range ids {
			st := h.do("GET", "/api/v1/status/"+id+"/", ip, key, nil).json(t)
			expired, _ := st["expired"].(bool)
			_, hasResult := st["resultUrl"]
			if expired != (i == 0) || hasResult != (i == 1) || st["status"] != "Completed" {
				t.Fatalf("status of job %d: expired %v, resultUrl %v: %v", i, expired, st["resultUrl"], st)
			}
		}

		r = h.do("GET", "/api/v1/jobs/", ip, key, nil)
		wantStatus(t, r, 200)
		for _, it := range r.json(t)["jobs"].([]any) {
			m := it.(map[string]any)
			expired, _ := m["expired"].(bool)
			_, hasResult := m["resultUrl"]
			switch m["jobId"] {
			case ids[0]:
				if !expired || hasResult || m["status"] != "Completed" {
					t.Fatalf("expired job in the list: %v", m)
				}
			case ids[1]:
				if expired || !hasResult {
					t.Fatalf("kept job in the list: %v", m)
				}
			}
		}
	})
}

// TestResultOfAFailedJob: /result/ of a Failed job is a 409 that names the
// failure and does not ask to poll for a completion that never comes.
func TestResultOfAFailedJob(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.135"
		key := h.newKey(ip)
		id := h.submitted(ip, key)
		r := h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil)
		wantStatus(t, r, 409)
		if msg := r.json(t)["error"].(string); !strings.Contains(msg, "Poll /api/v1/status/") {
			t.Fatalf("pending job's result: %s", msg)
		}
		if _, err := st.FinishJob(t.Context(), id, store.JobFailed, "Method B prediction failed: the engine timed out", store.Refund{}, true, "", t0.Add(time.Minute)); err != nil {
			t.Fatal(err)
		}
		r = h.do("GET", "/api/v1/result/"+id+"/", ip, key, nil)
		wantStatus(t, r, 409)
		msg := r.json(t)["error"].(string)
		if !strings.Contains(msg, "status: Failed") || !strings.Contains(msg, "the engine timed out") || strings.Contains(msg, "Poll") {
			t.Fatalf("failed job's result: %s", msg)
		}
	})
}
