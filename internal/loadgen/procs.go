package loadgen

import (
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// clockTicks is Linux's USER_HZ, the unit of /proc/<pid>/stat's CPU times:
// 100 on every architecture Go supports on Linux.
const clockTicks = 100

// CPUTime is the CPU time (user + system) process pid has used so far, from
// /proc/<pid>/stat: the figure docs/BENCHMARKS.md divides by the jobs of a
// burst for "CPU per small job".
func CPUTime(pid int) (time.Duration, error) {
	// Fields 14 and 15 (utime, stime); statFields starts at field 3.
	return cpuTicks(pid, 11, 13)
}

// SystemTime is the part of CPUTime spent in the kernel (stime): on a
// file system where creating a file is dear, most of what a burst adds.
func SystemTime(pid int) (time.Duration, error) {
	return cpuTicks(pid, 12, 13)
}

// cpuTicks sums the fields [from, to) of /proc/<pid>/stat after the
// command name, as CPU time.
func cpuTicks(pid, from, to int) (time.Duration, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	f, err := statFields(data)
	if err != nil {
		return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
	}
	var ticks int64
	for _, s := range f[from:to] {
		n, err := strconv.ParseInt(s, 10, 64)
		if err != nil {
			return 0, fmt.Errorf("/proc/%d/stat: %w", pid, err)
		}
		ticks += n
	}
	return time.Duration(ticks) * time.Second / clockTicks, nil
}

// statFields are the fields of a /proc/<pid>/stat line after the command
// name (field 3 on), which may itself hold spaces and parentheses.
func statFields(data []byte) ([]string, error) {
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	if i < 0 {
		return nil, fmt.Errorf("no command name")
	}
	f := strings.Fields(s[i+1:])
	if len(f) < 13 {
		return nil, fmt.Errorf("%d fields", len(f))
	}
	return f, nil
}

// Procs are the deployment's processes by name: "kinflow" (`kinflow dev`),
// "worker2"… (more CPU workers) and "temporal" (the Temporal dev server
// that `kinflow dev` started), for CPU accounting and profiling.
func (d *Dev) Procs() map[string]int {
	out := map[string]int{}
	if len(d.procs) == 0 {
		return out
	}
	dev := d.procs[0].Process.Pid
	out["kinflow"] = dev
	for i, p := range d.procs[1:] {
		out[fmt.Sprintf("worker%d", i+2)] = p.Process.Pid
	}
	if pid := childNamed(dev, "temporal"); pid > 0 {
		out["temporal"] = pid
	}
	return out
}

// StepServers are the resident step servers the deployment's GPU host has
// started so far (`kinflow step-server`: children of a kinflow process
// running its own executable, so with its command name): the synthetic
// executor's stand-in for the models, whose CPU the processes' own figures
// leave out. A step server starts with the first job that needs its step,
// so a burst may see new ones appear.
func (d *Dev) StepServers() []int {
	var out []int
	for _, p := range d.procs {
		comm, err := os.ReadFile(fmt.Sprintf("/proc/%d/comm", p.Process.Pid))
		if err != nil {
			continue
		}
		out = append(out, childrenNamed(p.Process.Pid, strings.TrimSpace(string(comm)))...)
	}
	return out
}

// childNamed finds a child of parent whose command is name (0: none).
func childNamed(parent int, name string) int {
	if pids := childrenNamed(parent, name); len(pids) > 0 {
		return pids[0]
	}
	return 0
}

// childrenNamed finds the children of parent whose command is name.
func childrenNamed(parent int, name string) []int {
	var out []int
	dirs, _ := filepath.Glob("/proc/[0-9]*")
	for _, dir := range dirs {
		data, err := os.ReadFile(filepath.Join(dir, "stat"))
		if err != nil {
			continue
		}
		f, err := statFields(data)
		if err != nil || f[1] != strconv.Itoa(parent) {
			continue
		}
		comm, _ := os.ReadFile(filepath.Join(dir, "comm"))
		if strings.TrimSpace(string(comm)) == name {
			pid, _ := strconv.Atoi(filepath.Base(dir))
			out = append(out, pid)
		}
	}
	return out
}

// TemporalMetrics is the Temporal dev server's Prometheus endpoint, read
// from the line the CLI prints at start ("Metrics: http://…/metrics") in
// the log `kinflow dev` keeps beside the server's database; "" when not
// found.
func (d *Dev) TemporalMetrics() string {
	data, err := os.ReadFile(filepath.Join(d.Dir, "temporal", "temporal.log"))
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, "Metrics:"); ok {
			return strings.TrimSpace(rest)
		}
	}
	return ""
}
