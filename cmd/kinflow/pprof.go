package main

import (
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"time"
)

// envPprof names a loopback address on which the process serves Go's
// profiler (/debug/pprof/): for profiling under load (docs/BENCHMARKS.md),
// never set in production. Only a loopback address is accepted, so the
// profiler is never exposed to a network.
const envPprof = "KINFLOW_PPROF_LISTEN"

// startPprof serves the profiler when envPprof names a loopback address;
// the long-running roles (api, worker, gpu-worker, dev) call it at start.
func startPprof(log *slog.Logger) {
	addr := os.Getenv(envPprof)
	if addr == "" {
		return
	}
	host, _, err := net.SplitHostPort(addr)
	if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
		log.Warn("profiler not started: want a loopback host:port", "key", envPprof, "value", addr)
		return
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	srv := &http.Server{Addr: addr, Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() {
		log.Info("profiler listening", "addr", addr)
		if err := srv.ListenAndServe(); err != nil {
			log.Warn("profiler stopped", "error", err)
		}
	}()
}
