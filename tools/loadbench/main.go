// Command loadbench measures kinflow under many users at once: it starts a
// fresh embedded-default deployment (`kinflow dev`: Temporal dev server,
// SQLite, synthetic backends) on loopback ports, optionally with more
// `kinflow worker` processes on the same queues, and drives bursts of
// concurrent small jobs through the public API with internal/loadgen. It
// prints jobs/s, p50/p99 submit→Completed latency and /status/'s req/s for
// each burst size. `make bench-load` runs it; docs/BENCHMARKS.md holds the
// figures.
//
// Traffic goes to 127.0.0.1 only; every burst is bounded in jobs and time.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
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

func run() error {
	kinflow := flag.String("kinflow", "bin/kinflow", "the kinflow binary")
	temporal := flag.String("temporal-cli", "bin/temporal", "the Temporal CLI (dev server)")
	workers := flag.String("workers", "1,2", "CPU worker processes to measure with, comma-separated (1: kinflow dev alone; each more is a `kinflow worker`)")
	bursts := flag.String("bursts", "1,50,200", "burst sizes (concurrent jobs), comma-separated; 1 runs -alone jobs one after another")
	alone := flag.Int("alone", 10, "jobs run one at a time for the burst size 1")
	rows := flag.Int("rows", 3, "rows per small job")
	big := flag.Int("big", 0, "also measure a burst of -mixed small jobs while a job of this many rows runs (0: skip)")
	mixed := flag.String("mixed", "1,100", "small jobs beside the large one, comma-separated burst sizes")
	lead := flag.Duration("big-lead", 5*time.Second, "time between the large job's submit and the small ones'")
	statusClients := flag.Int("status-clients", 8, "clients reading /status/ in a closed loop during each burst")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound of each burst")
	poll := flag.Duration("poll", 250*time.Millisecond, "how often each job of a burst reads its status (latencies are quantised by it)")
	env := flag.String("env", "", "extra environment for every process, KEY=VALUE,KEY=VALUE")
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
	fmt.Printf("%-8s %-7s %6s %9s %9s %9s %10s %s\n", "workers", "jobs", "jobs/s", "p50 s", "p99 s", "max s", "status/s", "note")
	for _, nw := range ws {
		var extra []string
		if *env != "" {
			extra = strings.Split(*env, ",")
		}
		d, err := loadgen.StartDev(ctx, loadgen.DevOptions{Kinflow: *kinflow, TemporalCLI: *temporal, Workers: nw, Env: extra})
		if err != nil {
			return err
		}
		err = func() error {
			defer d.Stop()
			key, err := loadgen.GenerateKey(ctx, d.BaseURL)
			if err != nil {
				return err
			}
			for _, n := range bs {
				// Jobs/s and latency are measured without extra readers;
				// /status/'s req/s in a second, identical burst read by
				// -status-clients clients in a closed loop.
				o := loadgen.Options{BaseURL: d.BaseURL, Key: key, Rows: *rows, Timeout: *timeout, Poll: *poll}
				if n == 1 {
					// One at a time: the rate of a lone user.
					var total time.Duration
					var lat []time.Duration
					for range *alone {
						// A lone user's job, polled every 20 ms.
						o.Jobs, o.Poll = 1, 20*time.Millisecond
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
					fmt.Printf("%-8d %-7s %6.1f %9.2f %9.2f %9.2f %10s %s\n", nw, "1×"+strconv.Itoa(*alone),
						float64(*alone)/total.Seconds(), loadgen.Percentile(lat, 50).Seconds(), loadgen.Percentile(lat, 99).Seconds(),
						loadgen.Percentile(lat, 100).Seconds(), "-", "one job at a time")
					continue
				}
				o.Jobs = n
				r, err := loadgen.Run(ctx, o)
				if err != nil {
					return err
				}
				note := ""
				if err := r.Check(); err != nil {
					note = err.Error()
				}
				statusRate := 0.0
				if *statusClients > 0 {
					o.StatusClients = *statusClients
					rs, err := loadgen.Run(ctx, o)
					if err != nil {
						return err
					}
					statusRate = rs.StatusPerSec
					note += fmt.Sprintf("status p99 %.0f ms; with the readers %.1f jobs/s", float64(rs.StatusP99.Microseconds())/1000, rs.JobsPerSec)
				}
				fmt.Printf("%-8d %-7d %6.1f %9.2f %9.2f %9.2f %10.0f %s\n", nw, n, r.JobsPerSec, r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds(), statusRate, note)
			}
			if *big > 0 {
				ms, err := ints(*mixed)
				if err != nil {
					return fmt.Errorf("-mixed: %w", err)
				}
				for _, m := range ms {
					o := loadgen.Options{BaseURL: d.BaseURL, Key: key, Rows: *rows, Jobs: m, BigRows: *big, BigLead: *lead, Timeout: *timeout, Poll: *poll}
					if m == 1 {
						o.Poll = 20 * time.Millisecond
					}
					r, err := loadgen.Run(ctx, o)
					if err != nil {
						return err
					}
					note := fmt.Sprintf("submitted %v after one %d-row job (%s in %.1f s)", *lead, *big, r.Big.Status, r.Big.Latency.Seconds())
					if err := r.Check(); err != nil {
						note += "; " + err.Error()
					}
					fmt.Printf("%-8d %-7d %6.1f %9.2f %9.2f %9.2f %10s %s\n", nw, m, r.JobsPerSec, r.P50.Seconds(), r.P99.Seconds(), r.Max.Seconds(), "-", note)
				}
			}
			return nil
		}()
		if err != nil {
			return err
		}
	}
	return nil
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
