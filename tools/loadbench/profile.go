package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/freeport"
	"github.com/kinflow/kinflow/internal/loadgen"
)

// profiler profiles one burst of each size: kinflow through its own
// profiler (KINFLOW_PPROF_LISTEN, Go's pprof), the Temporal dev server with
// perf (Linux perf_events; the Temporal CLI has no flag for the server's
// pprof port, and Go binaries keep their symbols and frame pointers, so
// perf sees Go functions by name). Each profile covers the burst's length
// as its unprofiled twin measured it.
type profiler struct {
	dir       string
	pprofAddr string
	perf      string // perf's path; empty: the dev server is not profiled
}

func newProfiler(dir string) (*profiler, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	addr, err := freeport.Addr()
	if err != nil {
		return nil, err
	}
	p := &profiler{dir: dir, pprofAddr: addr}
	if path, err := exec.LookPath("perf"); err == nil {
		p.perf = path
	} else {
		fmt.Fprintln(os.Stderr, "loadbench: perf not found (Debian: linux-perf): the Temporal dev server is not profiled")
	}
	return p, nil
}

// burst runs o's burst once more while both profiles record for window,
// then writes the profiles, their top functions and a summary by part.
func (p *profiler) burst(ctx context.Context, d *loadgen.Dev, o loadgen.Options, prefix string, window time.Duration) error {
	secs := max(1, int(math.Ceil(window.Seconds())))
	procs := d.Procs()
	base := filepath.Join(p.dir, prefix)
	var wg sync.WaitGroup
	errs := make([]error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errs[0] = p.pprof(ctx, base+"-kinflow.pprof", secs) }()
	go func() {
		defer wg.Done()
		errs[1] = p.perfRecord(ctx, procs["temporal"], base+"-temporal.perf.data", secs)
	}()
	cpu := startCPU(d)
	r, err := loadgen.Run(ctx, o)
	tm, km, sm := cpu.perJob(o.Jobs)
	opsTotal, ops := cpu.opsPerJob(o.Jobs)
	wg.Wait()
	if err != nil {
		return err
	}
	if err := errors.Join(errs...); err != nil {
		return err
	}
	var sum strings.Builder
	fmt.Fprintf(&sum, "burst of %d jobs (profiled run): %.1f jobs/s, wall %.1f s, profile window %d s\n", o.Jobs, r.JobsPerSec, r.Wall.Seconds(), secs)
	fmt.Fprintf(&sum, "CPU per job over the burst: Temporal dev server %.1f ms, kinflow %.1f ms, the synthetic step servers %.1f ms\n\n", tm, km, sm)
	fmt.Fprintf(&sum, "Temporal persistence requests per job: %.1f, by operation:\n%s\n", opsTotal, ops)
	if err := p.reports(base, &sum, tm, km); err != nil {
		return err
	}
	if err := os.WriteFile(base+"-summary.txt", []byte(sum.String()), 0o644); err != nil {
		return err
	}
	fmt.Printf("%-8s %-7d %6.1f profiled: %s-summary.txt\n", "", o.Jobs, r.JobsPerSec, base)
	return nil
}

func (p *profiler) pprof(ctx context.Context, path string, secs int) error {
	url := fmt.Sprintf("http://%s/debug/pprof/profile?seconds=%d", p.pprofAddr, secs)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("kinflow's profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("kinflow's profile: %s", resp.Status)
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func (p *profiler) perfRecord(ctx context.Context, pid int, path string, secs int) error {
	if p.perf == "" || pid == 0 {
		return nil
	}
	// 499 Hz (a prime, off any periodic work) with frame-pointer call chains.
	cmd := exec.CommandContext(ctx, p.perf, "record", "-q", "-F", "499", "-g", "-p", strconv.Itoa(pid), "-o", path, "--", "sleep", strconv.Itoa(secs))
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("perf record: %v\n%s", err, out)
	}
	return nil
}

// reports writes each profile's top functions (self and cumulative) beside
// it and adds its self time by part to sum, in % and ms per job.
func (p *profiler) reports(base string, sum *strings.Builder, temporalMS, kinflowMS float64) error {
	var kin []symPct
	if out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=100000", "-nodefraction=0", base+"-kinflow.pprof").Output(); err == nil {
		kin = parsePprofTop(out)
		_ = os.WriteFile(base+"-kinflow-top.txt", out, 0o644)
	} else {
		return fmt.Errorf("go tool pprof: %w", err)
	}
	if cum, err := exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=80", base+"-kinflow.pprof").Output(); err == nil {
		_ = os.WriteFile(base+"-kinflow-cum.txt", cum, 0o644)
	}
	writeParts(sum, "kinflow (kinflow dev: api, worker, GPU host)", kin, kinflowMS)
	if tr, err := exec.Command("go", "tool", "pprof", "-traces", base+"-kinflow.pprof").Output(); err == nil {
		st := parsePprofTraces(tr)
		writeTable(sum, "kinflow: by caller (first frame outside the Go runtime and standard library)", byCaller(st), kinflowMS, nil)
		writeTable(sum, "kinflow: cumulative, samples with a frame containing", cumulative(st, kinflowMarkers), kinflowMS, kinflowMarkers)
	}
	if p.perf == "" {
		return nil
	}
	data := base + "-temporal.perf.data"
	self, err := exec.Command(p.perf, "report", "-i", data, "--no-children", "--sort", "symbol", "--stdio", "-g", "none", "--percent-limit", "0.01").Output()
	if err != nil {
		return fmt.Errorf("perf report: %w", err)
	}
	_ = os.WriteFile(base+"-temporal-top.txt", self, 0o644)
	if cum, err := exec.Command(p.perf, "report", "-i", data, "--children", "--sort", "symbol", "--stdio", "-g", "none", "--percent-limit", "1").Output(); err == nil {
		_ = os.WriteFile(base+"-temporal-cum.txt", cum, 0o644)
	}
	writeParts(sum, "Temporal dev server (temporal server start-dev)", parsePerfReport(self), temporalMS)
	if sc, err := exec.Command(p.perf, "script", "-i", data, "-F", "ip,sym").Output(); err == nil {
		st := parsePerfScript(sc)
		writeTable(sum, "Temporal dev server: by caller (first frame outside the Go runtime, standard library and kernel)", byCaller(st), temporalMS, nil)
		writeTable(sum, "Temporal dev server: cumulative, samples with a frame containing", cumulative(st, temporalMarkers), temporalMS, temporalMarkers)
	}
	return nil
}

// symPct is a function's share of a profile's samples (self time).
type symPct struct {
	sym string
	pct float64
}

// parsePprofTop reads `go tool pprof -top`'s rows: flat flat% sum% cum cum% name.
func parsePprofTop(out []byte) []symPct {
	var res []symPct
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 6 || !strings.HasSuffix(f[1], "%") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(f[1], "%"), 64)
		if err != nil {
			continue
		}
		res = append(res, symPct{strings.Join(f[5:], " "), v})
	}
	return res
}

// parsePerfReport reads `perf report --sort symbol`'s rows: pct% [.] name.
func parsePerfReport(out []byte) []symPct {
	var res []symPct
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 3 || !strings.HasSuffix(f[0], "%") || !strings.HasPrefix(f[1], "[") {
			continue
		}
		v, err := strconv.ParseFloat(strings.TrimSuffix(f[0], "%"), 64)
		if err != nil {
			continue
		}
		// The symbol, without the IPC columns perf appends.
		sym := f[2]
		if f[1] == "[k]" {
			sym = "[kernel] " + sym
		}
		res = append(res, symPct{sym, v})
	}
	return res
}

// parts group functions by what they do, first match wins.
var parts = []struct{ name, prefixes string }{
	{"SQLite driver and GORM (kinflow's database)", "gorm.io/ github.com/libtnb/ modernc.org/sqlite.( database/sql"},
	{"SQLite (modernc.org, C translated to Go)", "modernc.org/"},
	{"Temporal persistence (SQL stores, serialisation)", "go.temporal.io/server/common/persistence"},
	{"Temporal history service", "go.temporal.io/server/service/history"},
	{"Temporal matching service", "go.temporal.io/server/service/matching"},
	{"Temporal frontend service", "go.temporal.io/server/service/frontend"},
	{"Temporal server, other", "go.temporal.io/server/"},
	{"Temporal SDK (kinflow's client and workers)", "go.temporal.io/sdk"},
	{"Temporal API types", "go.temporal.io/api"},
	{"protobuf", "google.golang.org/protobuf github.com/gogo/ github.com/golang/protobuf"},
	{"gRPC and HTTP/2", "google.golang.org/grpc golang.org/x/net/http2"},
	{"JSON", "encoding/json github.com/goccy/ github.com/bytedance/"},
	{"HTTP (net/http, Gin)", "net/http github.com/gin-gonic/"},
	{"Go GC and allocation", "runtime.gc runtime.scanobject runtime.greyobject runtime.mark runtime.sweep runtime.mallocgc runtime.heapBits runtime.findObject runtime.(*mspan) runtime.(*mheap) runtime.(*mcache) runtime.(*gcWork) runtime.bgsweep runtime.wbBuf runtime.memclr runtime.nextFree runtime.(*mcentral) runtime.spanOf runtime.scanblock runtime.typePointers runtime.(*gcBits) runtime.(*gcControllerState) runtime.pcvalue runtime.funcspdelta runtime.scanstack runtime.scanframe"},
	{"Go scheduler and other runtime", "runtime."},
	{"kernel (system calls, scheduling, network)", "[kernel] "},
	{"Go standard library, other", "internal/ sync. syscall. time. strings. strconv. bytes. reflect. fmt. sort. io. os. crypto/ hash/ unicode/ math/ regexp. context. errors. slices. maps. bufio. path/ compress/ encoding/"},
	{"kinflow", "github.com/kinflow/"},
}

// partOf names the part a function belongs to ("other" for none).
func partOf(sym string) string {
	for _, p := range parts {
		if slices.ContainsFunc(strings.Fields(p.prefixes), func(pre string) bool { return strings.HasPrefix(sym, pre) }) {
			return p.name
		}
	}
	return "other"
}

// writeParts adds lines of self time by part to sum: % of the profile and
// ms per job (of cpuMS, the process's CPU per job over the burst).
func writeParts(sum *strings.Builder, title string, syms []symPct, cpuMS float64) {
	byPart := map[string]float64{}
	for _, s := range syms {
		byPart[partOf(s.sym)] += s.pct
	}
	writeTable(sum, title+": self time by part", byPart, cpuMS, nil)
}
