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

// TestRetentionExpiresJobFolders (issue 33): a finished job's result is
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
