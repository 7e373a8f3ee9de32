package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// ageCache sets the access time (last planned use) of every cached file a
// day back, keeping modification times (integrity records compare them).
func ageCache(t *testing.T, root string) int {
	t.Helper()
	n := 0
	old := unix.NsecToTimespec(time.Now().Add(-24 * time.Hour).UnixNano())
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() || strings.HasPrefix(fi.Name(), ".") || strings.HasSuffix(fi.Name(), ".json") {
			return nil
		}
		if unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, {Nsec: unix.UTIME_OMIT}}, 0) == nil {
			n++
		}
		return nil
	})
	return n
}

// TestCacheGCRacesRunningJobs: `kinflow cache gc` with a
// budget of one byte and no minimum age — every pass evicts every file it
// may — runs in a loop while jobs over cached sequences and over new ones
// run. Every job completes (none finds a file it counted on gone), and the
// files no running job counts on are evicted.
func TestCacheGCRacesRunningJobs(t *testing.T) {
	s := newStack(t, nil, nil)
	methods := map[string]string{"kcat": "B"}
	// Two sets of sequences cached; the jobs below use set A only.
	setA, setB := csvRows(11, 30, 150), csvRows(12, 30, 150)
	for _, csv := range []string{setA, setB} {
		if got := s.waitDone(s.submit(csv, []string{"kcat"}, methods), 2*time.Minute); got.Status != "Completed" {
			t.Fatalf("warm-up: %s %s", got.Status, got.Error)
		}
	}
	root := filepath.Join(s.media, "sequence_info")
	if n := ageCache(t, root); n < 60 {
		t.Fatalf("aged %d cached files, want at least 60", n)
	}
	before := len(s.cacheFiles())

	stop := make(chan struct{})
	var wg sync.WaitGroup
	passes, evictions := 0, 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			default:
			}
			cmd := exec.Command(kinflowBin, "cache", "gc", "--budget-gb", "0.000000001", "--min-age", "0s")
			cmd.Env = os.Environ()
			for k, v := range s.env {
				cmd.Env = append(cmd.Env, k+"="+v)
			}
			out, err := cmd.CombinedOutput()
			if err != nil {
				t.Errorf("cache gc: %v\n%s", err, out)
				return
			}
			passes++
			if !strings.Contains(string(out), "evicted 0 files") {
				evictions++
			}
			time.Sleep(50 * time.Millisecond)
		}
	}()
	var ids []string
	for i := range 8 {
		csv := setA
		if i%4 == 3 {
			csv = csvRows(randSeed(), 10, 150) // new sequences: computed, then counted
		}
		ids = append(ids, s.submit(csv, []string{"kcat"}, methods))
		time.Sleep(300 * time.Millisecond)
	}
	for _, id := range ids {
		if got := s.waitDone(id, 3*time.Minute); got.Status != "Completed" {
			t.Errorf("job %s raced by cache gc: %s %q", id, got.Status, got.Error)
		}
	}
	close(stop)
	wg.Wait()
	after := len(s.cacheFiles())
	t.Logf("%d gc passes (%d evicted something) during 8 jobs; cache files %d before, %d after", passes, evictions, before, after)
	if passes < 3 || evictions == 0 || after >= before {
		t.Fatalf("gc did not race the jobs: %d passes, %d with evictions, files %d → %d", passes, evictions, before, after)
	}
}
