package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	mrand "math/rand/v2"
	"mime/multipart"
	"net/http"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// submitWithKey posts a kcat/B submit of csv with an Idempotency-Key and
// returns the status code and job id, or the transport error when the api
// died before answering.
func (s *stack) submitWithKey(csv, idem string) (int, string, error) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csv))
	_ = mw.WriteField("targets", `["kcat"]`)
	_ = mw.WriteField("methods", `{"kcat":"B"}`)
	_ = mw.Close()
	req, err := http.NewRequest("POST", s.base+"/api/v1/submit/", &buf)
	if err != nil {
		return 0, "", err
	}
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	req.Header.Set("Idempotency-Key", idem)
	resp, err := (&http.Client{Timeout: 60 * time.Second}).Do(req)
	if err != nil {
		return 0, "", fmt.Errorf("submit: %w", err)
	}
	defer resp.Body.Close()
	var b struct {
		JobID string `json:"jobId"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&b)
	return resp.StatusCode, b.JobID, nil
}

// TestRetriedSubmitAfterKillGetsTheOriginalJob simulates a lost response: the
// api process is killed (SIGKILL) at each step of a submit after the charge,
// so the client gets no answer; it is started again and the client retries
// with the same Idempotency-Key. The retry answers 201 with the job that the
// first attempt created, which runs to completion, and the key is charged
// once.
func TestRetriedSubmitAfterKillGetsTheOriginalJob(t *testing.T) {
	// The reconciler waits longer than the retry takes, so the retry meets
	// the cut-off submit (a reconciler that undid it first would free the
	// key: then the retry is a clean new submit, tested in the api package).
	s := newStack(t, map[string]string{"KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS": "120"}, nil)
	st, keyID := s.openStoreAndKey(t)
	const rows = 9
	wantUsed := int64(0)
	for _, point := range []string{"charged", "input-written", "workflow-started", "queued"} {
		t.Run(point, func(t *testing.T) {
			s.stopRole("api")
			s.roles["api"] = map[string]string{"KINFLOW_TEST_CRASH_POINT": point}
			s.start("api")
			s.waitHealthy()
			csv := csvRows(randSeed(), rows, 60)
			idem := "retry-" + point + "-" + testenv.RandHex(4)
			if code, _, err := s.submitWithKey(csv, idem); err == nil {
				t.Fatalf("submit answered %d; the api should have died at %s", code, point)
			}
			select {
			case <-s.exited["api"]:
			case <-time.After(10 * time.Second):
				t.Fatalf("api still alive after the crash point %s", point)
			}
			var created []string
			st.DB.Raw("SELECT j.id FROM jobs j JOIN idempotency_keys k ON k.job_id = j.id WHERE k.key_hash = ?", store.HashKey(idem)).Scan(&created)
			if len(created) != 1 {
				t.Fatalf("%d jobs behind the cut-off submit, want 1", len(created))
			}
			s.roles["api"] = nil
			s.start("api")
			s.waitHealthy()
			code, id, err := s.submitWithKey(csv, idem)
			if err != nil || code != http.StatusCreated {
				t.Fatalf("retry: %d %v", code, err)
			}
			if id != created[0] {
				t.Fatalf("retry got job %s, want the original %s", id, created[0])
			}
			wantUsed += rows
			if got := s.waitDone(id, 90*time.Second); got.Status != "Completed" {
				t.Fatalf("job %s: %s %s", id, got.Status, got.Error)
			}
			used, err := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(time.Now()))
			if err != nil {
				t.Fatal(err)
			}
			if used != wantUsed {
				t.Fatalf("quota used %d, want %d (one charge per job)", used, wantUsed)
			}
			var n int64
			st.DB.Model(&store.Job{}).Where("key_id = ?", keyID).Count(&n)
			if n != int64(wantUsed/rows) {
				t.Fatalf("%d jobs, want %d", n, wantUsed/rows)
			}
		})
	}
}

// TestRandomKillsWithRetriesMakeOneJobEach is the random-kill experiment with
// a retrying client: submits of 3,000 rows, each with its own
// Idempotency-Key, the api killed by SIGKILL at a random moment and
// restarted, the client retrying with the same key until it gets an answer.
// Every logical submit ends with exactly one job, and the charge is one job's
// rows per submit.
func TestRandomKillsWithRetriesMakeOneJobEach(t *testing.T) {
	s := newStack(t, map[string]string{"KINFLOW_SUBMIT_RECONCILE_AFTER_SECONDS": "1", "KINFLOW_DEFAULT_DAILY_QUOTA": "1000000"}, nil)
	st, keyID := s.openStoreAndKey(t)
	csv := killTestCSV()
	const tries = 8
	ids := map[string]bool{}
	for try := range tries {
		idem := fmt.Sprintf("random-kill-%d-%s", try, testenv.RandHex(4))
		res := make(chan error, 1)
		go func() { _, _, err := s.submitWithKey(csv, idem); res <- err }()
		time.Sleep(time.Duration(mrand.IntN(80)) * time.Millisecond)
		s.kill9("api")
		<-res
		s.start("api")
		s.waitHealthy()
		var id string
		for attempt := 0; id == "" && attempt < 5; attempt++ {
			code, got, err := s.submitWithKey(csv, idem)
			switch {
			case err == nil && code == http.StatusCreated:
				id = got
			case err == nil && code != http.StatusServiceUnavailable:
				t.Fatalf("try %d: retry answered %d", try, code)
			default:
				time.Sleep(time.Second)
			}
		}
		if id == "" {
			t.Fatalf("try %d: no answer after retries", try)
		}
		if ids[id] {
			t.Fatalf("try %d: job %s given to two logical submits", try, id)
		}
		ids[id] = true
	}
	waitNoneSubmitting(t, st, 30*time.Second)
	// Every job ends first: the rows served from the prediction cache are
	// refunded at the end of a job, so the charge is the quota
	// used plus the refunds.
	var jobs []store.Job
	deadline := time.Now().Add(5 * time.Minute)
	for {
		jobs = nil
		st.DB.Where("key_id = ?", keyID).Find(&jobs)
		running := 0
		for _, j := range jobs {
			if j.Status != store.JobCompleted && j.Status != store.JobFailed {
				running++
			}
		}
		if running == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d jobs still running", running, len(jobs))
		}
		time.Sleep(200 * time.Millisecond)
	}
	used, err := st.QuotaUsed(t.Context(), keyID, store.QuotaDay(time.Now()))
	if err != nil {
		t.Fatal(err)
	}
	refunded := 0
	for _, j := range jobs {
		refunded += j.RefundedRows
	}
	t.Logf("%d logical submits, %d jobs, %d rows charged, %d refunded at the end", tries, len(jobs), used, refunded)
	if len(jobs) != tries || used+int64(refunded) != int64(tries*3000) {
		t.Fatalf("%d jobs and %d rows charged (+%d refunded) for %d submits of 3,000 rows", len(jobs), used, refunded, tries)
	}
	for _, j := range jobs {
		if !ids[j.ID] {
			t.Fatalf("job %s belongs to no answered submit", j.ID)
		}
	}
}
