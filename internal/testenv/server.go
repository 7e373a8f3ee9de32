package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/freeport"
	"go.temporal.io/sdk/client"
)

// TemporalServerPath is the Temporal server that `make bin/temporal-server`
// builds (the production topology's server, on Postgres).
func TemporalServerPath() string {
	if p := os.Getenv("KINFLOW_TEMPORAL_SERVER"); p != "" {
		return p
	}
	return filepath.Join(RepoRoot(), "bin", "temporal-server")
}

// TemporalSQLToolPath is the server's schema tool, built beside it.
func TemporalSQLToolPath() string {
	return filepath.Join(filepath.Dir(TemporalServerPath()), "temporal-sql-tool")
}

// TemporalServerConfig is the server configuration shipped in the repository
// (a template filled from the environment), used by tests and docs alike.
func TemporalServerConfig() string {
	return filepath.Join(RepoRoot(), "docker", "temporal", "config.yaml")
}

// TemporalDynamicConfig is the server's dynamic configuration shipped in the
// repository (docker/temporal/dynamicconfig.yaml), which config.yaml reads
// from DYNAMIC_CONFIG_FILE_PATH.
func TemporalDynamicConfig() string {
	return filepath.Join(RepoRoot(), "docker", "temporal", "dynamicconfig.yaml")
}

// TemporalSchemaScript creates and migrates the server's databases.
func TemporalSchemaScript() string {
	return filepath.Join(RepoRoot(), "docker", "temporal", "setup-schema.sh")
}

// TemporalDBEnvKeys are the variables docker/temporal/config.yaml and
// setup-schema.sh read for the server's databases (docker/compose.yaml sets
// the same on its temporal services).
var TemporalDBEnvKeys = []string{"POSTGRES_SEEDS", "DB_PORT", "POSTGRES_USER", "POSTGRES_PWD", "DBNAME", "VISIBILITY_DBNAME"}

// TemporalServer is a real Temporal server process on two fresh Postgres
// databases (its store and its SQL visibility), schema set up by its own
// schema tool. It can be killed and started again on the same databases
// and ports.
type TemporalServer struct {
	// Address is the frontend's host:port.
	Address string
	tb      testing.TB
	env     []string
	cmd     *exec.Cmd
	exited  chan struct{}
	logPath string
}

// StartTemporalServer sets up the databases and starts a server for tb,
// stopped and dropped at cleanup. A missing binary skips tb (fails it under
// CI=true).
func StartTemporalServer(tb testing.TB) *TemporalServer {
	tb.Helper()
	for _, p := range []string{TemporalServerPath(), TemporalSQLToolPath()} {
		if _, err := os.Stat(p); err != nil {
			Unavailable(tb, "Temporal server not built at %s (run `make bin/temporal-server`): %v", p, err)
		}
	}
	admin, err := url.Parse(PostgresAdminURL())
	if err != nil {
		tb.Fatalf("Postgres URL: %v", err)
	}
	host, port := admin.Hostname(), admin.Port()
	if port == "" {
		port = "5432"
	}
	user := admin.User.Username()
	pwd, _ := admin.User.Password()
	dbs := map[string]string{}
	for _, kind := range []string{"temporal", "visibility"} {
		u, drop, err := CreatePostgresDB("t" + kind)
		if err != nil {
			Unavailable(tb, "Postgres: %v", err)
		}
		tb.Cleanup(drop)
		pu, _ := url.Parse(u)
		dbs[kind] = pu.Path[1:]
	}
	vals := []string{host, port, user, pwd, dbs["temporal"], dbs["visibility"]}
	var dbEnv []string
	for i, k := range TemporalDBEnvKeys {
		dbEnv = append(dbEnv, k+"="+vals[i])
	}
	// The schema, by the same script as docker/compose.yaml's temporal-schema.
	setup := exec.Command("bash", TemporalSchemaScript())
	setup.Env = append(append(os.Environ(), dbEnv...), "TEMPORAL_SQL_TOOL="+TemporalSQLToolPath())
	if out, err := setup.CombinedOutput(); err != nil {
		tb.Fatalf("%s: %v\n%s", TemporalSchemaScript(), err, out)
	}
	s := &TemporalServer{tb: tb, logPath: filepath.Join(tb.TempDir(), "temporal-server.log")}
	tb.Cleanup(s.Stop)
	// The ports are free when picked and bound by the server a moment later:
	// another package's server (go test runs packages at once) can take one
	// in between. A start that dies on a taken port tries fresh ports.
	for attempt := 1; ; attempt++ {
		ports := map[string]string{}
		for _, k := range []string{"FRONTEND_GRPC_PORT", "FRONTEND_HTTP_PORT", "HISTORY_GRPC_PORT", "MATCHING_GRPC_PORT", "WORKER_GRPC_PORT",
			"FRONTEND_MEMBERSHIP_PORT", "HISTORY_MEMBERSHIP_PORT", "MATCHING_MEMBERSHIP_PORT", "WORKER_MEMBERSHIP_PORT"} {
			p, err := freeport.Port()
			if err != nil {
				tb.Fatal(err)
			}
			ports[k] = strconv.Itoa(p)
		}
		s.Address = "127.0.0.1:" + ports["FRONTEND_GRPC_PORT"]
		s.env = append(append(os.Environ(), dbEnv...), "BIND_ON_IP=127.0.0.1", "LOG_LEVEL=warn")
		for k, v := range ports {
			s.env = append(s.env, k+"="+v)
		}
		err := s.start()
		if err == nil {
			return s
		}
		if attempt < 3 && errors.Is(err, errExitedAtStart) && strings.Contains(s.LogTail(1<<20), "address already in use") {
			tb.Logf("Temporal server: a port was taken at start, trying other ports (attempt %d)", attempt)
			continue
		}
		tb.Fatalf("Temporal server: %v\n%s", err, s.LogTail(4000))
	}
}

// errExitedAtStart is start's error when the process ended before its
// frontend answered.
var errExitedAtStart = errors.New("exited at start")

// Start starts the server process (again, after Kill9) and waits until its
// frontend answers a health check.
func (s *TemporalServer) Start() {
	s.tb.Helper()
	if err := s.start(); err != nil {
		s.tb.Fatalf("Temporal server: %v\n%s", err, s.LogTail(4000))
	}
}

func (s *TemporalServer) start() error {
	f, err := os.OpenFile(s.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return err
	}
	cmd := exec.Command(TemporalServerPath(), "--config-file", TemporalServerConfig(), "--allow-no-auth", "start")
	cmd.Env = append(s.env, "DYNAMIC_CONFIG_FILE_PATH="+TemporalDynamicConfig())
	cmd.Stdout, cmd.Stderr = f, f
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		f.Close()
		return fmt.Errorf("start: %w", err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); f.Close(); close(done) }()
	s.cmd, s.exited = cmd, done
	return s.waitHealthy(90 * time.Second)
}

func (s *TemporalServer) waitHealthy(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	var last error
	for time.Now().Before(deadline) {
		select {
		case <-s.exited:
			return errExitedAtStart
		default:
		}
		if c, err := net.DialTimeout("tcp", s.Address, 200*time.Millisecond); err == nil {
			c.Close()
			hc, err := client.Dial(client.Options{HostPort: s.Address, Namespace: "temporal-system", Logger: quiet{}})
			if err == nil {
				ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
				_, err = hc.CheckHealth(ctx, &client.CheckHealthRequest{})
				cancel()
				hc.Close()
				if err == nil {
					return nil
				}
			}
			last = err
		}
		time.Sleep(250 * time.Millisecond)
	}
	return fmt.Errorf("no healthy frontend at %s within %v (last: %v)", s.Address, timeout, last)
}

// Kill9 kills the server with SIGKILL and waits until it is gone.
func (s *TemporalServer) Kill9() {
	if s.cmd != nil && s.cmd.Process != nil {
		_ = s.cmd.Process.Signal(syscall.SIGKILL)
		<-s.exited
	}
}

// Stop stops the server with SIGTERM (SIGKILL after 15 s).
func (s *TemporalServer) Stop() {
	if s.cmd == nil || s.cmd.Process == nil {
		return
	}
	select {
	case <-s.exited:
		return
	default:
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.exited:
	case <-time.After(15 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.exited
	}
}

// LogTail is the last n bytes of the server's log.
func (s *TemporalServer) LogTail(n int) string {
	data, _ := os.ReadFile(s.logPath)
	if len(data) > n {
		data = data[len(data)-n:]
	}
	return string(data)
}

// LogLines returns the lines of the server's log that contain substr, at
// most max of them (the first ones): what the server said about one
// workflow, where LogTail's end holds only the newest lines.
func (s *TemporalServer) LogLines(substr string, max int) string {
	data, _ := os.ReadFile(s.logPath)
	var out []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, substr) {
			out = append(out, l)
			if len(out) == max {
				break
			}
		}
	}
	return strings.Join(out, "\n")
}

// quiet discards the SDK's logs while polling for readiness.
type quiet struct{}

func (quiet) Debug(string, ...interface{}) {}
func (quiet) Info(string, ...interface{})  {}
func (quiet) Warn(string, ...interface{})  {}
func (quiet) Error(string, ...interface{}) {}
