package e2e

import (
	"slices"
	"testing"
	"time"
)

// TestAnyGPUHostKeepsTheGPURoad: a worker that knows two GPU hosts
// (GPU_EMBED_SERVICE_URL as a list) keeps sending embeddings to the GPU
// queue when the first host is dead, because the second still answers
// online and serves the queue; with one URL the same death would read
// "unreachable" and the job would be computed on the CPU.
func TestAnyGPUHostKeepsTheGPURoad(t *testing.T) {
	s := newStack(t, nil, nil)
	s.startSecondGPUHost(t)
	first, second := s.env["GPU_EMBED_SERVICE_URL"], "http://"+s.roles["gpu-worker-2"]["KINFLOW_GPU_LISTEN"]
	s.stopRole("worker")
	if s.roles["worker"] == nil {
		s.roles["worker"] = map[string]string{}
	}
	s.roles["worker"]["GPU_EMBED_SERVICE_URL"] = first + "," + second
	s.start("worker")
	s.kill9("gpu-worker")

	id := s.submit(csvRows(randSeed(), 3, 300), []string{"kcat"}, map[string]string{"kcat": "H"})
	st := s.waitDone(id, 5*time.Minute)
	if st.Status != "Completed" {
		t.Fatalf("job: %s %s", st.Status, st.Error)
	}
	r := st.reasons()
	if len(r) == 0 || r[len(r)-1] != "done" || slices.Contains(r, "fallback_local") || !slices.Contains(r, "submitted") {
		t.Fatalf("events %v: the live GPU host should have computed the job", r)
	}
}
