package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"path/filepath"
	"strings"
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
// of a submit, starts it again, and checks the invariant of a crash-safe
// submit (docs/api.md, "Choices", Submit) within the reconcile bound: either
// the job runs to completion, charged once and counted once, or its charge is
// refunded and nothing of it is left (no job row, no media folder).
func TestAPIKilledMidSubmitLosesNothing(t *testing.T) {
	s := newStack(t, map[string]string{"KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS": "1"}, nil)
	st, keyID := s.openStoreAndKey(t)
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
			waitNoneSubmitting(t, st, 20*time.Second)
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

// TestAPIKilledAtRandomDuringSubmits kills the api at random moments: submits
// of 3,000 rows with the api killed by SIGKILL from outside at a random
// moment (0–80 ms after the request went out: a submit of that size takes
// about as long here), then restarted. After the
// reconcile bound nothing is Submitting, the key's charge equals the rows of
// the jobs that exist (requested − refunded), and no job folder is left
// without its job.
func TestAPIKilledAtRandomDuringSubmits(t *testing.T) {
	s := newStack(t, map[string]string{"KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS": "1", "KINFLOW_DEFAULT_DAILY_QUOTA": "1000000"}, nil)
	st, keyID := s.openStoreAndKey(t)
	csv := killTestCSV()
	const tries = 12
	answered := 0
	for try := range tries {
		delay := time.Duration(mrand.IntN(80)) * time.Millisecond
		res := make(chan int, 1)
		go func() { code, _ := s.rawSubmit(csv); res <- code }()
		time.Sleep(delay)
		s.kill9("api")
		if code := <-res; code == 201 {
			answered++
		} else if code != 0 {
			t.Errorf("try %d: submit answered %d", try+1, code)
		}
		s.start("api")
		s.waitHealthy()
		t.Logf("try %d: killed after %v", try+1, delay)
	}
	waitNoneSubmitting(t, st, 30*time.Second)
	var jobs []store.Job
	st.DB.Where("key_id = ?", keyID).Find(&jobs)
	var want int64
	known := map[string]bool{}
	for _, j := range jobs {
		want += int64(j.RequestedRows - j.RefundedRows)
		known[j.ID] = true
	}
	used, err := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d tries, %d answered 201 before the kill, %d jobs exist, %d rows charged", tries, answered, len(jobs), used)
	if len(jobs) < answered {
		t.Errorf("%d submits answered 201 but only %d jobs exist", answered, len(jobs))
	}
	if used != want {
		t.Fatalf("charged %d rows, but the jobs that exist account for %d", used, want)
	}
	entries, _ := os.ReadDir(filepath.Join(s.media, "jobs"))
	for _, e := range entries {
		if !known[e.Name()] {
			t.Errorf("media/jobs/%s left without a job", e.Name())
		}
	}
}

// waitNoneSubmitting waits until no job is left Submitting (the
// reconciler has finished or undone every cut-off submit).
func waitNoneSubmitting(t *testing.T, st *store.Store, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var n int64
		st.DB.Raw("SELECT COUNT(*) FROM jobs WHERE status = ?", store.JobSubmitting).Scan(&n)
		if n == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d jobs still Submitting %v after the restart", n, timeout)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// openStoreAndKey opens the stack's database (closed at the test's end) and
// returns it with the id of the stack's API key.
func (s *stack) openStoreAndKey(t *testing.T) (*store.Store, int64) {
	t.Helper()
	st, err := store.Open(t.Context(), s.env["KINFLOW_DATABASE_URL"])
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { st.Close() })
	var keyID int64
	if err := st.DB.Raw("SELECT id FROM api_keys ORDER BY id DESC LIMIT 1").Scan(&keyID).Error; err != nil {
		t.Fatal(err)
	}
	return st, keyID
}

// killTestCSV is the 3,000-row input of the kill-during-submit tests: four
// distinct sequences, so the jobs that do run are cheap, and a submit about
// as long as the kill's random delay.
func killTestCSV() string {
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate\n")
	for i := range 3000 {
		fmt.Fprintf(&b, "MKTAYIAKQRQISFVKSHFSRQ%s,CCO\n", strings.Repeat("A", i%4))
	}
	return b.String()
}
