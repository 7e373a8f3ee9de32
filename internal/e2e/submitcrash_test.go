package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
)

// submitCrashPoints are the steps of a submit where the api process kills
// itself with SIGKILL (KINFLOW_TEST_CRASH_POINT, api/reconcile.go), in
// order: after the charge and job row, halfway through writing the input
// (temporary file written, not renamed), after the input, after the
// workflow start, after the job is marked Pending.
var submitCrashPoints = []string{"charged", "input-partial", "input-written", "workflow-started", "queued"}

// TestAPIKilledMidSubmitLosesNothing kills a real api process at every step
// of a submit, starts it again, and checks the invariant of issue 14 within
// the reconcile bound: either the job runs to completion, charged once and
// counted once, or its charge is refunded and nothing of it is left (no job
// row, no media folder).
func TestAPIKilledMidSubmitLosesNothing(t *testing.T) {
	s := newStack(t, map[string]string{"KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS": "1"}, nil)
	st, err := store.Open(t.Context(), s.env["KINFLOW_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	var keyID int64
	if err := st.DB.Raw("SELECT id FROM api_keys ORDER BY id DESC LIMIT 1").Scan(&keyID).Error; err != nil {
		t.Fatal(err)
	}
	const rows = 7
	wantUsed := int64(0)
	for _, point := range submitCrashPoints {
		t.Run(point, func(t *testing.T) {
			var before []string
			st.DB.Raw("SELECT id FROM jobs").Scan(&before)
			s.stopRole("api")
			s.roles["api"] = map[string]string{"KINFLOW_TEST_CRASH_POINT": point}
			s.start("api")
			s.waitHealthy()
			if code, err := s.rawSubmit(csvRows(randSeed(), rows, 60)); err == nil {
				t.Fatalf("submit answered %d; the api should have died at %s", code, point)
			}
			select {
			case <-s.exited["api"]:
			case <-time.After(10 * time.Second):
				t.Fatalf("api still alive after the crash point %s", point)
			}
			s.roles["api"] = nil
			s.start("api")
			s.waitHealthy()

			// Within the bound (1 s age + a pass every second), nothing is
			// left Submitting.
			deadline := time.Now().Add(20 * time.Second)
			for {
				var n int64
				st.DB.Raw("SELECT COUNT(*) FROM jobs WHERE status = ?", store.JobSubmitting).Scan(&n)
				if n == 0 {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%d jobs still Submitting 20 s after the restart", n)
				}
				time.Sleep(200 * time.Millisecond)
			}
			var jobs []store.Job
			st.DB.Where("id NOT IN ?", append(before, "")).Find(&jobs)
			switch point {
			case "charged", "input-partial":
				if len(jobs) != 0 {
					t.Fatalf("job %s (%s) left behind", jobs[0].ID, jobs[0].Status)
				}
			default:
				if len(jobs) != 1 {
					t.Fatalf("%d new jobs, want 1", len(jobs))
				}
				wantUsed += rows
				j := jobs[0]
				if got := s.waitDone(j.ID, 90*time.Second); got.Status != "Completed" {
					t.Fatalf("job %s: %s %s", j.ID, got.Status, got.Error)
				}
				if n := s.countWorkflows("PredictionWorkflow"); n != int64(len(before)+1) {
					t.Errorf("%d prediction workflows for %d jobs", n, len(before)+1)
				}
			}
			used, err := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			if used != wantUsed {
				t.Fatalf("quota used %d, want %d (completed jobs × %d rows)", used, wantUsed, rows)
			}
			// No job folder without a job.
			entries, _ := os.ReadDir(filepath.Join(s.media, "jobs"))
			var all []string
			st.DB.Raw("SELECT id FROM jobs").Scan(&all)
			known := map[string]bool{}
			for _, id := range all {
				known[id] = true
			}
			for _, e := range entries {
				if !known[e.Name()] {
					t.Errorf("media/jobs/%s left without a job", e.Name())
				}
			}
		})
	}
}

// stopRole stops a role with SIGTERM and waits for it.
func (s *stack) stopRole(role string) {
	s.t.Helper()
	if p := s.procs[role]; p != nil && p.Process != nil {
		select {
		case <-s.exited[role]:
			return
		default:
		}
		_ = p.Process.Signal(os.Interrupt)
		select {
		case <-s.exited[role]:
		case <-time.After(15 * time.Second):
			s.kill9(role)
		}
	}
}

// rawSubmit posts a submit and returns the status code, or the transport
// error when the api died before answering.
func (s *stack) rawSubmit(csv string) (int, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csv))
	tj, _ := json.Marshal([]string{"kcat"})
	mj, _ := json.Marshal(map[string]string{"kcat": "B"})
	_ = mw.WriteField("targets", string(tj))
	_ = mw.WriteField("methods", string(mj))
	_ = mw.Close()
	req, err := http.NewRequest("POST", s.base+"/api/v1/submit/", &buf)
	if err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := (&http.Client{Timeout: 30 * time.Second}).Do(req)
	if err != nil {
		return 0, fmt.Errorf("submit: %w", err)
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}
