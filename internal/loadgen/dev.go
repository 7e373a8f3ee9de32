package loadgen

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/freeport"
)

// DevOptions describe an embedded-default deployment for a load run.
type DevOptions struct {
	// Kinflow and TemporalCLI are the binaries (bin/kinflow, bin/temporal).
	Kinflow, TemporalCLI string
	// Workers is the number of CPU workers: `kinflow dev` is the first,
	// each more a `kinflow worker` process on the same queues and database.
	Workers int
	// Env is extra KEY=VALUE environment for every process.
	Env []string
	// DevEnv is extra KEY=VALUE environment for `kinflow dev` alone, after
	// Env (a profiler's address, which a second process could not bind).
	DevEnv []string
	// Dir holds the deployment's database, media root and logs; empty: a
	// temporary folder, removed by RemoveStopped after Stop.
	Dir string
}

// Dev is a running embedded-default deployment on loopback ports.
type Dev struct {
	// BaseURL is the API's root.
	BaseURL string
	// TemporalAddress is the Temporal dev server's frontend (host:port).
	TemporalAddress string
	// Dir holds the database, media root (Dir/media) and the logs.
	Dir   string
	procs []*exec.Cmd
	temp  bool
	// kinflow and env run operator commands on this deployment (Run).
	kinflow string
	env     []string
}

// Run runs `kinflow args…` against this deployment's database and Temporal
// (an operator command, such as `key weight`) and returns its output.
func (d *Dev) Run(ctx context.Context, args ...string) (string, error) {
	cmd := exec.CommandContext(ctx, d.kinflow, args...)
	cmd.Env = d.env
	out, err := cmd.CombinedOutput()
	if err != nil {
		return string(out), fmt.Errorf("kinflow %v: %w: %s", args, err, out)
	}
	return string(out), nil
}

// StartDev starts `kinflow dev` (Temporal dev server, SQLite, synthetic
// backends, the GPU host in process) and Workers-1 more CPU workers, and
// waits until the API answers.
func StartDev(ctx context.Context, o DevOptions) (*Dev, error) {
	dir := o.Dir
	temp := dir == ""
	if temp {
		var err error
		if dir, err = os.MkdirTemp("", "kinflow-load-"); err != nil {
			return nil, err
		}
	}
	d := &Dev{Dir: dir, temp: temp}
	kinflow, temporal, workers := o.Kinflow, o.TemporalCLI, max(o.Workers, 1)
	var ports [4]int
	for i := range ports {
		p, err := freeport.Port()
		if err != nil {
			return nil, err
		}
		ports[i] = p
	}
	api := fmt.Sprintf("127.0.0.1:%d", ports[0])
	gpu := fmt.Sprintf("127.0.0.1:%d", ports[1])
	d.BaseURL = "http://" + api
	d.TemporalAddress = fmt.Sprintf("127.0.0.1:%d", ports[2])
	env := append(os.Environ(),
		"KINFLOW_DATABASE_URL=sqlite:"+filepath.Join(dir, "kinflow.db"),
		"KINFLOW_MEDIA_ROOT="+filepath.Join(dir, "media"),
		"KINFLOW_API_LISTEN="+api,
		"KINFLOW_GPU_LISTEN="+gpu,
		"GPU_EMBED_SERVICE_URL=http://"+gpu,
		"KINFLOW_TEMPORAL_ADDRESS="+d.TemporalAddress,
		"KINFLOW_DEFAULT_DAILY_QUOTA=1000000",
		"LOG_LEVEL=warn",
	)
	env = append(env, o.Env...)
	d.kinflow, d.env = kinflow, env
	start := func(name string, extra []string, args ...string) error {
		f, err := os.Create(filepath.Join(dir, name+".log"))
		if err != nil {
			return err
		}
		cmd := exec.Command(kinflow, args...)
		cmd.Env, cmd.Stdout, cmd.Stderr = append(env[:len(env):len(env)], extra...), f, f
		cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		if err := cmd.Start(); err != nil {
			return fmt.Errorf("start %s: %w", name, err)
		}
		d.procs = append(d.procs, cmd)
		return nil
	}
	if err := start("dev", o.DevEnv, "dev", "--temporal-cli", temporal, "--data-dir", filepath.Join(dir, "temporal"), "--temporal-ui-port", strconv.Itoa(ports[3])); err != nil {
		d.Stop()
		return nil, err
	}
	if err := d.waitHealthy(ctx); err != nil {
		d.Stop()
		return nil, err
	}
	for i := 1; i < workers; i++ {
		if err := start(fmt.Sprintf("worker%d", i+1), nil, "worker"); err != nil {
			d.Stop()
			return nil, err
		}
	}
	// A worker polls within a second of its start.
	time.Sleep(2 * time.Second)
	return d, nil
}

func (d *Dev) waitHealthy(ctx context.Context) error {
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		resp, err := http.Get(d.BaseURL + "/api/v1/health/")
		if err == nil {
			var h struct {
				Status string `json:"status"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&h)
			resp.Body.Close()
			if resp.StatusCode == 200 {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	data, _ := os.ReadFile(filepath.Join(d.Dir, "dev.log"))
	return errors.New("kinflow dev never became healthy:\n" + string(data))
}

// Log returns the tail of a process's log (dev, worker2, …).
func (d *Dev) Log(name string, tail int) string {
	data, _ := os.ReadFile(filepath.Join(d.Dir, name+".log"))
	if len(data) > tail {
		data = data[len(data)-tail:]
	}
	return string(data)
}

// Stop stops every process (SIGTERM, then SIGKILL after 15 s) and removes
// a temporary Dir.
func (d *Dev) Stop() {
	for i := len(d.procs) - 1; i >= 0; i-- {
		p := d.procs[i]
		_ = p.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = p.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(15 * time.Second):
			_ = p.Process.Kill()
			<-done
		}
	}
	d.procs = nil
	if d.temp {
		stopped.Lock()
		stopped.dirs = append(stopped.dirs, d.Dir)
		stopped.Unlock()
		d.temp = false
	}
}

// stopped are the temporary folders of the deployments stopped so far.
var stopped struct {
	sync.Mutex
	dirs []string
}

// RemoveStopped removes the temporary folders of the deployments stopped
// so far; a program that starts deployments calls it once, at its end.
// Stop leaves them: removing one just before the next deployment starts
// made that one slower. On ext4 without a journal (this project's
// development and CI machines) the kernel does not reuse an inode for a
// minute or more after its deletion, and scans past every such inode of a
// block group for each new file; the next deployment's folder lands in the
// group just freed (docs/BENCHMARKS.md, "Why this machine's figures move
// so much").
func RemoveStopped() {
	stopped.Lock()
	defer stopped.Unlock()
	for _, dir := range stopped.dirs {
		_ = os.RemoveAll(dir)
	}
	stopped.dirs = nil
}
