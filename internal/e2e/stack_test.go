// Package e2e runs kinflow as it runs in production: the real binary's api,
// worker and gpu-worker as separate processes, a real Temporal dev server, a
// real Postgres database, real HTTP and real files. Tests kill processes
// with SIGKILL and check that jobs still finish and nothing is computed
// twice.
package e2e

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"math/big"
	mrand "math/rand/v2"
	"mime/multipart"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"

	"github.com/kinflow/kinflow/internal/loadgen"
	"github.com/kinflow/kinflow/internal/testenv"
)

var kinflowBin string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kinflow-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	kinflowBin = filepath.Join(dir, "kinflow")
	build := exec.Command("go", "build", "-o", kinflowBin, "./cmd/kinflow")
	build.Dir = testenv.RepoRoot()
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "build kinflow: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	loadgen.RemoveStopped()
	testenv.StopTemporal()
	_ = os.RemoveAll(dir)
	os.Exit(code)
}

// stack is one kinflow deployment: api, worker and gpu-worker processes on
// their own task queues, database and media root.
type stack struct {
	t      testing.TB
	env    map[string]string
	roles  map[string]map[string]string
	procs  map[string]*exec.Cmd
	logs   map[string]string
	base   string
	key    string
	media  string
	tc     client.Client
	cpuQ   string
	gpuQ   string
	exited map[string]chan struct{}
}

// newStack starts api, worker and gpu-worker with env (common) and
// roleEnv (per role) on top of the test defaults.
func newStack(t testing.TB, env map[string]string, roleEnv map[string]map[string]string) *stack {
	t.Helper()
	tmp := t.TempDir()
	tmpl := testenv.MustTemporal(t)
	suffix := testenv.RandHex(4)
	s := &stack{
		t: t, roles: roleEnv, procs: map[string]*exec.Cmd{}, logs: map[string]string{}, exited: map[string]chan struct{}{},
		media: filepath.Join(tmp, "media"), tc: tmpl.Client,
		cpuQ: "cpu-" + suffix, gpuQ: "gpu-" + suffix,
	}
	if s.roles == nil {
		s.roles = map[string]map[string]string{}
	}
	apiAddr, gpuAddr := testenv.FreeAddr(t), testenv.FreeAddr(t)
	s.base = "http://" + apiAddr
	s.env = map[string]string{
		"KINFLOW_DATABASE_URL":              testenv.PostgresURL(t),
		"KINFLOW_TEMPORAL_ADDRESS":          tmpl.Server.FrontendHostPort(),
		"KINFLOW_CPU_TASK_QUEUE":            s.cpuQ,
		"KINFLOW_GPU_TASK_QUEUE":            s.gpuQ,
		"KINFLOW_MEDIA_ROOT":                s.media,
		"KINFLOW_API_LISTEN":                apiAddr,
		"KINFLOW_GPU_LISTEN":                gpuAddr,
		"GPU_EMBED_SERVICE_URL":             "http://" + gpuAddr,
		"GPU_EMBED_HEALTH_TTL_SECONDS":      "1",
		"KINFLOW_HEARTBEAT_TIMEOUT_SECONDS": "5",
		"LOG_LEVEL":                         "info",
	}
	for k, v := range env {
		s.env[k] = v
	}
	s.makeMediaRoot()
	t.Cleanup(s.stop)
	for _, role := range []string{"api", "worker", "gpu-worker"} {
		s.start(role)
	}
	s.waitHealthy()
	s.key = s.generateKey()
	return s
}

// makeMediaRoot creates the stack's media root, as an operator (or a
// volume) does: the roles create no missing root, and mark a fresh one at
// start.
func (s *stack) makeMediaRoot() {
	s.t.Helper()
	if err := os.MkdirAll(s.env["KINFLOW_MEDIA_ROOT"], 0o755); err != nil {
		s.t.Fatal(err)
	}
}

func (s *stack) start(role string) { s.startAs(role, role) }

// startAs starts the kinflow role as the process name (its s.roles entry,
// log and kill9 handle), so that a stack can run two of one role.
func (s *stack) startAs(name, role string) {
	s.t.Helper()
	cmd := exec.Command(kinflowBin, role)
	cmd.Env = os.Environ()
	for k, v := range s.env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	for k, v := range s.roles[name] {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	logPath := filepath.Join(s.t.TempDir(), name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		s.t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		s.t.Fatalf("start %s: %v", name, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	s.procs[name], s.logs[name], s.exited[name] = cmd, logPath, done
}

// kill9 kills a role with SIGKILL and waits for it to die.
func (s *stack) kill9(role string) {
	s.t.Helper()
	if p := s.procs[role]; p != nil && p.Process != nil {
		_ = p.Process.Signal(syscall.SIGKILL)
		<-s.exited[role]
	}
}

func (s *stack) stop() {
	for role, p := range s.procs {
		if p.Process == nil {
			continue
		}
		_ = p.Process.Signal(syscall.SIGTERM)
		select {
		case <-s.exited[role]:
		case <-time.After(10 * time.Second):
			_ = p.Process.Kill()
			<-s.exited[role]
		}
	}
	if s.t.Failed() {
		for role, path := range s.logs {
			data, _ := os.ReadFile(path)
			if len(data) > 6000 {
				data = data[len(data)-6000:]
			}
			s.t.Logf("---- %s log (tail) ----\n%s", role, data)
		}
	}
}

// waitHealthy waits for the api's health and, when the stack runs a GPU
// host, for its HTTP API to answer (a test may call it at once).
func (s *stack) waitHealthy() {
	s.t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	urls := []string{s.base + "/api/v1/health/"}
	if _, ok := s.procs["gpu-worker"]; ok && s.env["KINFLOW_GPU_LISTEN"] != "" {
		urls = append(urls, "http://"+s.env["KINFLOW_GPU_LISTEN"]+"/health")
	}
	for _, u := range urls {
		for {
			resp, err := http.Get(u)
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Now().After(deadline) {
				s.t.Fatalf("%s never answered 200", u)
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
}

func (s *stack) generateKey() string {
	s.t.Helper()
	var out struct {
		Key string `json:"key"`
	}
	code := s.do("POST", "/api/api-key/generate/", nil, "", &out)
	if code != 201 || !strings.HasPrefix(out.Key, "ak_") {
		s.t.Fatalf("generate key: %d %+v", code, out)
	}
	return out.Key
}

// do sends a request with the stack's key and decodes a JSON answer into out.
func (s *stack) do(method, path string, body io.Reader, contentType string, out any) int {
	s.t.Helper()
	req, err := http.NewRequest(method, s.base+path, body)
	if err != nil {
		s.t.Fatal(err)
	}
	if s.key != "" {
		req.Header.Set("Authorization", "Bearer "+s.key)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		s.t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	if out != nil {
		if sp, ok := out.(*string); ok {
			*sp = string(data)
		} else if err := json.Unmarshal(data, out); err != nil {
			s.t.Fatalf("%s %s: %d %s: %v", method, path, resp.StatusCode, data, err)
		}
	}
	return resp.StatusCode
}

// submit uploads csv for targets/methods and returns the job id.
func (s *stack) submit(csv string, targets []string, methods map[string]string) string {
	s.t.Helper()
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csv))
	tj, _ := json.Marshal(targets)
	mj, _ := json.Marshal(methods)
	_ = mw.WriteField("targets", string(tj))
	_ = mw.WriteField("methods", string(mj))
	_ = mw.Close()
	var out struct {
		JobID string `json:"jobId"`
		Error string `json:"error"`
	}
	if code := s.do("POST", "/api/v1/submit/", &buf, mw.FormDataContentType(), &out); code != 201 {
		s.t.Fatalf("submit: %d %s", code, out.Error)
	}
	return out.JobID
}

// status is the part of the status payload the tests read.
type status struct {
	Status    string `json:"status"`
	Synthetic bool   `json:"synthetic"`
	Error     string `json:"error"`
	Progress  struct {
		Embedding *struct {
			Total    int `json:"total"`
			Computed int `json:"computed"`
			Need     int `json:"needComputation"`
		} `json:"embedding"`
	} `json:"progress"`
	// Overall is kinflow's whole-job progress.
	Overall struct {
		Percent    float64 `json:"percent"`
		ETASeconds *int64  `json:"etaSeconds"`
		Phase      string  `json:"phase"`
		Rows       int     `json:"rows"`
		Sequences  *int    `json:"sequences"`
		Text       string  `json:"text"`
	} `json:"overall"`
	Stages []struct {
		Status            string `json:"status"`
		SequencesEmbedded *int   `json:"sequencesEmbedded"`
		Embedding         struct {
			Total    int    `json:"total"`
			Cached   int    `json:"cachedAlready"`
			Need     int    `json:"needComputation"`
			Computed int    `json:"computed"`
			State    string `json:"state"`
		} `json:"embedding"`
	} `json:"progressStages"`
	GPU *struct {
		Events []struct {
			MethodKey string `json:"methodKey"`
			Reason    string `json:"reason"`
			Failed    bool   `json:"failed"`
			Completed bool   `json:"completed"`
		} `json:"events"`
	} `json:"gpuPrecompute"`
}

func (st status) reasons() []string {
	if st.GPU == nil {
		return nil
	}
	var out []string
	for _, e := range st.GPU.Events {
		out = append(out, e.Reason)
	}
	return out
}

func (s *stack) status(jobID string) status {
	s.t.Helper()
	var st status
	if code := s.do("GET", "/api/v1/status/"+jobID+"/", nil, "", &st); code != 200 {
		s.t.Fatalf("status %s: %d", jobID, code)
	}
	return st
}

// waitDone polls the job until it is Completed or Failed.
func (s *stack) waitDone(jobID string, timeout time.Duration) status {
	s.t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		st := s.status(jobID)
		if st.Status == "Completed" || st.Status == "Failed" {
			return st
		}
		if time.Now().After(deadline) {
			s.t.Fatalf("job %s still %s after %v", jobID, st.Status, timeout)
		}
		time.Sleep(150 * time.Millisecond)
	}
}

func (s *stack) resultCSV(jobID string) string {
	s.t.Helper()
	var body string
	if code := s.do("GET", "/api/v1/result/"+jobID+"/", nil, "", &body); code != 200 {
		s.t.Fatalf("result %s: %d %s", jobID, code, body)
	}
	return body
}

// cacheFiles lists every artefact under sequence_info with its modification
// time and inode, to prove later that none was rewritten.
func (s *stack) cacheFiles() map[string]string {
	s.t.Helper()
	out := map[string]string{}
	root := filepath.Join(s.media, "sequence_info")
	_ = filepath.Walk(root, func(p string, fi os.FileInfo, err error) error {
		if err != nil || fi.IsDir() {
			return nil
		}
		name := fi.Name()
		if strings.HasPrefix(name, ".") || name == "manifest.json" || strings.HasSuffix(name, ".lease") || strings.HasSuffix(name, ".lock") {
			return nil
		}
		ino := uint64(0)
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		out[p] = fmt.Sprintf("%d/%d", fi.ModTime().UnixNano(), ino)
		return nil
	})
	return out
}

// countWorkflows counts the workflows of a type on the stack's queues.
func (s *stack) countWorkflows(wfType string) int64 {
	s.t.Helper()
	q := fmt.Sprintf("WorkflowType = '%s' AND (TaskQueue = '%s' OR TaskQueue = '%s')", wfType, s.cpuQ, s.gpuQ)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	resp, err := s.tc.CountWorkflow(ctx, &workflowservice.CountWorkflowExecutionsRequest{Namespace: "default", Query: q})
	if err != nil {
		s.t.Fatalf("count workflows: %v", err)
	}
	return resp.GetCount()
}

// csvRows builds an input CSV of n rows with random sequences of length
// seqLen (deterministic in seed) and columns for every method.
func csvRows(seed uint64, n, seqLen int) string {
	const aa = "ACDEFGHIKLMNPQRSTVWY"
	r := mrand.New(mrand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	subs := []string{"CC(=O)O", "OC(=O)CCC(=O)O", "C1=CC=CC=C1O", "CCO", "OCC(O)CO"}
	var b strings.Builder
	b.WriteString("Protein Sequence,Substrate,Substrates,Products\n")
	for i := 0; i < n; i++ {
		seq := make([]byte, seqLen)
		for j := range seq {
			seq[j] = aa[r.IntN(len(aa))]
		}
		sub := subs[r.IntN(len(subs))]
		fmt.Fprintf(&b, "%s,%s,%s;O,CC=O;O\n", seq, sub, sub)
	}
	return b.String()
}

func randSeed() uint64 {
	n, _ := rand.Int(rand.Reader, big.NewInt(1<<62))
	return n.Uint64()
}
