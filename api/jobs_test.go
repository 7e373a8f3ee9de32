package api

import (
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// TestJobsList: GET /jobs/ lists the caller's own jobs newest first, pages
// through them with nextCursor without a gap or a repeat (two jobs share a
// submit instant), filters by status, refuses bad parameters, and never
// shows another key's jobs.
func TestJobsList(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip, ip2 = "198.51.100.60", "198.51.100.61"
		key, key2 := h.newKey(ip), h.newKey(ip2)
		var mine []string
		for i := range 5 {
			if i != 2 { // jobs 1 and 2 share an instant
				h.clock.Set(t0.Add(time.Duration(i) * time.Second))
			}
			r := h.submitCSV(ip, key, csvRows(i+1), kcatB...)
			wantStatus(t, r, 201)
			mine = append(mine, r.json(t)["jobId"].(string))
		}
		r := h.submitCSV(ip2, key2, csvRows(2), kcatB...)
		wantStatus(t, r, 201)
		theirs := r.json(t)["jobId"].(string)
		st.DB.Model(&store.Job{}).Where("id = ?", mine[0]).Updates(map[string]any{"status": store.JobCompleted, "started_at": t0, "completed_at": t0.Add(time.Minute)})

		// Pages of 2, newest first, joined: every own job once, in order.
		var got []string
		cursor := ""
		for pages := 0; ; pages++ {
			if pages > 5 {
				t.Fatal("pagination does not end")
			}
			q := "/api/v1/jobs/?limit=2"
			if cursor != "" {
				q += "&cursor=" + url.QueryEscape(cursor)
			}
			r := h.do("GET", q, ip, key, nil)
			wantStatus(t, r, 200)
			b := r.json(t)
			for _, j := range b["jobs"].([]any) {
				got = append(got, j.(map[string]any)["jobId"].(string))
			}
			if b["nextCursor"] == nil {
				break
			}
			cursor = b["nextCursor"].(string)
		}
		// Newest first; the two of one instant by id, descending.
		if len(got) != 5 || got[0] != mine[4] || got[1] != mine[3] || got[4] != mine[0] {
			t.Fatalf("order %v, submitted %v", got, mine)
		}
		seen := map[string]bool{}
		for _, id := range got {
			if seen[id] || id == theirs {
				t.Fatalf("list %v repeats a job or shows another key's", got)
			}
			seen[id] = true
		}
		// One item in full.
		r = h.do("GET", "/api/v1/jobs?status=completed", ip, key, nil)
		wantStatus(t, r, 200)
		jobs := r.json(t)["jobs"].([]any)
		if len(jobs) != 1 {
			t.Fatalf("completed: %s", r.Body)
		}
		j := jobs[0].(map[string]any)
		if j["jobId"] != mine[0] || j["status"] != "Completed" || j["rows"] != 1.0 || j["targets"].([]any)[0] != "kcat" ||
			j["methods"].(map[string]any)["kcat"] != "B" || j["resultUrl"] != "/api/v1/result/"+mine[0]+"/" ||
			j["startedAt"] == nil || j["completedAt"] == nil || j["submittedAt"] != isoformat(t0) || j["inputName"] != "input.csv" {
			t.Fatalf("item %v", j)
		}
		r = h.do("GET", "/api/v1/jobs/?status=Pending,Failed", ip, key, nil)
		if n := len(r.json(t)["jobs"].([]any)); n != 4 {
			t.Fatalf("pending: %d", n)
		}
		// The other key sees only its job.
		r = h.do("GET", "/api/v1/jobs/", ip2, key2, nil)
		if js := r.json(t)["jobs"].([]any); len(js) != 1 || js[0].(map[string]any)["jobId"] != theirs {
			t.Fatalf("other key: %s", r.Body)
		}
		// A cursor made from another key's job shows nothing of it.
		var tj store.Job
		st.DB.Take(&tj, "id = ?", theirs)
		r = h.do("GET", "/api/v1/jobs/?cursor="+encodeJobCursor(tj.SubmittedAt.Add(time.Second), tj.ID), ip, key, nil)
		for _, j := range r.json(t)["jobs"].([]any) {
			if j.(map[string]any)["jobId"] == theirs {
				t.Fatal("another key's job through a cursor")
			}
		}
		for _, bad := range []string{"?limit=0", "?limit=101", "?limit=x", "?status=Done", "?cursor=!!", "?cursor=bm9wZQ"} {
			wantStatus(t, h.do("GET", "/api/v1/jobs/"+bad, ip, key, nil), http.StatusBadRequest)
		}
		wantStatus(t, h.do("GET", "/api/v1/jobs/", ip, "", nil), http.StatusUnauthorized)
		wantStatus(t, h.do("POST", "/api/v1/jobs/", ip, key, nil), http.StatusMethodNotAllowed)
	})
}

// TestJobsListInputName: each job of GET /jobs/ names the file its input was
// uploaded as (its base name, without control characters, even when the
// client sent a path), and a job submitted as JSON has no inputName.
func TestJobsListInputName(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		const ip = "198.51.100.62"
		key := h.newKey(ip)
		h.clock.Set(t0)
		body, ct := multipartBody(t, `C:\wells\plate 1\tb.csv`, csvRows(1), kcatB...)
		wantStatus(t, h.do("POST", "/api/v1/submit/", ip, key, body, "Content-Type", ct), 201)
		h.clock.Set(t0.Add(time.Second))
		wantStatus(t, h.submitJSON(ip, key, map[string]any{"data": []map[string]any{{"Protein Sequence": seqA, "Substrate": "CCO"}},
			"targets": []string{"kcat"}, "methods": map[string]string{"kcat": "B"}}), 201)
		r := h.do("GET", "/api/v1/jobs/", ip, key, nil)
		wantStatus(t, r, 200)
		jobs := r.json(t)["jobs"].([]any)
		if len(jobs) != 2 {
			t.Fatalf("jobs: %s", r.Body)
		}
		if name, ok := jobs[0].(map[string]any)["inputName"]; ok {
			t.Errorf("the JSON job has inputName %v", name)
		}
		if name := jobs[1].(map[string]any)["inputName"]; name != "tb.csv" {
			t.Errorf("the uploaded job's inputName %v, want tb.csv", name)
		}
	})
}
