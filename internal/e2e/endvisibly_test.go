package e2e

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
	"github.com/kinflow/kinflow/workflows"
)

// Every job ends in a state its owner can see: Completed or Failed, with
// its rows refunded when it fails, whatever fails under it.

// eachDatabase runs fn once with the stack's Postgres database and once
// with an SQLite file.
func eachDatabase(t *testing.T, fn func(t *testing.T, env map[string]string)) {
	t.Run("postgres", func(t *testing.T) { fn(t, map[string]string{}) })
	t.Run("sqlite", func(t *testing.T) {
		fn(t, map[string]string{"KINFLOW_DATABASE_URL": "sqlite:" + filepath.Join(t.TempDir(), "kinflow.db")})
	})
}

// quotaExact checks the key's counter against its jobs: each job charged
// its rows once and refunded RefundedRows once.
func quotaExact(t *testing.T, st *store.Store, keyID int64) int64 {
	t.Helper()
	var jobs []store.Job
	if err := st.DB.Where("key_id = ?", keyID).Find(&jobs).Error; err != nil {
		t.Fatal(err)
	}
	want := map[string]int64{}
	for _, j := range jobs {
		want[store.QuotaDay(j.SubmittedAt)] += int64(j.RequestedRows - j.RefundedRows)
	}
	var sum int64
	for day, w := range want {
		used, err := st.QuotaUsed(t.Context(), keyID, day)
		if err != nil {
			t.Fatal(err)
		}
		if used != w {
			t.Fatalf("quota used %d on %s, want %d (rows charged minus rows refunded)", used, day, w)
		}
		sum += used
	}
	return sum
}

// TestTerminatedWorkflowFailsAndRefundsItsJob: a job's workflow terminated
// with the Temporal CLI, as an operator would, leaves the job Failed with
// a reason and its rows refunded, within a minute (the API's job
// reconciler), on both databases.
func TestTerminatedWorkflowFailsAndRefundsItsJob(t *testing.T) {
	eachDatabase(t, func(t *testing.T, env map[string]string) {
		s := newStack(t, env, nil)
		st, keyID := s.openStoreAndKey(t)
		// No worker: the job waits, Pending, with its workflow running.
		s.stopRole("worker")
		id := s.submit(csvRows(randSeed(), 5, 80), []string{"kcat"}, map[string]string{"kcat": "B"})
		if got := quotaExact(t, st, keyID); got != 5 {
			t.Fatalf("charged %d, want 5", got)
		}
		cli := exec.Command(testenv.TemporalPath(), "workflow", "terminate", "--address", s.env["KINFLOW_TEMPORAL_ADDRESS"],
			"--namespace", "default", "--workflow-id", workflows.PredictionWorkflowID(id), "--reason", "operator test")
		if out, err := cli.CombinedOutput(); err != nil {
			t.Fatalf("temporal workflow terminate: %v\n%s", err, out)
		}
		start := time.Now()
		got := s.waitDone(id, time.Minute)
		t.Logf("job Failed %.1f s after the terminate", time.Since(start).Seconds())
		if got.Status != "Failed" || !strings.Contains(got.Error, "terminated") {
			t.Fatalf("job %s: %s %q", id, got.Status, got.Error)
		}
		if used := quotaExact(t, st, keyID); used != 0 {
			t.Fatalf("quota used %d after the refund, want 0", used)
		}
		// The worker coming back changes nothing: the job stays Failed,
		// refunded once.
		s.start("worker")
		time.Sleep(3 * time.Second)
		if got := s.status(id); got.Status != "Failed" {
			t.Fatalf("after the worker's return: %s", got.Status)
		}
		quotaExact(t, st, keyID)
	})
}

// mountTmpfs mounts a tmpfs of size bytes on dir until the test ends. Where
// that is impossible (not root, no mount) the test fails under CI=true and
// is skipped otherwise.
func mountTmpfs(t *testing.T, dir string, size string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mount", "-t", "tmpfs", "-o", "size="+size, "tmpfs", dir).CombinedOutput(); err != nil {
		testenv.Unavailable(t, "mount a %s tmpfs for the media root: %v %s", size, err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", "-l", dir).CombinedOutput(); err != nil {
			t.Logf("umount %s: %v %s", dir, err, out)
		}
	})
}

// fill writes ballast files into dir until the file system is full, and
// returns them.
func fill(t *testing.T, dir string) []string {
	t.Helper()
	var files []string
	buf := bytes.Repeat([]byte{0xa5}, 64<<10)
	for i := 0; ; i++ {
		p := filepath.Join(dir, fmt.Sprintf("ballast-%d", i))
		f, err := os.Create(p)
		if err != nil {
			if errors.Is(err, syscall.ENOSPC) {
				return files
			}
			t.Fatal(err)
		}
		files = append(files, p)
		full := false
		for range 16 {
			if _, err := f.Write(buf); err != nil {
				if !errors.Is(err, syscall.ENOSPC) {
					t.Fatal(err)
				}
				full = true
				break
			}
		}
		f.Close()
		if full {
			// Small writes too: the last blocks.
			for j := 0; ; j++ {
				p := filepath.Join(dir, fmt.Sprintf("ballast-tail-%d", j))
				if err := os.WriteFile(p, buf[:512], 0o644); err != nil {
					_ = os.Remove(p)
					return files
				}
				files = append(files, p)
			}
		}
	}
}

// rawSubmitStatus submits csv and returns the status code and headers.
func (s *stack) rawSubmitStatus(t *testing.T, csv string) (int, http.Header, string) {
	t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csv))
	_ = mw.WriteField("targets", `["kcat"]`)
	_ = mw.WriteField("methods", `{"kcat":"B"}`)
	_ = mw.Close()
	req, _ := http.NewRequest("POST", s.base+"/api/v1/submit/", &buf)
	req.Header.Set("Authorization", "Bearer "+s.key)
	req.Header.Set("Content-Type", mw.FormDataContentType())
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, resp.Header, string(body)
}

// TestFullDiskJobsEndAndRecover fills the media root (a 24 MiB tmpfs)
// while jobs run: jobs whose embedding steps meet the full disk fail with
// the reason "storage full" and are refunded; jobs whose bookkeeping steps
// (parsing, planning, Finalize) meet it ride the outage out; submits while
// it is full answer 503 with Retry-After and charge nothing; /health/ names
// the media root full and /metrics exports its free space. Within a minute
// of the space returning every job is Completed or Failed, and the quota
// is exact. On both databases.
func TestFullDiskJobsEndAndRecover(t *testing.T) {
	eachDatabase(t, func(t *testing.T, env map[string]string) {
		media := filepath.Join(t.TempDir(), "media")
		mountTmpfs(t, media, "24m")
		env["KINFLOW_MEDIA_ROOT"] = media
		env["KINFLOW_MEDIA_MIN_FREE_MB"] = "8"
		s := newStack(t, env, nil)
		s.media = media
		st, keyID := s.openStoreAndKey(t)

		// A first job fills the cache with the sequences of the small jobs.
		cached := csvRows(1, 20, 120)
		if got := s.waitDone(s.submit(cached, []string{"kcat"}, map[string]string{"kcat": "B"}), 2*time.Minute); got.Status != "Completed" {
			t.Fatalf("warm-up job: %s %s", got.Status, got.Error)
		}
		// Jobs wait for a worker while the disk fills: big ones (new
		// sequences: their steps write embeddings) and small ones whose
		// embeddings are cached (parse, plan, predict, Finalize only).
		s.stopRole("worker")
		var ids []string
		for i := range 3 {
			ids = append(ids, s.submit(csvRows(randSeed()+uint64(i), 400, 300), []string{"kcat"}, map[string]string{"kcat": "B"}))
		}
		for range 3 {
			ids = append(ids, s.submit(cached, []string{"kcat"}, map[string]string{"kcat": "B"}))
		}
		ballast := filepath.Join(media, "ballast")
		if err := os.MkdirAll(ballast, 0o755); err != nil {
			t.Fatal(err)
		}
		files := fill(t, ballast)
		// Leave a little room so that the jobs get going before they meet
		// the full disk.
		for _, f := range files[:min(len(files), 3)] {
			_ = os.Remove(f)
		}

		// While full (3 MiB free, less than KINFLOW_MEDIA_MIN_FREE_MB): 503 +
		// Retry-After, nothing charged.
		before := quotaExact(t, st, keyID)
		code, hdr, body := s.rawSubmitStatus(t, csvRows(randSeed(), 3, 60))
		if code != 503 || hdr.Get("Retry-After") == "" || !strings.Contains(body, "Storage full") {
			t.Fatalf("submit while full: %d Retry-After=%q %s", code, hdr.Get("Retry-After"), body)
		}
		if after := quotaExact(t, st, keyID); after != before {
			t.Fatalf("a refused submit charged %d rows", after-before)
		}
		var health struct {
			Status string            `json:"status"`
			Checks map[string]string `json:"checks"`
		}
		s.do("GET", "/api/v1/health/", nil, "", &health)
		if health.Checks["media"] != "full" {
			t.Fatalf("health while full: %+v", health)
		}
		var metrics string
		s.do("GET", "/metrics", nil, "", &metrics)
		if !strings.Contains(metrics, "kinflow_media_free_bytes ") {
			t.Fatal("/metrics has no kinflow_media_free_bytes")
		}

		s.start("worker")
		// Jobs meet the full disk for 25 s.
		time.Sleep(25 * time.Second)
		for _, f := range files {
			_ = os.Remove(f)
		}
		freed := time.Now()
		completed, storageFull := 0, 0
		for _, id := range ids {
			got := s.waitDone(id, time.Minute-time.Since(freed))
			switch {
			case got.Status == "Completed":
				completed++
			case strings.Contains(got.Error, "storage full"):
				if storageFull == 0 {
					s.replay(workflows.PredictionWorkflowID(id), "prediction_i33_storage_full")
				}
				storageFull++
			default:
				t.Errorf("job %s failed without the reason: %q", id, got.Error)
			}
		}
		t.Logf("every job ended %.1f s after space returned: %d completed, %d failed with storage full", time.Since(freed).Seconds(), completed, storageFull)
		quotaExact(t, st, keyID)
		if storageFull == 0 {
			t.Errorf("no job met the full disk in its steps")
		}
		// Recovered by itself: submits go through again.
		s.do("GET", "/api/v1/health/", nil, "", &health)
		if health.Checks["media"] != "ok" {
			t.Fatalf("health after space returned: %+v", health)
		}

		// The bookkeeping steps ride the outage out: jobs that meet a disk
		// with no room at all in their first steps (parsing the input,
		// planning, Finalize: no embedding to compute) retry instead of
		// failing (KINFLOW_OUTAGE_RIDE_OUT_SECONDS is 600), and complete
		// once space returns. On Postgres the disk stays full for 110 s:
		// longer than the 8 attempts (about 90 s) that failed such jobs
		// before; SQLite runs the same steps for 25 s, to bound the test.
		outage := 110 * time.Second
		if strings.HasPrefix(env["KINFLOW_DATABASE_URL"], "sqlite:") {
			outage = 25 * time.Second
		}
		s.stopRole("worker")
		ids = ids[:0]
		for range 3 {
			ids = append(ids, s.submit(cached, []string{"kcat"}, map[string]string{"kcat": "B"}))
		}
		files = fill(t, ballast)
		s.start("worker")
		time.Sleep(outage)
		for _, id := range ids {
			if got := s.status(id); got.Status == "Completed" || got.Status == "Failed" {
				t.Fatalf("job %s ended (%s %q) while the disk was full", id, got.Status, got.Error)
			}
		}
		for _, f := range files {
			_ = os.Remove(f)
		}
		freed = time.Now()
		for _, id := range ids {
			if got := s.waitDone(id, time.Minute-time.Since(freed)); got.Status != "Completed" {
				t.Fatalf("job %s after the outage: %s %q", id, got.Status, got.Error)
			}
		}
		t.Logf("jobs that rode out a full disk completed %.1f s after space returned", time.Since(freed).Seconds())
		s.replay(workflows.PredictionWorkflowID(ids[0]), "prediction_i33_ride_out")
		quotaExact(t, st, keyID)
	})
}
