package e2e

import (
	"encoding/json"
	"net/http"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

// stepServerPIDs reads the GPU host's /health and returns the pids of its
// running resident step servers.
func (s *stack) stepServerPIDs() []int {
	s.t.Helper()
	resp, err := http.Get(s.env["GPU_EMBED_SERVICE_URL"] + "/health")
	if err != nil {
		s.t.Fatal(err)
	}
	defer resp.Body.Close()
	var h struct {
		Servers []struct {
			Key   string         `json:"step_key"`
			PID   int            `json:"pid"`
			Ready map[string]any `json:"ready"`
		} `json:"step_servers"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&h); err != nil {
		s.t.Fatal(err)
	}
	var pids []int
	for _, sv := range h.Servers {
		if sv.PID > 0 {
			pids = append(pids, sv.PID)
		}
	}
	return pids
}

// alive reports whether pid is a live process (not a zombie).
func alive(pid int) bool {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return false
	}
	f := strings.Fields(string(data))
	return len(f) > 2 && f[2] != "Z"
}

// waitGone waits until none of pids is alive.
func waitGone(t *testing.T, pids []int, timeout time.Duration, what string) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		var left []int
		for _, p := range pids {
			if alive(p) {
				left = append(left, p)
			}
		}
		if len(left) == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: step server processes %v still alive", what, left)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// waitServers polls /health until a resident step server runs.
func (s *stack) waitServers(timeout time.Duration) []int {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if p := s.stepServerPIDs(); len(p) > 0 {
			return p
		}
		time.Sleep(20 * time.Millisecond)
	}
	s.t.Fatal("no resident step server ever ran")
	return nil
}

// wantDoneOnGPUWithoutRewrites waits for job to complete on the GPU road
// (its last gpuPrecompute event "done") with n cache files, none of before
// written again.
func (s *stack) wantDoneOnGPUWithoutRewrites(job string, before map[string]string, n int, timeout time.Duration) {
	s.t.Helper()
	st := s.waitDone(job, timeout)
	if st.Status != "Completed" {
		s.t.Fatalf("job: %s %s", st.Status, st.Error)
	}
	if r := st.reasons(); r[len(r)-1] != "done" {
		s.t.Fatalf("events %v: want the GPU road to finish the job", r)
	}
	after := s.cacheFiles()
	if len(after) != n {
		s.t.Fatalf("%d files, want %d", len(after), n)
	}
	for p, stamp := range before {
		if after[p] != stamp {
			s.t.Errorf("%s was written again", p)
		}
	}
}

// TestResidentServerKilledMidBatch kills the GPU host's resident step
// server (the synthetic executor's `kinflow step-server`) with SIGKILL in
// the middle of a step: the batch in flight fails, the server is started
// afresh, the step's retry computes only what is missing, the job completes
// on the GPU road, no file is written twice, and no server outlives the
// stack.
func TestResidentServerKilledMidBatch(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=80")
	s := newStack(t, map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "120"},
		map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow}})
	const n = 60
	job := s.submit(csvRows(randSeed(), n, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
	s.waitComputed(job, 5, 60*time.Second)
	first := s.waitServers(10 * time.Second)
	for _, p := range first {
		_ = syscall.Kill(p, syscall.SIGKILL)
	}
	before := s.cacheFiles()
	s.wantDoneOnGPUWithoutRewrites(job, before, n, 120*time.Second)
	again := s.stepServerPIDs()
	if len(again) == 0 || again[0] == first[0] {
		t.Fatalf("servers %v after the kill of %v: want a fresh one", again, first)
	}
	s.stop()
	waitGone(t, append(first, again...), 10*time.Second, "after the stack stopped")
}

// TestGPUWorkerKilledMidShard cuts a 60-sequence step into three shards,
// kills the GPU host with SIGKILL while a shard runs, and starts it again:
// its resident server dies with it (no process holds the GPU), the shard is
// retried on the new host from the files on disk, the job completes on the
// GPU road, and no file is written twice.
func TestGPUWorkerKilledMidShard(t *testing.T) {
	slow := envFile(t, "GPU_EMBED_SYNTHETIC_DELAY_MS=80")
	s := newStack(t, map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "120", "KINFLOW_STEP_SHARD_SEQS": "20"},
		map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": slow}})
	const n = 60
	job := s.submit(csvRows(randSeed(), n, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
	s.waitComputed(job, 5, 60*time.Second)
	pids := s.waitServers(10 * time.Second)
	s.kill9("gpu-worker")
	waitGone(t, pids, 10*time.Second, "after kill -9 of the gpu-worker")
	before := s.cacheFiles()
	s.start("gpu-worker")
	s.wantDoneOnGPUWithoutRewrites(job, before, n, 150*time.Second)
	log, _ := os.ReadFile(s.logs["gpu-worker"])
	if !strings.Contains(string(log), `"shard":"`) {
		t.Errorf("the restarted GPU host's log names no shard")
	}
}
