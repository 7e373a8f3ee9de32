package e2e

import (
	"bufio"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"testing"

	"go.temporal.io/sdk/client"

	"github.com/kinflow/kinflow/internal/testenv"
)

// This file is the production topology (docs/production.md), run: a real
// Temporal server (bin/temporal-server) on Postgres with SQL visibility, the
// app database on Postgres, and every role its own process of the built
// binary with its own environment (listen addresses, the GPU host it calls),
// all sharing one media root. The namespace is prepared by `kinflow
// namespace`, as docker/compose.yaml's admin step does.

// TopologyOptions shapes a topology.
type TopologyOptions struct {
	// APIs, Workers and GPUHosts are how many processes of each role start
	// (default 2 each; -1 for none).
	APIs, Workers, GPUHosts int
	// Env is added to every kinflow process's environment.
	Env map[string]string
	// RoleEnv is added per role ("api", "worker", "gpu-worker"), after Env.
	RoleEnv map[string]map[string]string
	// NoKey: do not generate the API key (the caller does, e.g. the README).
	NoKey bool
	// Metrics gives every worker and GPU host a /metrics address
	// (KINFLOW_METRICS_LISTEN, in its roles entry).
	Metrics bool
}

// Topology is a running production topology. Its processes are named
// role-N ("api-1", "worker-2", "gpu-worker-1"); the embedded stack submits
// and polls through the first api unless told otherwise (UseAPI). A load
// test reuses it as it is:
//
//	tp := startTopology(t, TopologyOptions{Env: map[string]string{…}})
//	job := tp.submit(csvRows(seed, rows, 200), []string{"kcat"}, map[string]string{"kcat": "B"})
//	tp.Kill9("worker-1"); tp.Restart("worker-1"); tp.AddGPUHost()
//	tp.Server.Kill9(); tp.Server.Start()
//	st := tp.waitDone(job, time.Minute)
//
// Each api's base URL is in APIURLs; every process's log is in tp.logs.
type Topology struct {
	*stack
	Server  *testenv.TemporalServer
	APIURLs []string
	opts    TopologyOptions
	counts  map[string]int
}

// topologyEnv is every kinflow process's environment on the topology,
// before per-process addresses: the keys docker/compose.yaml must set too
// (TestComposeAgreesWithTheTopology).
func topologyEnv(dbURL, temporalAddr, media string) map[string]string {
	return map[string]string{
		"KINFLOW_DATABASE_URL":       dbURL,
		"KINFLOW_TEMPORAL_ADDRESS":   temporalAddr,
		"KINFLOW_TEMPORAL_NAMESPACE": "default",
		"KINFLOW_MEDIA_ROOT":         media,
		"KINFLOW_STEP_EXECUTOR":      "synthetic",
		"KINFLOW_PREDICTION_ENGINE":  "synthetic",
		"GPU_EMBED_FAIL_CLOSED":      "0",
		"LOG_LEVEL":                  "info",
	}
}

// topologyStartOrder is the order startTopology brings the topology up in,
// and the order docker/compose.yaml's depends_on must give: Postgres, the
// Temporal schema, the server, the namespace step, then the roles.
var topologyStartOrder = []string{"postgres", "temporal-schema", "temporal", "temporal-namespace", "gpu-worker", "worker", "api"}

// roleListenKey is the per-process listen address each serving role gets
// (compose sets the same key on the service).
var roleListenKey = map[string]string{"api": "KINFLOW_API_LISTEN", "gpu-worker": "KINFLOW_GPU_LISTEN"}

// startTopology starts the Temporal server, prepares its namespace and
// starts the role processes; everything stops at t's cleanup.
func startTopology(t testing.TB, opts TopologyOptions) *Topology {
	t.Helper()
	if _, err := exec.LookPath(kinflowBin); err != nil {
		t.Fatalf("kinflow binary: %v", err)
	}
	srv := testenv.StartTemporalServer(t)
	tmp := t.TempDir()
	s := &stack{
		t: t, roles: map[string]map[string]string{}, procs: map[string]*exec.Cmd{}, logs: map[string]string{},
		exited: map[string]chan struct{}{}, media: tmp + "/media",
		// The default queues, as in production: this server is the test's own.
		cpuQ: "kinflow-cpu", gpuQ: "kinflow-gpu",
	}
	s.env = topologyEnv(testenv.PostgresURL(t), srv.Address, s.media)
	s.env["GPU_EMBED_HEALTH_TTL_SECONDS"] = "1"
	s.env["KINFLOW_HEARTBEAT_TIMEOUT_SECONDS"] = "5"
	for k, v := range opts.Env {
		s.env[k] = v
	}
	s.makeMediaRoot()
	tp := &Topology{stack: s, Server: srv, opts: opts, counts: map[string]int{}}
	t.Cleanup(func() {
		s.stop()
		if t.Failed() {
			t.Logf("---- Temporal server log (tail) ----\n%s", srv.LogTail(4000))
		}
	})

	// The operator's step: namespace and search attributes.
	ns := exec.Command(kinflowBin, "namespace")
	ns.Env = s.environ("")
	if out, err := ns.CombinedOutput(); err != nil {
		t.Fatalf("kinflow namespace: %v\n%s\n%s", err, out, srv.LogTail(3000))
	}
	tc, err := client.Dial(client.Options{HostPort: srv.Address, Namespace: "default", Logger: quietLog{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(tc.Close)
	s.tc = tc

	n := func(v int) int {
		if v == 0 {
			return 2
		}
		return max(v, 0)
	}
	for range n(opts.GPUHosts) {
		tp.AddGPUHost()
	}
	for range n(opts.Workers) {
		tp.Add("worker")
	}
	for range n(opts.APIs) {
		tp.Add("api")
	}
	tp.UseAPI(0)
	s.waitHealthy()
	if !opts.NoKey {
		s.key = s.generateKey()
	}
	return tp
}

// environ is the environment of process name (empty: the common one).
func (s *stack) environ(name string) []string {
	env := os.Environ()
	for k, v := range s.env {
		env = append(env, k+"="+v)
	}
	for k, v := range s.roles[name] {
		env = append(env, k+"="+v)
	}
	return env
}

// Add starts one more process of role ("api", "worker", "gpu-worker") and
// returns its name. An api gets its own port; a worker calls the GPU host
// of its own number (worker-2 → gpu-worker-2), or the first.
func (tp *Topology) Add(role string) string {
	tp.t.Helper()
	tp.counts[role]++
	i := tp.counts[role]
	name := fmt.Sprintf("%s-%d", role, i)
	env := map[string]string{}
	for k, v := range tp.opts.RoleEnv[role] {
		env[k] = v
	}
	if tp.opts.Metrics && role != "api" {
		env["KINFLOW_METRICS_LISTEN"] = testenv.FreeAddr(tp.t)
	}
	switch role {
	case "api":
		addr := testenv.FreeAddr(tp.t)
		env[roleListenKey[role]] = addr
		tp.APIURLs = append(tp.APIURLs, "http://"+addr)
		env["GPU_EMBED_SERVICE_URL"] = tp.gpuURL(i)
	case "worker":
		env["GPU_EMBED_SERVICE_URL"] = tp.gpuURL(i)
	case "gpu-worker":
		env[roleListenKey[role]] = testenv.FreeAddr(tp.t)
	default:
		tp.t.Fatalf("unknown role %q", role)
	}
	tp.roles[name] = env
	tp.startAs(name, role)
	return name
}

// AddGPUHost starts one more GPU host (a host that joins) and returns its name.
func (tp *Topology) AddGPUHost() string { return tp.Add("gpu-worker") }

// gpuURL is the GPU service URL a worker or api number i calls.
func (tp *Topology) gpuURL(i int) string {
	if tp.counts["gpu-worker"] == 0 {
		return ""
	}
	name := fmt.Sprintf("gpu-worker-%d", i)
	if _, ok := tp.roles[name]; !ok {
		name = "gpu-worker-1"
	}
	return "http://" + tp.roles[name][roleListenKey["gpu-worker"]]
}

// Kill9 kills process name with SIGKILL; Restart starts it again with the
// same environment.
func (tp *Topology) Kill9(name string) { tp.kill9(name) }

// Restart starts process name again with the same environment.
func (tp *Topology) Restart(name string) {
	tp.t.Helper()
	role := name[:strings.LastIndex(name, "-")]
	tp.startAs(name, role)
}

// UseAPI makes the stack's requests go to api number i (0-based).
func (tp *Topology) UseAPI(i int) { tp.base = tp.APIURLs[i] }

// metricSum sums the samples of a Prometheus metric whose line starts with
// prefix, from url's /metrics.
func metricSum(t testing.TB, url, prefix string) float64 {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, prefix) {
			continue
		}
		f := strings.Fields(line)
		v, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += v
		}
	}
	return sum
}

// quietLog discards the SDK's logs.
type quietLog struct{}

func (quietLog) Debug(string, ...interface{}) {}
func (quietLog) Info(string, ...interface{})  {}
func (quietLog) Warn(string, ...interface{})  {}
func (quietLog) Error(string, ...interface{}) {}
