package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/kinflow/kinflow/internal/freeport"
)

// PrivatePostgres is a Postgres server of one test's own, that the test may
// stop and start (the database outage tests): never the shared server on
// 5432, which other tests use meanwhile.
type PrivatePostgres struct {
	tb   testing.TB
	bin  string
	dir  string
	port int
	// URL is the kinflow database on it.
	URL string
}

// pgBinDirs are where Debian and the official images keep Postgres's
// server programs.
var pgBinDirs = []string{"/usr/lib/postgresql/17/bin", "/usr/lib/postgresql/16/bin", "/usr/lib/postgresql/15/bin", "/usr/local/pgsql/bin"}

// StartPrivatePostgres initialises a cluster in a temporary folder (as the
// postgres OS user when run as root), starts it on a free port and creates
// a database. Without the programs or the user it skips (fails under
// CI=true).
func StartPrivatePostgres(tb testing.TB) *PrivatePostgres {
	tb.Helper()
	var bin string
	for _, d := range pgBinDirs {
		if _, err := os.Stat(filepath.Join(d, "initdb")); err == nil {
			bin = d
			break
		}
	}
	if bin == "" {
		Unavailable(tb, "no Postgres server programs (initdb) in %v", pgBinDirs)
	}
	dir, err := os.MkdirTemp("", "kinflow-pg-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { _ = os.RemoveAll(dir) })
	if os.Geteuid() == 0 {
		u, err := user.Lookup("postgres")
		if err != nil {
			Unavailable(tb, "running as root without a postgres user: %v", err)
		}
		uid, _ := strconv.Atoi(u.Uid)
		gid, _ := strconv.Atoi(u.Gid)
		if err := os.Chmod(dir, 0o700); err != nil {
			tb.Fatal(err)
		}
		if err := os.Chown(dir, uid, gid); err != nil {
			tb.Fatal(err)
		}
	}
	port, err := freeport.Port()
	if err != nil {
		tb.Fatal(err)
	}
	p := &PrivatePostgres{tb: tb, bin: bin, dir: filepath.Join(dir, "data"), port: port}
	p.run("initdb", "-D", p.dir, "-A", "trust", "-U", "postgres", "--no-sync")
	p.Start()
	tb.Cleanup(func() { p.stop("immediate") })
	p.run("createdb", "-h", "127.0.0.1", "-p", strconv.Itoa(port), "-U", "postgres", "kinflow")
	p.URL = fmt.Sprintf("postgres://postgres@127.0.0.1:%d/kinflow?sslmode=disable", port)
	return p
}

// run runs a Postgres program as the postgres OS user (when root).
func (p *PrivatePostgres) run(prog string, args ...string) {
	p.tb.Helper()
	path := filepath.Join(p.bin, prog)
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = "/"
	if out, err := cmd.CombinedOutput(); err != nil {
		p.tb.Fatalf("%s %v: %v\n%s", prog, args, err, out)
	}
}

// Start starts the server and waits until it accepts connections.
func (p *PrivatePostgres) Start() {
	p.tb.Helper()
	p.run("pg_ctl", "-D", p.dir, "-l", filepath.Join(filepath.Dir(p.dir), "server.log"), "-w", "start",
		"-o", fmt.Sprintf("-p %d -k %s -c listen_addresses=127.0.0.1 -c fsync=off", p.port, filepath.Dir(p.dir)))
}

// Stop stops the server (fast shutdown: sessions are cut, as in an outage).
func (p *PrivatePostgres) Stop() {
	p.tb.Helper()
	p.stop("fast")
}

func (p *PrivatePostgres) stop(mode string) {
	path := filepath.Join(p.bin, "pg_ctl")
	args := []string{"-D", p.dir, "-m", mode, "-w", "stop"}
	var cmd *exec.Cmd
	if os.Geteuid() == 0 {
		cmd = exec.Command("runuser", append([]string{"-u", "postgres", "--", path}, args...)...)
	} else {
		cmd = exec.Command(path, args...)
	}
	cmd.Dir = "/"
	_ = cmd.Run()
}
