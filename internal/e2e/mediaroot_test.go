package e2e

import (
	"bytes"
	"errors"
	"mime/multipart"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// submitCode submits csv (kcat by B) and returns the answer's status code
// and body, whatever it is.
func (s *stack) submitCode(csv string) (int, string) {
	s.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csv))
	_ = mw.WriteField("targets", `["kcat"]`)
	_ = mw.WriteField("methods", `{"kcat":"B"}`)
	_ = mw.Close()
	var body string
	code := s.do("POST", "/api/v1/submit/", &buf, mw.FormDataContentType(), &body)
	return code, body
}

// TestMediaRootAwayUnderKinflowDev renames the media root of a running
// `kinflow dev` away for several seconds while jobs run, as a lost network
// mount does. While it is away nothing is created at its path, a submit
// answers 503 and charges nothing, the result of a job completed before
// answers 503 (not 500) and /health/ answers 503 naming the media root.
// Once it is back, every job accepted before the outage completes, every
// result reads 200, and the root's marker is the one it had.
func TestMediaRootAwayUnderKinflowDev(t *testing.T) {
	// Synthetic steps take 300 ms a sequence, so jobs are mid-step when
	// the root goes.
	d, key := startDev(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=300")
	s := &stack{t: t, base: d.BaseURL, key: key, media: filepath.Join(d.Dir, "media")}
	marker, err := mediaroot.ReadMarker(s.media)
	if err != nil {
		t.Fatalf("kinflow dev did not mark its media root: %v", err)
	}
	seed := randSeed()
	done := s.submit(csvRows(seed, 2, 40), []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(done, 2*time.Minute); st.Status != "Completed" {
		t.Fatalf("job before the outage: %+v", st)
	}
	var running []string
	for i := range 6 {
		running = append(running, s.submit(csvRows(seed+1+uint64(i), 3, 40), []string{"kcat"}, map[string]string{"kcat": "B"}))
	}
	time.Sleep(time.Second)
	inFlight := 0
	for _, id := range running {
		if st := s.status(id); st.Status != "Completed" && st.Status != "Failed" {
			inFlight++
		}
	}
	if inFlight == 0 {
		t.Fatal("every job ended before the outage: nothing rides it out")
	}

	aside := s.media + ".aside"
	if err := os.Rename(s.media, aside); err != nil {
		t.Fatal(err)
	}
	away := time.Now()
	recreated := func() {
		t.Helper()
		if _, err := os.Lstat(s.media); !errors.Is(err, os.ErrNotExist) {
			t.Fatalf("%v after the rename something is at the media root's path: %v", time.Since(away), err)
		}
	}
	// Past the identity check's one-second reuse, then the refusals.
	for time.Since(away) < 1500*time.Millisecond {
		recreated()
		time.Sleep(100 * time.Millisecond)
	}
	used := quotaUsed(t, d.BaseURL, key)
	if code, body := s.submitCode(csvRows(seed+100, 3, 40)); code != 503 || !strings.Contains(body, "Storage unavailable") || strings.Contains(body, s.media) {
		t.Fatalf("submit while away: %d %s", code, body)
	}
	if got := quotaUsed(t, d.BaseURL, key); got != used {
		t.Fatalf("a refused submit changed the quota used from %d to %d", used, got)
	}
	var body string
	if code := s.do("GET", "/api/v1/result/"+done+"/", nil, "", &body); code != 503 || strings.Contains(body, s.media) {
		t.Fatalf("result while away: %d %s", code, body)
	}
	var health struct {
		Status string            `json:"status"`
		Checks map[string]string `json:"checks"`
	}
	if code := s.do("GET", "/api/v1/health/", nil, "", &health); code != 503 || health.Checks["media"] != "missing" {
		t.Fatalf("health while away: %d %+v", code, health)
	}
	for time.Since(away) < 6*time.Second {
		recreated()
		time.Sleep(100 * time.Millisecond)
	}
	recreated()
	if err := os.Rename(aside, s.media); err != nil {
		t.Fatal(err)
	}
	t.Logf("the media root was away for %v", time.Since(away).Round(time.Millisecond))

	for _, id := range running {
		if st := s.waitDone(id, 3*time.Minute); st.Status != "Completed" {
			t.Fatalf("job %s accepted before the outage: %+v", id, st)
		}
	}
	for _, id := range append([]string{done}, running...) {
		if code := s.do("GET", "/api/v1/result/"+id+"/", nil, "", &body); code != 200 {
			t.Fatalf("result %s after the outage: %d %s", id, code, body)
		}
	}
	if code := s.do("GET", "/api/v1/health/", nil, "", &health); code != 200 || health.Checks["media"] != "ok" {
		t.Fatalf("health after: %d %+v", code, health)
	}
	if m, err := mediaroot.ReadMarker(s.media); err != nil || m != marker {
		t.Fatalf("marker after: %+v %v, was %+v", m, err, marker)
	}
	// The running jobs' activities met the outage and waited it out.
	if log := d.Log("dev", 1<<22); !strings.Contains(log, "media root unavailable; the activity waits for it") &&
		!strings.Contains(log, "activity failed while the media root was unavailable") {
		t.Fatalf("no activity waited for the media root (%d of 6 jobs were in flight)", inFlight)
	}
	t.Logf("%d of 6 jobs were in flight when the root went away", inFlight)
}
