//go:build containers

package docker

import (
	"bufio"
	"bytes"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
)

// TestComposeUpFirstJob builds every image of docker/Dockerfile that
// docker/compose.yaml uses, from local base images (docker/local/bases.sh:
// Debian from debootstrap, Go from the host; no registry is reached), brings
// the whole production stack up with the compose tool — Postgres, the
// Temporal server's schema step, the Temporal server the Dockerfile builds,
// the namespace and migrate steps, gpu-worker, worker and api — runs the
// README's first job through the api's published port, and tears it all
// down. The backends are the synthetic ones (the gpu-worker-synthetic image:
// no step programs), as in `make run`.
//
// `make test-containers` runs it (build tag containers); under CI=true a
// missing engine or compose tool fails it.
func TestComposeUpFirstJob(t *testing.T) {
	c := newComposeRun(t)
	start := time.Now()
	c.run(t, 40*time.Minute, "build")
	built := time.Since(start)
	t.Cleanup(func() { c.down(t) })
	up := time.Now()
	c.run(t, 10*time.Minute, "up", "-d")
	base := "http://127.0.0.1:" + c.apiPort
	if err := waitOK(base+"/api/v1/health/", 5*time.Minute); err != nil {
		c.logs(t)
		t.Fatalf("api: %v", err)
	}
	ready := time.Since(up)

	out := testenv.RunFirstJob(t, base)
	if t.Failed() {
		c.logs(t)
	}
	// Every long-running service is running, and each one-shot step ended with 0.
	for _, svc := range []string{"postgres", "temporal", "api", "worker", "gpu-worker"} {
		if st := c.state(t, svc); st != "running 0" {
			t.Errorf("service %s: %q, want running", svc, st)
		}
	}
	for _, svc := range []string{"temporal-schema", "temporal-namespace", "migrate"} {
		if st := c.state(t, svc); st != "exited 0" {
			t.Errorf("step %s: %q, want exited 0", svc, st)
		}
	}
	// The worker, in its own container, sees the job's folder the api wrote:
	// the media volume is shared.
	job := firstJobID(out)
	if job == "" {
		t.Fatalf("no job id in the README commands' output:\n%s", out)
	}
	if ls := c.output(t, "exec", "-T", "worker", "ls", "/app/media/jobs/"+job); strings.TrimSpace(ls) == "" {
		t.Errorf("the worker sees no files of job %s", job)
	}
	t.Logf("container test: images built in %s, stack ready in %s, first job done in %s",
		built.Round(time.Second), ready.Round(time.Second), time.Since(up).Round(time.Second))
}

type composeRun struct {
	root, project, apiPort, engine string
	tool                           []string
	env                            []string
}

func newComposeRun(t *testing.T) *composeRun {
	t.Helper()
	root := testenv.RepoRoot()
	engine := "/usr/bin/docker" // the engine's own client (scripts/container-deps.sh)
	if _, err := os.Stat(engine); err != nil {
		engine = "docker"
	}
	if out, err := exec.Command(engine, "info").CombinedOutput(); err != nil {
		testenv.Unavailable(t, "no Docker engine answers (%v: %s); `make test-containers` starts one", err, firstLine(out))
	}
	tool := []string{"docker-compose"}
	if _, err := exec.LookPath("docker-compose"); err != nil {
		if exec.Command(engine, "compose", "version").Run() != nil {
			testenv.Unavailable(t, "no compose tool (docker-compose or docker compose)")
		}
		tool = []string{engine, "compose"}
	}
	if _, err := exec.LookPath("debootstrap"); err != nil {
		testenv.Unavailable(t, "no debootstrap for the local base images")
	}
	bases, err := exec.Command("bash", filepath.Join(root, "docker", "local", "bases.sh")).Output()
	if err != nil {
		t.Fatalf("docker/local/bases.sh: %v\n%s", err, exitStderr(err))
	}
	// The engine's client first on PATH: compose hands builds to `docker build`
	// with BuildKit, which skips the stages a target does not need.
	bin := t.TempDir()
	if err := os.Symlink(mustLook(t, engine), filepath.Join(bin, "docker")); err != nil {
		t.Fatal(err)
	}
	_, apiPort, _ := net.SplitHostPort(testenv.FreeAddr(t))
	c := &composeRun{root: root, project: "kinflowtest" + testenv.RandHex(4), apiPort: apiPort, engine: engine, tool: tool}
	c.env = append(os.Environ(),
		"PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"),
		"DOCKER_BUILDKIT=1", "COMPOSE_DOCKER_CLI_BUILD=1",
		"POSTGRES_PASSWORD="+testenv.RandHex(12),
		"KINFLOW_STEP_EXECUTOR=synthetic", "KINFLOW_PREDICTION_ENGINE=synthetic",
		"KINFLOW_GPU_WORKER_TARGET=gpu-worker-synthetic",
		"KINFLOW_API_PORT="+c.apiPort)
	sc := bufio.NewScanner(bytes.NewReader(bases))
	for sc.Scan() {
		if k, _, ok := strings.Cut(sc.Text(), "="); ok && strings.HasPrefix(k, "KINFLOW_") {
			c.env = append(c.env, sc.Text())
		}
	}
	return c
}

func (c *composeRun) cmd(args ...string) *exec.Cmd {
	full := append(append([]string{}, c.tool[1:]...), "-p", c.project, "-f", filepath.Join(c.root, "docker", "compose.yaml"))
	cmd := exec.Command(c.tool[0], append(full, args...)...)
	cmd.Dir = c.root
	cmd.Env = c.env
	return cmd
}

// run runs a compose command, its output in the test log on failure.
func (c *composeRun) run(t *testing.T, limit time.Duration, args ...string) {
	t.Helper()
	cmd := c.cmd(args...)
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("compose %s: %v\n%s", strings.Join(args, " "), err, tailString(buf.String(), 8000))
		}
	case <-time.After(limit):
		_ = cmd.Process.Kill()
		t.Fatalf("compose %s: still running after %v\n%s", strings.Join(args, " "), limit, tailString(buf.String(), 8000))
	}
}

func (c *composeRun) output(t *testing.T, args ...string) string {
	t.Helper()
	out, err := c.cmd(args...).CombinedOutput()
	if err != nil {
		t.Errorf("compose %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return string(out)
}

func (c *composeRun) logs(t *testing.T) {
	t.Helper()
	out, _ := c.cmd("logs", "--no-color", "--tail", "60").CombinedOutput()
	t.Logf("compose logs:\n%s", tailString(string(out), 20000))
}

// down removes the stack's containers, network, volumes and the images it
// built under its one-off project name (the builder's cache stays, so a
// second run builds from cache).
func (c *composeRun) down(t *testing.T) {
	out, err := c.cmd("down", "-v", "--rmi", "local", "--remove-orphans", "-t", "20").CombinedOutput()
	if err != nil {
		t.Errorf("compose down: %v\n%s", err, out)
	}
}

// state is the "status exit-code" of service svc's container, from the
// engine (the compose tools of v1 and v2 print ps differently).
func (c *composeRun) state(t *testing.T, svc string) string {
	t.Helper()
	id := strings.TrimSpace(c.output(t, "ps", "-a", "-q", svc))
	if id == "" {
		return "no container"
	}
	out, err := exec.Command(c.engine, "inspect", "-f", "{{.State.Status}} {{.State.ExitCode}}", id).CombinedOutput()
	if err != nil {
		return fmt.Sprintf("inspect: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

func firstJobID(out string) string {
	const key = `"jobId":"`
	i := strings.Index(out, key)
	if i < 0 {
		return ""
	}
	rest := out[i+len(key):]
	if j := strings.IndexByte(rest, '"'); j > 0 {
		return rest[:j]
	}
	return ""
}

func waitOK(url string, limit time.Duration) error {
	deadline := time.Now().Add(limit)
	var last error
	for time.Now().Before(deadline) {
		resp, err := http.Get(url)
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("status %d", resp.StatusCode)
		}
		last = err
		time.Sleep(time.Second)
	}
	return fmt.Errorf("%s did not answer 200 within %v (last: %v)", url, limit, last)
}

func mustLook(t *testing.T, prog string) string {
	t.Helper()
	p, err := exec.LookPath(prog)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func exitStderr(err error) string {
	if ee, ok := err.(*exec.ExitError); ok {
		return string(ee.Stderr)
	}
	return ""
}

func firstLine(b []byte) string {
	s, _, _ := strings.Cut(strings.TrimSpace(string(b)), "\n")
	return s
}

func tailString(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
