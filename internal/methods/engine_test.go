package methods_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/testenv"
)

// The command engine is tested here on its own, with Python programs that
// stand in for the methods' scripts; the Predict activity's tests
// (activities/predict_test.go) run it through PrepareInput and the store
// with every file contract.

// program returns method key's descriptor running body (a Python program)
// with KEEP_DIR set to the returned folder, and a request over rows.
func program(t *testing.T, key, body string, rows int) (*methods.Descriptor, methods.CommandRequest, string) {
	t.Helper()
	return programFields(t, key, body, rows, "")
}

// programFields is program with more descriptor fields (YAML lines of the
// method's entry, each indented by four spaces).
func programFields(t *testing.T, key, body string, rows int, fields string) (*methods.Descriptor, methods.CommandRequest, string) {
	t.Helper()
	if err := exec.Command(input.DefaultPython, "-c", "import json").Run(); err != nil {
		testenv.Unavailable(t, "the engine programs need %s", input.DefaultPython)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "program.py")
	if err := os.WriteFile(script, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := methods.Parse(fmt.Appendf(nil, `methods:
  - key: %s
    command: {python: %s, script: %s, extra_env: {KEEP_DIR: %s}}
%s`, key, input.DefaultPython, script, dir, fields))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := cat.Get(key)
	work := filepath.Join(dir, "work")
	if err := os.MkdirAll(work, 0o755); err != nil {
		t.Fatal(err)
	}
	req := methods.CommandRequest{JobID: "job1", Target: "kcat", Dir: work, Env: []string{"PATH=" + os.Getenv("PATH")}}
	for i := range rows {
		req.Rows = append(req.Rows, methods.EngineRow{Seq: strings.Repeat("M", i+1), Kwargs: map[string]string{"substrates": "CCO"}})
	}
	return d, req, dir
}

// echoEngine answers each row with its sequence length, says row 1 has no
// prediction, and reports progress.
const echoEngine = `import json, os, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
json.dump({k: os.environ.get(k) for k in ("KEEP_DIR", "HOME")}, open(os.path.join(os.environ["KEEP_DIR"], "env.json"), "w"))
for i in range(len(job["rows"])):
    print("Progress: %d/%d" % (i + 1, len(job["rows"])), flush=True)
json.dump({"predictions": [len(r["sequence"]) for r in job["rows"]], "invalid_indices": [1]}, open(out, "w"))
`

func TestRunCommandJSONContract(t *testing.T) {
	d, req, dir := program(t, "G", echoEngine, 3)
	var progress []int
	req.Progress = func(done int) { progress = append(progress, done) }
	vals, reasons, err := methods.RunCommand(context.Background(), d, req)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, v := range vals {
		if v == nil {
			got = append(got, "-")
		} else {
			got = append(got, fmt.Sprint(*v))
		}
	}
	if strings.Join(got, " ") != "1 2 3" || len(reasons) != 1 || reasons[1] != methods.ReasonNoPrediction {
		t.Errorf("values %v, reasons %v", got, reasons)
	}
	if fmt.Sprint(progress) != "[1 2 3]" {
		t.Errorf("progress %v", progress)
	}
	// Only the base environment and the method's extra_env reach it.
	var env map[string]*string
	raw, _ := os.ReadFile(filepath.Join(dir, "env.json"))
	if err := json.Unmarshal(raw, &env); err != nil {
		t.Fatal(err)
	}
	if env["KEEP_DIR"] == nil || *env["KEEP_DIR"] != dir || env["HOME"] != nil {
		t.Errorf("program environment %v", env)
	}
	// The input and output files are removed; the log stays.
	names, _ := os.ReadDir(req.Dir)
	if len(names) != 1 || names[0].Name() != "engine.log" {
		t.Errorf("work folder holds %v", names)
	}
}

func TestRunCommandFailuresAreEngineErrors(t *testing.T) {
	for _, c := range []struct {
		name, body, want string
	}{
		{"exit", "import sys\nprint('CUDA out of patience', file=sys.stderr)\nsys.exit(1)\n", "Method G prediction failed with an internal error (see the job's engine log)."},
		{"short", "import sys, json\njson.dump([1.0], open(sys.argv[sys.argv.index('--output') + 1], 'w'))\n", "Method G produced 1 prediction(s) for 2 input(s)."},
		{"no output", "pass\n", "Method G output file could not be read."},
		{"garbage", "import sys\nopen(sys.argv[sys.argv.index('--output') + 1], 'w').write('{')\n", "Method G returned an invalid prediction result."},
	} {
		t.Run(c.name, func(t *testing.T) {
			d, req, _ := program(t, "G", c.body, 2)
			_, _, err := methods.RunCommand(context.Background(), d, req)
			var ee *methods.EngineError
			if !errors.As(err, &ee) || ee.Msg != c.want {
				t.Fatalf("error %v, want an EngineError %q", err, c.want)
			}
		})
	}
	d, req, _ := program(t, "G", "pass\n", 2)
	delete(req.Rows[1].Kwargs, "substrates")
	_, _, err := methods.RunCommand(context.Background(), d, req)
	var me *methods.EngineError
	if !errors.As(err, &me) || me.Msg != "Missing column required for Method G: Substrate" {
		t.Errorf("missing column: %v", err)
	}
	d, req, _ = program(t, "G", "pass\n", 1)
	d.Command = nil
	_, _, err = methods.RunCommand(context.Background(), d, req)
	var ee *methods.EngineError
	if !errors.As(err, &ee) || !strings.HasPrefix(ee.Msg, "Method G has no command configured") {
		t.Errorf("no command: %v", err)
	}
}

// sleepyEngine starts a grandchild and waits for ever, recording both pids.
const sleepyEngine = `import os, subprocess, sys, time
child = subprocess.Popen(["sleep", "300"])
open(os.path.join(os.environ["KEEP_DIR"], "pids"), "w").write("%d %d" % (os.getpid(), child.pid))
print("Progress: 0/4", flush=True)
time.sleep(300)
`

func TestRunCommandCancelKillsTheProgramTree(t *testing.T) {
	d, req, dir := program(t, "G", sleepyEngine, 4)
	// Cancellation or a timeout of the activity ends its context.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	_, _, err := methods.RunCommand(ctx, d, req)
	if err == nil {
		t.Fatal("a program that never ends finished")
	}
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("RunCommand returned after %v", took)
	}
	raw, rerr := os.ReadFile(filepath.Join(dir, "pids"))
	if rerr != nil {
		t.Fatalf("the program never started: %v (RunCommand: %v)", rerr, err)
	}
	var pid, child int
	if _, err := fmt.Sscanf(string(raw), "%d %d", &pid, &child); err != nil {
		t.Fatal(err)
	}
	// Both the program and its own child are gone (killed as a group;
	// reaped or zombie-free within a moment).
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range []int{pid, child} {
		for alive(p) {
			if time.Now().After(deadline) {
				t.Fatalf("process %d still runs after RunCommand was cancelled", p)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
}

// alive reports a running (not zombie) process.
func alive(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(b))
	return len(f) > 2 && f[2] != "Z"
}

// leavingEngine answers, then exits leaving a process in its own session
// that holds stdout open, out of reach of the group kill.
const leavingEngine = `import json, os, subprocess, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
rows = json.load(open(inp))["rows"]
child = subprocess.Popen(["sleep", "120"], start_new_session=True)
open(os.path.join(os.environ["KEEP_DIR"], "pids"), "w").write("%d" % child.pid)
json.dump([7] * len(rows), open(out, "w"))
print("x" * (3 << 20))  # one 3 MiB line: it must not stall the program
`

func TestRunCommandDoesNotWaitForLeftoverProcesses(t *testing.T) {
	d, req, dir := program(t, "H", leavingEngine, 4)
	t.Cleanup(func() {
		if raw, err := os.ReadFile(filepath.Join(dir, "pids")); err == nil {
			var pid int
			if _, err := fmt.Sscanf(string(raw), "%d", &pid); err == nil {
				_ = syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	start := time.Now()
	vals, _, err := methods.RunCommand(context.Background(), d, req)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took > 60*time.Second {
		t.Errorf("RunCommand waited %v for a process the program left behind", took)
	}
	if len(vals) != 4 || vals[3] == nil || *vals[3] != 7 {
		t.Errorf("values %v", vals)
	}
	log, _ := os.ReadFile(filepath.Join(req.Dir, "engine.log"))
	if !strings.Contains(string(log), "[stdout] "+strings.Repeat("x", 100)) || !strings.Contains(string(log), "cut off") {
		t.Errorf("engine.log lacks the long line or the cut-off note (%d bytes)", len(log))
	}
}
