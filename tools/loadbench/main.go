// Command loadbench measures kinflow under many users at once: it starts a
// fresh embedded-default deployment (`kinflow dev`: Temporal dev server,
// SQLite, synthetic backends) on loopback ports, optionally with more
// `kinflow worker` processes on the same queues, and drives bursts of
// concurrent small jobs through the public API with internal/loadgen. It
// prints jobs/s, p50/p99 submit→Completed latency, the CPU each burst cost
// per job the Temporal dev server, kinflow and the synthetic step servers
// kinflow started (the models' stand-in), and /status/'s req/s for
// each burst size. With -profile DIR it also profiles one more burst of
// each size: kinflow with Go's profiler, the dev server with perf
// (profile.go). `make bench-load` runs it; docs/BENCHMARKS.md holds the
// figures.
//
// Traffic goes to 127.0.0.1 only; every burst is bounded in jobs and time.
package main

import (
	"context"
	"flag"
	"fmt"
	"io/fs"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/kinflow/kinflow/internal/loadgen"
)

func main() {
	if err := run(); err != nil {
		fmt.Fprintln(os.Stderr, "loadbench:", err)
		os.Exit(1)
	}
}

// bench holds the flags of one loadbench run.
type bench struct {
	kinflow, temporal string
	alone, rows, big  int
	mixed             []int
	lead, timeout     time.Duration
	poll              time.Duration
	statusClients     int
	env               []string
	prof              *profiler // nil without -profile
	// withFloor runs the floor (floor.go) after each burst.
	withFloor bool
	// fair is the backlog of the fairness runs (fair.go); 0 skips them.
	fair int
}

func run() error {
	var b bench
	flag.StringVar(&b.kinflow, "kinflow", "bin/kinflow", "the kinflow binary")
	flag.StringVar(&b.temporal, "temporal-cli", "bin/temporal", "the Temporal CLI (dev server)")
	workers := flag.String("workers", "1,2", "CPU worker processes to measure with, comma-separated (1: kinflow dev alone; each more is a `kinflow worker`)")
	bursts := flag.String("bursts", "1,50,200", "burst sizes (concurrent jobs), comma-separated; 1 runs -alone jobs one after another")
	flag.IntVar(&b.alone, "alone", 10, "jobs run one at a time for the burst size 1")
	flag.IntVar(&b.rows, "rows", 3, "rows per small job")
	flag.IntVar(&b.big, "big", 0, "also measure a burst of -mixed small jobs while a job of this many rows runs (0: skip)")
	mixed := flag.String("mixed", "1,100", "small jobs beside the large one, comma-separated burst sizes")
	flag.DurationVar(&b.lead, "big-lead", 5*time.Second, "time between the large job's submit and the small ones'")
	flag.IntVar(&b.statusClients, "status-clients", 8, "clients reading /status/ in a closed loop during each burst")
	flag.DurationVar(&b.timeout, "timeout", 10*time.Minute, "bound of each burst")
	flag.DurationVar(&b.poll, "poll", 250*time.Millisecond, "how often each job of a burst reads its status (latencies are quantised by it)")
	env := flag.String("env", "", "extra environment for every process, KEY=VALUE,KEY=VALUE")
	profile := flag.String("profile", "", "write CPU profiles of one more burst of each size (2 jobs or more) into this folder: kinflow's (Go pprof) and the Temporal dev server's (perf), with summaries")
	flag.IntVar(&b.fair, "fair", 0, "also measure one key's 150-row job behind another key's backlog of this many (first come first served, then fair by key), and two keys of weights 1 and 2 (fair.go; 0: skip)")
	flag.BoolVar(&b.withFloor, "floor", false, "after each burst, a burst of as many no-op workflows in the shape of one of its jobs' history, on the same Temporal dev server: the jobs/s Temporal allows on this machine when the jobs do nothing (floor.go)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ws, err := ints(*workers)
	if err != nil {
		return fmt.Errorf("-workers: %w", err)
	}
	bs, err := ints(*bursts)
	if err != nil {
		return fmt.Errorf("-bursts: %w", err)
	}
	if b.mixed, err = ints(*mixed); err != nil {
		return fmt.Errorf("-mixed: %w", err)
	}
	if *env != "" {
		b.env = strings.Split(*env, ",")
	}
	if *profile != "" {
		if b.prof, err = newProfiler(*profile); err != nil {
			return err
		}
	}
	// Every deployment's folder is kept until the run ends (RemoveStopped
	// says why).
	defer loadgen.RemoveStopped()
	load, _ := os.ReadFile("/proc/loadavg")
	fmt.Printf("load average at start: %s", load)
	fmt.Printf("%-8s %-7s %6s %9s %9s %9s %9s %9s %9s %10s %s\n", "workers", "jobs", "jobs/s", "p50 s", "p99 s", "max s", "tmprl ms", "kflow ms", "steps ms", "status/s", "note")
	for _, nw := range ws {
		if err := b.deployment(ctx, nw, bs); err != nil {
			return err
		}
	}
	if b.fair > 0 {
		return b.fairness(ctx)
	}
	return nil
}

// deployment measures every burst size on one fresh deployment with nw CPU
// workers.
func (b *bench) deployment(ctx context.Context, nw int, bs []int) error {
	o := loadgen.DevOptions{Kinflow: b.kinflow, TemporalCLI: b.temporal, Workers: nw, Env: b.env}
	if b.prof != nil {
		o.DevEnv = []string{"KINFLOW_PPROF_LISTEN=" + b.prof.pprofAddr}
	}
	d, err := loadgen.StartDev(ctx, o)
	if err != nil {
		return err
	}
	defer d.Stop()
	key, err := loadgen.GenerateKey(ctx, d.BaseURL)
	if err != nil {
		return err
	}
	for _, n := range bs {
		if n == 1 {
			err = b.lone(ctx, d, key, nw)
		} else {
			err = b.burst(ctx, d, key, nw, n)
		}
		if err != nil {
			return err
		}
	}
	if b.big > 0 {
		return b.beside(ctx, d, key, nw)
	}
	return nil
}

// lone runs -alone jobs one at a time: the rate of a lone user.
func (b *bench) lone(ctx context.Context, d *loadgen.Dev, key string, nw int) error {
	var total time.Duration
	var lat []time.Duration
	cpu := startCPU(d)
	for range b.alone {
		// A lone user's job, polled every 20 ms.
		o := loadgen.Options{BaseURL: d.BaseURL, Key: key, Rows: b.rows, Timeout: b.timeout, Jobs: 1, Poll: 20 * time.Millisecond}
		r, err := loadgen.Run(ctx, o)
		if err != nil {
			return err
		}
		if err := r.Check(); err != nil {
			return err
		}
		total += r.Wall
		lat = append(lat, r.Jobs[0].Latency)
	}
	tm, km, sm := cpu.perJob(b.alone)
	ops, _ := cpu.opsPerJob(b.alone)
	fmt.Printf("%-8d %-7s %6.1f %9.2f %9.2f %9.2f %9.1f %9.1f %9.1f %10s %s\n", nw, "1×"+strconv.Itoa(b.alone),
		float64(b.alone)/total.Seconds(), loadgen.Percentile(lat, 50).Seconds(), loadgen.Percentile(lat, 99).Seconds(),
		loadgen.Percentile(lat, 100).Seconds(), tm, km, sm, "-", fmt.Sprintf("one job at a time; %.1f Temporal persistence requests per job", ops))
	return nil
}

// burst runs n jobs at once: jobs/s, latency and CPU per job from a burst
// without extra readers; /status/'s req/s from a second, identical burst
// read by -status-clients clients in a closed loop; with -profile, a third
// one profiled.
func (b *bench) burst(ctx context.Context, d *loadgen.Dev, key string, nw, n int) error {
	o := loadgen.Options{BaseURL: d.BaseURL, Key: key, Rows: b.rows, Timeout: b.timeout, Poll: b.poll, Jobs: n}
	cpu := startCPU(d)
	r, err := loadgen.Run(ctx, o)
	if err != nil {
		return err
	}
	tm, km, sm := cpu.perJob(n)
	ops, byOp := cpu.opsPerJob(n)
	files, sysShare := cpu.fsPerJob(n, km)
	note := fmt.Sprintf("%.1f Temporal persistence requests per job; kinflow %.0f %% in the kernel, %.1f new files and folders per job; ", ops, sysShare, files)
	if err := r.Check(); err != nil {
		note = err.Error()
	}
	statusRate := 0.0
	if b.statusClients > 0 {
		o.StatusClients = b.statusClients
		rs, err := loadgen.Run(ctx, o)
		if err != nil {
			return err
		}
		statusRate = rs.StatusPerSec
		note += fmt.Sprintf("status p99 %.0f ms; with the readers %.1f jobs/s", float64(rs.StatusP99.Microseconds())/1000, rs.JobsPerSec)
		o.StatusClients = 0
	}
	fmt.Printf("%-8d %-7d %6.1f %9.2f %9.2f %9.2f %9.1f %9.1f %9.1f %10.0f %s\n", nw, n, r.JobsPerSec, r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds(), tm, km, sm, statusRate, note)
	if line, err := waitsLine(ctx, d, r.Jobs); err != nil {
		fmt.Printf("%-8s %-7s %s\n", "", "", err)
	} else {
		fmt.Printf("%-8s %-7s %s\n", "", "", line)
	}
	if b.withFloor && len(r.Jobs) > 0 {
		if err := b.floor(ctx, d, nw, n, r.Jobs[0].ID, byOp); err != nil {
			return err
		}
	}
	if b.prof == nil {
		return nil
	}
	return b.prof.burst(ctx, d, o, fmt.Sprintf("w%d-%d", nw, n), r.Wall)
}

// beside runs bursts of small jobs submitted -big-lead after one large job.
func (b *bench) beside(ctx context.Context, d *loadgen.Dev, key string, nw int) error {
	for _, m := range b.mixed {
		o := loadgen.Options{BaseURL: d.BaseURL, Key: key, Rows: b.rows, Jobs: m, BigRows: b.big, BigLead: b.lead, Timeout: b.timeout, Poll: b.poll}
		if m == 1 {
			o.Poll = 20 * time.Millisecond
		}
		r, err := loadgen.Run(ctx, o)
		if err != nil {
			return err
		}
		note := fmt.Sprintf("submitted %v after one %d-row job (%s in %.1f s)", b.lead, b.big, r.Big.Status, r.Big.Latency.Seconds())
		if err := r.Check(); err != nil {
			note += "; " + err.Error()
		}
		fmt.Printf("%-8d %-7d %6.1f %9.2f %9.2f %9.2f %9s %9s %9s %10s %s\n", nw, m, r.JobsPerSec, r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds(), "-", "-", "-", "-", note)
	}
	return nil
}

// cpuMark is the CPU time of a deployment's processes at a moment.
type cpuMark struct {
	d     *loadgen.Dev
	procs map[string]int
	at    map[string]time.Duration
	// steps are the step servers' CPU times by pid (a server started
	// during the burst counts from zero).
	steps map[int]time.Duration
	// ops are the dev server's persistence requests (ops.go).
	metrics string
	ops     persistenceOps
	// sys is the kinflow processes' system CPU time, files the entries
	// (files and folders) under the deployment's media root.
	sys   time.Duration
	files int
}

func startCPU(d *loadgen.Dev) cpuMark {
	m := cpuMark{d: d, procs: d.Procs(), at: map[string]time.Duration{}, steps: map[int]time.Duration{}, metrics: d.TemporalMetrics()}
	m.ops = scrapeOps(m.metrics)
	for name, pid := range m.procs {
		m.at[name], _ = loadgen.CPUTime(pid)
	}
	for _, pid := range d.StepServers() {
		m.steps[pid], _ = loadgen.CPUTime(pid)
	}
	m.sys = kinflowSystemTime(m.procs)
	m.files = countEntries(filepath.Join(d.Dir, "media"))
	return m
}

// kinflowSystemTime is the system CPU time of the kinflow processes among
// procs (all but the Temporal dev server).
func kinflowSystemTime(procs map[string]int) time.Duration {
	var sum time.Duration
	for name, pid := range procs {
		if name == "temporal" {
			continue
		}
		if t, err := loadgen.SystemTime(pid); err == nil {
			sum += t
		}
	}
	return sum
}

// countEntries counts the files and folders under dir.
func countEntries(dir string) int {
	n := 0
	_ = filepath.WalkDir(dir, func(_ string, _ fs.DirEntry, err error) error {
		if err == nil {
			n++
		}
		return nil
	})
	return n
}

// fsPerJob is what the file system cost since m: the new files and folders
// under the media root per job (each a new inode: on ext4 without a
// journal 0.02–1.2 ms of system time, by what was deleted near it
// recently), and the share of the kinflow processes' CPU spent in the
// kernel. kinflowMs is perJob's kinflow figure.
func (m cpuMark) fsPerJob(jobs int, kinflowMs float64) (files, sysShare float64) {
	files = float64(countEntries(filepath.Join(m.d.Dir, "media"))-m.files) / float64(jobs)
	sysMs := float64((kinflowSystemTime(m.procs) - m.sys).Microseconds()) / 1000 / float64(jobs)
	if kinflowMs > 0 {
		sysShare = 100 * sysMs / kinflowMs
	}
	return files, sysShare
}

// opsPerJob is the dev server's persistence requests per job since m.
func (m cpuMark) opsPerJob(jobs int) (float64, persistenceOps) {
	return scrapeOps(m.metrics).perJob(m.ops, jobs)
}

// perJob is the CPU ms per job since m of the Temporal dev server, of the
// kinflow processes together, and of the synthetic step servers they
// started (the models' stand-in: CPU taken from the same cores, that the
// kinflow figure leaves out).
func (m cpuMark) perJob(jobs int) (temporal, kinflow, steps float64) {
	perJob := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 / float64(jobs) }
	for name, pid := range m.procs {
		now, err := loadgen.CPUTime(pid)
		if err != nil {
			continue
		}
		if name == "temporal" {
			temporal += perJob(now - m.at[name])
		} else {
			kinflow += perJob(now - m.at[name])
		}
	}
	for _, pid := range m.d.StepServers() {
		if now, err := loadgen.CPUTime(pid); err == nil {
			steps += perJob(now - m.steps[pid])
		}
	}
	return temporal, kinflow, steps
}

func ints(s string) ([]int, error) {
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("%q is not a whole number, 1 or more", f)
		}
		out = append(out, n)
	}
	return out, nil
}
