package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
)

// simModel is a step program that simulates a model (for the resident server
// benchmarks, docs/BENCHMARKS.md): it sleeps LOAD seconds before it is ready,
// then PER_1K seconds per 1,000 tokens (residues + 2) of each batch, and
// writes each missing output as a float32 NPY vector. It speaks both
// contracts: `sim_model.py --serve` (resident) and `sim_model.py MANIFEST`
// (one-shot).
const simModel = `
import json, os, sys, time
import numpy as np

LOAD = float(os.environ.get("SIM_LOAD_SECONDS", "5"))
PER_1K = float(os.environ.get("SIM_SECONDS_PER_1K_TOKENS", "0.04"))
BUSY = os.environ.get("SIM_BUSY_FILE")

def run(m):
    t0 = time.monotonic()
    toks = sum(len(s["sequence"]) + 2 for s in m["seqs"])
    time.sleep(PER_1K * toks / 1000.0)
    for s in m["seqs"]:
        for p in s["missing_outputs"]:
            d = os.path.dirname(p)
            os.makedirs(d, exist_ok=True)
            tmp = os.path.join(d, "." + os.path.basename(p) + ".tmp.npy")
            np.save(tmp, np.zeros(1280, dtype=np.float32))
            os.replace(tmp, p)
    if BUSY:
        with open(BUSY, "a") as f:
            f.write("%f\n" % (time.monotonic() - t0))

time.sleep(LOAD)
if sys.argv[1] == "--serve":
    print(json.dumps({"ready": True, "model": "sim"}), flush=True)
    for line in sys.stdin:
        m = json.loads(line)
        run(m)
        print(json.dumps({"batch": m["batch"], "status": "done"}), flush=True)
else:
    with open(sys.argv[1]) as f:
        run(json.load(f))
`

// simEnv writes the simulated model and a GPU env file running it for
// methodh_esm2_last_mean, resident or one-shot.
func simEnv(tb testing.TB, resident bool, load, per1k float64) string {
	tb.Helper()
	dir := tb.TempDir()
	prog := filepath.Join(dir, "sim_model.py")
	if err := os.WriteFile(prog, []byte(simModel), 0o644); err != nil {
		tb.Fatal(err)
	}
	p := filepath.Join(dir, "gpu.env")
	line := "GPU_EMBED_STEP_CMD_METHODH_ESM2_LAST_MEAN=/usr/bin/python3 " + prog + " {manifest_file}"
	if resident {
		line = "GPU_EMBED_STEP_SERVER_METHODH_ESM2_LAST_MEAN=/usr/bin/python3 " + prog + " --serve"
	}
	body := fmt.Sprintf("%s\nSIM_LOAD_SECONDS=%g\nSIM_SECONDS_PER_1K_TOKENS=%g\nSIM_BUSY_FILE=%s\n", line, load, per1k, filepath.Join(dir, "busy.txt"))
	if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
		tb.Fatal(err)
	}
	return p
}

// busySeconds sums the batch times the simulated model recorded (its sleep
// and its file writes) for the env file at envPath, and empties the record.
func busySeconds(tb testing.TB, envPath string) float64 {
	tb.Helper()
	p := filepath.Join(filepath.Dir(envPath), "busy.txt")
	data, _ := os.ReadFile(p)
	_ = os.Remove(p)
	sum := 0.0
	for _, f := range strings.Fields(string(data)) {
		v, _ := strconv.ParseFloat(f, 64)
		sum += v
	}
	return sum
}

// benchEnvFloat reads a float knob of the resident benchmark.
func benchEnvFloat(key string, def float64) float64 {
	if v, err := strconv.ParseFloat(os.Getenv(key), 64); err == nil {
		return v
	}
	return def
}

// benchEnvInt reads an int knob of the resident benchmark.
func benchEnvInt(key string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(key)); err == nil {
		return v
	}
	return def
}

// runMethodH submits one method H job of n sequences of 300 residues and
// returns its time from submission to Completed, and the time of its
// EmbedJob child (from the workflow history).
func (s *stack) runMethodH(tb testing.TB, n int) (time.Duration, time.Duration) {
	tb.Helper()
	input := csvRows(randSeed(), n, 300)
	start := time.Now()
	id := s.submit(input, []string{"kcat"}, map[string]string{"kcat": "H"})
	st := s.waitDone(id, 3*time.Hour)
	if st.Status != "Completed" {
		tb.Fatalf("job: %s %s", st.Status, st.Error)
	}
	if r := st.reasons(); r[len(r)-1] != "done" {
		tb.Fatalf("events %v: the GPU host did not compute the job", r)
	}
	took := time.Since(start)
	phases, _, _ := s.phases("prediction:" + id)
	return took, phases["EmbedJob"]
}

// BenchmarkResidentVsOneShot: a simulated model (5 s to load,
// 40 ms per 1,000 tokens) computes method H's step for 2,000 sequences of
// 300 residues, once as a resident server and once as a one-shot program per
// batch; then a second job of new sequences on the warm server. Reports job
// times and their ratio to one load plus the summed batch time. Knobs:
// KINFLOW_BENCH_SEQS (2000), KINFLOW_BENCH_ONESHOT_SEQS (the same; the
// one-shot road pays a load per batch), SIM_LOAD_SECONDS, SIM_SECONDS_PER_1K_TOKENS.
// Run: go test ./internal/e2e -run '^$' -bench ResidentVsOneShot -benchtime 1x -timeout 60m
func BenchmarkResidentVsOneShot(b *testing.B) {
	n := benchEnvInt("KINFLOW_BENCH_SEQS", 2000)
	nOne := benchEnvInt("KINFLOW_BENCH_ONESHOT_SEQS", n)
	load, per1k := benchEnvFloat("SIM_LOAD_SECONDS", 5), benchEnvFloat("SIM_SECONDS_PER_1K_TOKENS", 0.04)
	common := map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "10800", "KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "120"}
	for i := 0; i < b.N; i++ {
		resEnv := simEnv(b, true, load, per1k)
		res := newStack(b, common, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": resEnv, "KINFLOW_STEP_EXECUTOR": "command"}})
		tRes, embedRes := res.runMethodH(b, n)
		busyRes := busySeconds(b, resEnv)
		tWarm, embedWarm := res.runMethodH(b, n)
		busyWarm := busySeconds(b, resEnv)
		res.stop()
		oneEnv := simEnv(b, false, load, per1k)
		one := newStack(b, common, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": oneEnv, "KINFLOW_STEP_EXECUTOR": "command"}})
		tOne, _ := one.runMethodH(b, nOne)
		busyOne := busySeconds(b, oneEnv)
		one.stop()
		// "ideal" is one load plus the batch time the program itself
		// measured (its model sleep and its file writes).
		b.ReportMetric(tRes.Seconds(), "resident-s")
		b.ReportMetric(embedRes.Seconds(), "resident-embedjob-s")
		b.ReportMetric(busyRes, "resident-batch-s")
		b.ReportMetric(tRes.Seconds()/(load+busyRes), "resident/ideal")
		b.ReportMetric(embedRes.Seconds()/(load+busyRes), "embedjob/ideal")
		b.ReportMetric(tWarm.Seconds(), "warm-second-job-s")
		b.ReportMetric(embedWarm.Seconds()/busyWarm, "warm-embedjob/batch-time")
		b.ReportMetric(tOne.Seconds(), "oneshot-s")
		b.ReportMetric(tOne.Seconds()/(load+busyOne), "oneshot/ideal")
	}
}

// BenchmarkTwoGPUHosts: one method H job of 4,000 sequences
// (shards of KINFLOW_STEP_SHARD_SEQS, default 500) on one GPU host, then on
// two GPU hosts serving the same queue, both running the simulated model as
// a resident server. Reports both times and their ratio (goal ≤ 0.6).
// Run: go test ./internal/e2e -run '^$' -bench TwoGPUHosts -benchtime 1x -timeout 60m
func BenchmarkTwoGPUHosts(b *testing.B) {
	n := benchEnvInt("KINFLOW_BENCH_SEQS", 4000)
	load, per1k := benchEnvFloat("SIM_LOAD_SECONDS", 5), benchEnvFloat("SIM_SECONDS_PER_1K_TOKENS", 0.04)
	common := map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "10800", "KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "120"}
	for i := 0; i < b.N; i++ {
		gpu := map[string]string{"KINFLOW_GPU_ENV_FILE": simEnv(b, true, load, per1k), "KINFLOW_STEP_EXECUTOR": "command"}
		s1 := newStack(b, common, map[string]map[string]string{"gpu-worker": gpu})
		t1, _ := s1.runMethodH(b, n)
		s1.stop()
		s2 := newStack(b, common, map[string]map[string]string{"gpu-worker": gpu})
		s2.startSecondGPUHost(b)
		t2, _ := s2.runMethodH(b, n)
		s2.stop()
		b.ReportMetric(t1.Seconds(), "one-host-s")
		b.ReportMetric(t2.Seconds(), "two-hosts-s")
		b.ReportMetric(t2.Seconds()/t1.Seconds(), "two/one")
	}
}

// startSecondGPUHost starts another gpu-worker on the stack's GPU queue,
// with its own HTTP port.
func (s *stack) startSecondGPUHost(tb testing.TB) {
	tb.Helper()
	env := map[string]string{"KINFLOW_GPU_LISTEN": testenv.FreeAddr(tb)}
	for k, v := range s.roles["gpu-worker"] {
		env[k] = v
	}
	s.roles["gpu-worker-2"] = env
	s.startAs("gpu-worker-2", "gpu-worker")
}
