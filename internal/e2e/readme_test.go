package e2e

import (
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/testenv"
)

// TestREADMEFirstJobOnKinflowDev drives a running `kinflow dev` (what
// `make run` starts) from outside, over HTTP only, with the README's "A first
// job" commands exactly as written: health, key, submit, wait, status,
// result as CSV and as JSON. Then Ctrl-C must stop everything it started.
func TestREADMEFirstJobOnKinflowDev(t *testing.T) {
	for _, port := range []string{"8000", "7233", "8233", "8080"} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 200*time.Millisecond); err == nil {
			c.Close()
			testenv.Unavailable(t, "port %s is in use (is `make run` running?); the README's commands need it", port)
		}
	}
	root := testenv.RepoRoot()
	tmp := t.TempDir()
	dev := exec.Command(kinflowBin, "dev", "--temporal-cli", filepath.Join(root, "bin", "temporal"), "--data-dir", filepath.Join(tmp, ".data"))
	dev.Dir = root
	dev.Env = append(os.Environ(), "KINFLOW_DATABASE_URL=sqlite:"+filepath.Join(tmp, "kinflow.db"), "KINFLOW_MEDIA_ROOT="+filepath.Join(tmp, "media"))
	logf, _ := os.Create(filepath.Join(tmp, "dev.log"))
	dev.Stdout, dev.Stderr = logf, logf
	if err := dev.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- dev.Wait() }()
	defer func() {
		if dev.ProcessState == nil {
			_ = dev.Process.Kill()
		}
		if t.Failed() {
			data, _ := os.ReadFile(filepath.Join(tmp, "dev.log"))
			t.Logf("kinflow dev log:\n%s", tail(data, 4000))
		}
	}()
	waitHTTP(t, "http://127.0.0.1:8000/api/v1/health/", 60*time.Second)

	testenv.RunFirstJob(t, "")
	if resp, err := http.Get("http://127.0.0.1:8233/"); err != nil || resp.StatusCode != 200 {
		t.Errorf("Temporal UI: %v", err)
	} else {
		resp.Body.Close()
	}

	// Ctrl-C stops the API, the workers and the Temporal dev server.
	_ = dev.Process.Signal(syscall.SIGINT)
	select {
	case <-exited:
	case <-time.After(30 * time.Second):
		t.Fatal("kinflow dev did not stop within 30 s of Ctrl-C")
	}
	for _, port := range []string{"8000", "7233", "8233"} {
		if c, err := net.DialTimeout("tcp", "127.0.0.1:"+port, 200*time.Millisecond); err == nil {
			c.Close()
			t.Errorf("port %s still answers after Ctrl-C: a process was left behind", port)
		}
	}
}

func waitHTTP(t *testing.T, url string, timeout time.Duration) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return
			}
		}
		time.Sleep(200 * time.Millisecond)
	}
	t.Fatalf("%s did not answer 200 within %v", url, timeout)
}

func tail(b []byte, n int) []byte {
	if len(b) > n {
		return b[len(b)-n:]
	}
	return b
}
