package main

import (
	"bufio"
	"bytes"
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// stack is one sampled call stack, leaf first, with its weight (samples or
// nanoseconds).
type stack struct {
	frames []string
	weight float64
}

// parsePerfScript reads `perf script -F ip,sym`: per sample, one frame a
// line ("ip symbol"), leaf first; a blank line between samples.
func parsePerfScript(out []byte) []stack {
	var res []stack
	cur := stack{weight: 1}
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) == 0 {
			if len(cur.frames) > 0 {
				res = append(res, cur)
			}
			cur = stack{weight: 1}
			continue
		}
		if len(f) >= 2 {
			cur.frames = append(cur.frames, f[1])
		}
	}
	if len(cur.frames) > 0 {
		res = append(res, cur)
	}
	return res
}

// parsePprofTraces reads `go tool pprof -traces`: blocks separated by
// "-----------+---…" lines, the first line of a block "10ms  leaf", then
// one frame a line.
func parsePprofTraces(out []byte) []stack {
	var res []stack
	var cur *stack
	sc := bufio.NewScanner(bytes.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if strings.HasPrefix(line, "-----------+") {
			if cur != nil && len(cur.frames) > 0 {
				res = append(res, *cur)
			}
			cur = &stack{}
			continue
		}
		if cur == nil {
			continue
		}
		f := strings.Fields(line)
		if len(f) == 0 {
			continue
		}
		if len(cur.frames) == 0 {
			if len(f) < 2 {
				continue
			}
			cur.weight = pprofDuration(f[0])
			f = f[1:]
		}
		cur.frames = append(cur.frames, f[0])
	}
	if cur != nil && len(cur.frames) > 0 {
		res = append(res, *cur)
	}
	return res
}

// pprofDuration is a -traces weight ("10ms", "1.20s") in ms.
func pprofDuration(s string) float64 {
	for _, u := range []struct {
		suffix string
		ms     float64
	}{{"ms", 1}, {"us", 0.001}, {"µs", 0.001}, {"ns", 1e-6}, {"s", 1000}} {
		if v, ok := strings.CutSuffix(s, u.suffix); ok {
			n, _ := strconv.ParseFloat(v, 64)
			return n * u.ms
		}
	}
	return 0
}

// generic are frames that say nothing about whose work a sample is: the Go
// runtime, the standard library (no dot in the first path element) and the
// kernel. A sample is charged to its first frame from the leaf that is not
// generic (byCaller).
func generic(frame string) bool {
	first, _, hasSlash := strings.Cut(frame, "/")
	if !hasSlash { // runtime.mallocgc, sync.(*Mutex).Lock, kernel symbols
		return true
	}
	return !strings.Contains(first, ".") // database/sql…, net/http…, internal/…
}

// byCaller charges each sample to the part of its first non-generic frame
// from the leaf (samples with none: the runtime's own work, GC workers and
// the scheduler, or the kernel's).
func byCaller(stacks []stack) map[string]float64 {
	out := map[string]float64{}
	total := 0.0
	for _, s := range stacks {
		total += s.weight
		name := "Go runtime on its own (GC workers, scheduler) and kernel"
		for _, f := range s.frames {
			if !generic(f) {
				name = partOf(f)
				break
			}
		}
		out[name] += s.weight
	}
	for k := range out {
		out[k] = 100 * out[k] / total
	}
	return out
}

// cumulative is the share of samples with a frame containing each marker.
func cumulative(stacks []stack, markers []string) map[string]float64 {
	out := map[string]float64{}
	total := 0.0
	for _, s := range stacks {
		total += s.weight
		for _, m := range markers {
			if slices.ContainsFunc(s.frames, func(f string) bool { return strings.Contains(f, m) }) {
				out[m] += s.weight
			}
		}
	}
	for k := range out {
		out[k] = 100 * out[k] / total
	}
	return out
}

// writeTable adds a table of shares (and ms per job of cpuMS) to sum,
// largest first, in marker order when order is given.
func writeTable(sum *strings.Builder, title string, shares map[string]float64, cpuMS float64, order []string) {
	names := order
	if names == nil {
		names = largestFirst(shares)
	}
	fmt.Fprintf(sum, "%s (%.1f ms CPU per job)\n", title, cpuMS)
	for _, n := range names {
		fmt.Fprintf(sum, "  %5.1f %%  %5.1f ms/job  %s\n", shares[n], shares[n]*cpuMS/100, n)
	}
	fmt.Fprintln(sum)
}

// temporalMarkers are the dev server's operations, measured cumulatively.
var temporalMarkers = []string{
	"RespondWorkflowTaskCompleted", "RecordWorkflowTaskStarted", "PollWorkflowTaskQueue", "PollActivityTaskQueue",
	"RecordActivityTaskStarted", "RespondActivityTaskCompleted", "StartWorkflowExecution", "handleCommandUpsertWorkflowSearchAttributes",
	"visibilityQueueTaskExecutor", "transferQueueActiveTaskExecutor", "timerQueueActiveTaskExecutor", "service/matching.",
	"persistence.(*executionManagerImpl)", "ReplaceIntoVisibility", "sqlite/lib._sqlite3Prepare", "sqlite/lib.sqlite3Prepare",
	"ReadHistoryBranch", "tally", "gcBgMarkWorker", "grpc.(*Server).handleStream", "grpc/internal/transport",
}

// kinflowMarkers are kinflow's, measured cumulatively.
var kinflowMarkers = []string{
	"api.(*Server).submit", "api.(*statusHub)", "api.(*Server).loadStatusSnap", "localActivityTaskHandler", "activityExecutor",
	"activities.(*Activities).PrepareInput", "activities.(*Activities).BuildPlan", "activities.(*Activities).MarkStage",
	"activities.(*Activities).RecordEvent", "activities.(*Activities).Predict", "activities.(*Activities).Finalize",
	"activities.(*Activities).Cleanup", "activities.(*Activities).TrainingSimilarity", "activities.(*Activities).LookupExperimental",
	"embedjob.", "sqlite.(*Driver).Open", "sqlite3Prepare", "fsutil.", "Sync", "workflowTaskHandler", "gcBgMarkWorker",
	"google.golang.org/grpc",
}
