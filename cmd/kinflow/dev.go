package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.temporal.io/api/serviceerror"
	"go.temporal.io/api/workflowservice/v1"
	"go.temporal.io/sdk/client"
	"golang.org/x/sync/errgroup"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/metrics"
	"github.com/kinflow/kinflow/workflows"
)

// devRecordKeyName is the cache record key `kinflow dev` makes in its data
// folder.
const devRecordKeyName = "cache-record.key"

// runDev runs every role in one process on the embedded defaults: a Temporal
// dev server (child process, from bin/temporal), SQLite, ./media, the API,
// the CPU worker and the GPU host with its synthetic executor.
func runDev(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("dev", stderr)
	temporalCLI := fs.String("temporal-cli", "bin/temporal", "Temporal CLI that serves the dev server; empty: use KINFLOW_TEMPORAL_ADDRESS as it is")
	dataDir := fs.String("data-dir", ".data", "folder of the Temporal dev server's SQLite file")
	uiPort := fs.Int("temporal-ui-port", 0, "port of the Temporal web UI (0: KINFLOW_TEMPORAL_UI_PORT, default 8233)")
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	// In dev the GPU host runs in this process; point the backend at it unless
	// the operator chose another service (or "" through the environment).
	if _, set := os.LookupEnv("GPU_EMBED_SERVICE_URL"); !set {
		listen := os.Getenv("KINFLOW_GPU_LISTEN")
		if listen == "" {
			listen = "127.0.0.1:8080"
		}
		_ = os.Setenv("GPU_EMBED_SERVICE_URL", "http://"+listen)
	}
	cfg, err := loadConfig()
	if err != nil {
		return err
	}
	if *uiPort == 0 {
		*uiPort = cfg.TemporalUIPort
	}
	// Every port this stack listens on is checked first, so that a busy
	// one is named here, with the setting that moves it, rather than found
	// later as a child that "exited at start".
	if err := checkDevPorts(cfg, *temporalCLI != "", *uiPort); err != nil {
		return err
	}
	log := newLogger(cfg, stderr, "dev")
	startPprof(log)
	// The embedded default ./media does not exist on a fresh clone (and
	// has no identity marker on an older one): dev creates and marks it
	// at start, never later.
	if _, err := openMediaRoot(cfg, log, true); err != nil {
		return err
	}

	uiURL := ""
	if *temporalCLI != "" {
		stop, err := startTemporalDevServer(ctx, *temporalCLI, cfg.TemporalAddress, cfg.TemporalNamespace, *dataDir, *uiPort, log)
		if err != nil {
			return err
		}
		defer stop()
		uiURL = fmt.Sprintf("http://127.0.0.1:%d", *uiPort)
	}

	// The cache's integrity records are authenticated with a key kept
	// outside the media root; in dev it is made in the data folder on first
	// start unless the operator names one.
	if _, set := os.LookupEnv("KINFLOW_CACHE_RECORD_KEY_FILE"); !set {
		keyFile, err := filepath.Abs(filepath.Join(*dataDir, devRecordKeyName))
		if err != nil {
			return err
		}
		if err := embedding.LoadRecordKey(keyFile, true); err != nil {
			return err
		}
		cfg.CacheRecordKeyFile = keyFile
		if err := useRecordKey(cfg); err != nil {
			return err
		}
	}

	st, err := openStore(ctx, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	if err := st.ClaimWorkflowLevel(ctx, workflows.Level()); err != nil {
		return err
	}
	wctx, cancel := context.WithTimeout(ctx, 60*time.Second)
	tc, err := dialTemporal(wctx, cfg, log)
	cancel()
	if err != nil {
		return err
	}
	defer tc.Close()

	// One process, one registry: the API's /metrics shows every role.
	// The CPU worker below runs on tc too, so the API starts workflows
	// eagerly: the first workflow task comes back in the start's answer.
	m := metrics.New()
	srv, err := newAPIServer(cfg, st, tc, log, m, true)
	if err != nil {
		return err
	}
	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { srv.RunSubmitReconciler(gctx); return nil })
	g.Go(func() error { srv.RunStatusListener(gctx); return nil })
	apiReady := make(chan net.Addr, 1)
	g.Go(func() error {
		return serveHTTP(gctx, cfg.APIListen, srv, log, func(a net.Addr) { apiReady <- a })
	})
	g.Go(func() error { return runCPUWorker(gctx, cfg, st, tc, log, m) })
	g.Go(func() error { return runGPUHost(gctx, cfg, tc, log, m) })

	select {
	case a := <-apiReady:
		printBanner(stdout, "http://"+a.String(), uiURL, *uiPort)
	case <-gctx.Done():
	}
	err = g.Wait()
	if errors.Is(err, context.Canceled) || ctx.Err() != nil {
		fmt.Fprintln(stdout, "kinflow dev: stopped")
		return nil
	}
	return err
}

func printBanner(w io.Writer, apiURL, uiURL string, uiPort int) {
	fmt.Fprintf(w, "\nkinflow is running (synthetic backends: every number it returns is flagged synthetic, not a prediction).\n\n")
	fmt.Fprintf(w, "  Web page     %s/\n", apiURL)
	fmt.Fprintf(w, "  API          %s/api/v1/\n", apiURL)
	fmt.Fprintf(w, "  Health       %s/api/v1/health/\n", apiURL)
	if uiURL != "" {
		fmt.Fprintf(w, "  Temporal UI  %s\n", uiURL)
	}
	// The first job is the README's block, which can be pasted again (it
	// keeps its key in a file; a second key request would answer 409);
	// its ports come from these settings, named here when they were moved.
	fmt.Fprintf(w, "\nFirst request:\n  curl -s %s/api/v1/health/\n", apiURL)
	fmt.Fprintf(w, "A first job: paste the block under \"A first job\" in README.md (again and again: it keeps its key in .kinflow-key)")
	var moved []string
	if addr := strings.TrimPrefix(apiURL, "http://"); addr != configDefault("KINFLOW_API_LISTEN") {
		moved = append(moved, "KINFLOW_API_LISTEN="+addr)
	}
	if uiURL != "" && strconv.Itoa(uiPort) != configDefault("KINFLOW_TEMPORAL_UI_PORT") {
		moved = append(moved, "KINFLOW_TEMPORAL_UI_PORT="+strconv.Itoa(uiPort))
	}
	if len(moved) > 0 {
		fmt.Fprintf(w, ",\n  after: export %s", strings.Join(moved, " "))
	}
	fmt.Fprintln(w)
	fmt.Fprintf(w, "\nCtrl-C stops everything.\n")
}

// devPort is one address `kinflow dev` listens on: what listens there and
// the setting that moves it.
type devPort struct {
	addr, what, setting string
}

// checkDevPorts reports the first of the stack's listen addresses that is
// already taken: the Temporal frontend and web UI (when it starts the dev
// server), the API and the in-process GPU host.
func checkDevPorts(cfg *config.Config, temporal bool, uiPort int) error {
	var ports []devPort
	if temporal {
		host, _, err := net.SplitHostPort(cfg.TemporalAddress)
		if err != nil {
			return fmt.Errorf("KINFLOW_TEMPORAL_ADDRESS %q: %w", cfg.TemporalAddress, err)
		}
		if host == "" || host == "localhost" {
			host = "127.0.0.1"
		}
		ports = append(ports,
			devPort{cfg.TemporalAddress, "the Temporal dev server", "KINFLOW_TEMPORAL_ADDRESS (or use the running server with `kinflow dev --temporal-cli=`)"},
			devPort{net.JoinHostPort(host, strconv.Itoa(uiPort)), "the Temporal web UI", "KINFLOW_TEMPORAL_UI_PORT"})
	}
	ports = append(ports, devPort{cfg.APIListen, "the API and web page", "KINFLOW_API_LISTEN"})
	ports = append(ports, devPort{cfg.GPUListen, "the GPU host", "KINFLOW_GPU_LISTEN"})
	for _, p := range ports {
		l, err := net.Listen("tcp", p.addr)
		if err != nil {
			if errors.Is(err, syscall.EADDRINUSE) {
				return fmt.Errorf("port %s (%s) is already in use: is another kinflow dev or Temporal server running? Stop it, or move this stack's port with %s (`make run %s=…`, see README)",
					p.addr, p.what, p.setting, strings.Fields(p.setting)[0])
			}
			return fmt.Errorf("cannot listen on %s (%s, %s): %w", p.addr, p.what, p.setting, err)
		}
		_ = l.Close()
	}
	return nil
}

// devTopologyDynamicConfig is docker/temporal/dynamicconfig.yaml, the
// production topology's dynamic configuration, as the dev server's
// --dynamic-config-value flags (TestDevServerHasTheTopologysDynamicConfig
// holds them equal): every task queue in one partition, and priority and
// fairness on (devFairnessConfig).
var devTopologyDynamicConfig = append([]string{
	"matching.numTaskqueueReadPartitions=1",
	"matching.numTaskqueueWritePartitions=1",
}, devFairnessConfig...)

// devFairnessConfig turns on the server's priority and fairness
// (internal/fairness, docs/workflows.md "Sharing the queues"). Fairness
// keeps its backlogs in other tables than the plain matcher: tasks queued
// while it was off are not dispatched once it is on unless the server can
// migrate them (matching.enableMigration, which the production server has
// and the dev server's version ignores). So the dev server turns it on
// only for a state that has had it from the start, or that has nothing
// running when it is turned on (devFairness).
var devFairnessConfig = []string{
	"matching.enableFairness=true",
	"matching.enableMigration=true",
}

// devFairnessMarker, in the dev server's data folder, records that its
// state has had fairness on since it had work.
const devFairnessMarker = "temporal-fairness"

// startTemporalDevServer starts the dev server with fairness where its state
// allows (startDevServerFair), keeps it running (superviseDevServer) and
// returns the function that stops it.
func startTemporalDevServer(ctx context.Context, cli, address, namespace, dataDir string, uiPort int, log *slog.Logger) (func(), error) {
	fair, child, err := startDevServerFair(ctx, cli, address, namespace, dataDir, uiPort, log)
	if err != nil {
		return nil, err
	}
	return superviseDevServer(ctx, child, func(ctx context.Context) (devChild, error) {
		return startDevServerAs(ctx, cli, address, dataDir, uiPort, fair, log)
	}, log), nil
}

// superviseDevServer restarts the dev server whenever it exits while kinflow
// dev runs (a crash, the OOM killer): its state is on disk, so every job
// goes on once it is back, as against a production server's restart. A
// failed restart is tried again, waiting a second more each time, up to 30
// s. The function returned stops it for good.
func superviseDevServer(ctx context.Context, child devChild, start func(context.Context) (devChild, error), log *slog.Logger) func() {
	var (
		mu       sync.Mutex
		current  = child
		stopping bool
	)
	quit := make(chan struct{})
	go func() {
		wait := time.Second
		for {
			mu.Lock()
			done := current.done
			mu.Unlock()
			select {
			case <-quit:
				return
			case <-done:
			}
			mu.Lock()
			if stopping {
				mu.Unlock()
				return
			}
			mu.Unlock()
			log.Error("the Temporal dev server exited; restarting it (its state is kept on disk)")
			for {
				select {
				case <-quit:
					return
				case <-time.After(wait):
				}
				c, err := start(ctx)
				if err == nil {
					mu.Lock()
					if stopping {
						mu.Unlock()
						c.stop()
						return
					}
					current = c
					mu.Unlock()
					log.Warn("Temporal dev server restarted after it exited")
					wait = time.Second
					break
				}
				log.Error("Temporal dev server restart failed; trying again", "error", err, "in", wait+time.Second)
				wait = min(wait+time.Second, 30*time.Second)
			}
		}
	}()
	return func() {
		mu.Lock()
		stopping = true
		c := current
		mu.Unlock()
		close(quit)
		c.stop()
	}
}

// startDevServerFair starts the dev server (startDevServerAs) with
// fairness on where its state allows: a new state, one that has had it
// from the start (devFairnessMarker), or an older one with no workflow
// running, which is restarted once with it on. An older state with jobs
// running keeps fairness off, and says so, until a start finds it idle.
func startDevServerFair(ctx context.Context, cli, address, namespace, dataDir string, uiPort int, log *slog.Logger) (bool, devChild, error) {
	marker := filepath.Join(dataDir, devFairnessMarker)
	_, mErr := os.Stat(marker)
	_, dbErr := os.Stat(filepath.Join(dataDir, "temporal.db"))
	if mErr == nil || errors.Is(dbErr, fs.ErrNotExist) {
		c, err := startDevServerAs(ctx, cli, address, dataDir, uiPort, true, log)
		if err == nil && mErr != nil {
			err = os.WriteFile(marker, []byte("the Temporal state in this folder has had task-queue fairness on since it had work\n"), 0o644)
			if err != nil {
				c.stop()
				return false, devChild{}, err
			}
		}
		return true, c, err
	}
	c, err := startDevServerAs(ctx, cli, address, dataDir, uiPort, false, log)
	if err != nil {
		return false, devChild{}, err
	}
	running, err := devRunningWorkflows(ctx, address, namespace)
	if err != nil || running > 0 {
		log.Warn("Temporal fairness is off: this Temporal state predates it and has workflows running, whose queued tasks would be stranded; it turns on at a start that finds none running",
			"running", running, "error", err)
		return false, c, nil
	}
	c.stop()
	if err := os.WriteFile(marker, []byte("fairness turned on with no workflow running\n"), 0o644); err != nil {
		return false, devChild{}, err
	}
	log.Info("Temporal fairness turned on for this Temporal state (nothing was running)")
	c, err = startDevServerAs(ctx, cli, address, dataDir, uiPort, true, log)
	return true, c, err
}

// devRunningWorkflows counts the workflows running on the dev server at
// address in kinflow's namespace (none when it does not exist yet).
func devRunningWorkflows(ctx context.Context, address, namespace string) (int64, error) {
	c, err := client.Dial(client.Options{HostPort: address, Namespace: namespace, Logger: quietLogger{}})
	if err != nil {
		return 0, err
	}
	defer c.Close()
	cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	res, err := c.CountWorkflow(cctx, &workflowservice.CountWorkflowExecutionsRequest{Query: "ExecutionStatus = 'Running'"})
	if err != nil {
		var nf *serviceerror.NamespaceNotFound
		if errors.As(err, &nf) {
			return 0, nil
		}
		return 0, err
	}
	return res.GetCount(), nil
}

// devChild is a running dev server: stop ends it; done is closed once it
// has exited, for whatever reason.
type devChild struct {
	stop func()
	done <-chan struct{}
}

// startDevServerAs starts `temporal server start-dev` as a child that dies
// with this process (Pdeathsig), with fairness on or off, and waits until it
// answers.
func startDevServerAs(ctx context.Context, cli, address, dataDir string, uiPort int, fair bool, log *slog.Logger) (devChild, error) {
	host, port, err := net.SplitHostPort(address)
	if err != nil {
		return devChild{}, fmt.Errorf("KINFLOW_TEMPORAL_ADDRESS %q: %w", address, err)
	}
	if host == "" || host == "localhost" {
		host = "127.0.0.1"
	}
	if _, err := os.Stat(cli); err != nil {
		return devChild{}, fmt.Errorf("the Temporal CLI was not found at %s (run `make bin/temporal`): %w", cli, err)
	}
	if err := os.MkdirAll(dataDir, 0o755); err != nil {
		return devChild{}, fmt.Errorf("create %s: %w", dataDir, err)
	}
	logFile, err := os.OpenFile(filepath.Join(dataDir, "temporal.log"), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return devChild{}, err
	}
	args := []string{"server", "start-dev",
		"--ip", host, "--port", port,
		"--ui-port", strconv.Itoa(uiPort),
		"--db-filename", filepath.Join(dataDir, "temporal.db"),
		"--log-level", "warn",
		// WAL with synchronous=NORMAL: a committed transaction survives a
		// crash of any process (only a power cut may lose the last ones),
		// and the dev server no longer waits on an fsync per state change:
		// a burst of small jobs is bound by the server's CPU, not the disk.
		"--sqlite-pragma", "journal_mode=wal",
		"--sqlite-pragma", "synchronous=normal",
		// The CLI turns this on so that search attributes added while the
		// server runs are seen at once; it makes every search-attribute
		// read (each start, upsert and visibility write) re-read the
		// cluster metadata from SQLite under one global lock: 5–6 % of the
		// dev server's CPU in a burst of small jobs (docs/BENCHMARKS.md,
		// "The profile"). kinflow's search attributes are created with the
		// namespace (--search-attribute, written before the server starts)
		// and never added later, so the ordinary cache is exact.
		"--dynamic-config-value", "system.forceSearchAttributesCacheRefreshOnRead=false",
		"--search-attribute", "JobId=Keyword",
		"--search-attribute", "Method=Keyword",
		"--search-attribute", "Stage=Keyword",
	}
	for _, v := range devTopologyDynamicConfig {
		if !fair && slices.Contains(devFairnessConfig, v) {
			continue
		}
		args = append(args, "--dynamic-config-value", v)
	}
	cmd := exec.Command(cli, args...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	// Pdeathsig: the dev server dies with us even if we are killed -9, so
	// Ctrl-C or a crash never leaves a Temporal process behind.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGTERM}
	if err := cmd.Start(); err != nil {
		logFile.Close()
		return devChild{}, fmt.Errorf("start Temporal dev server: %w", err)
	}
	done := make(chan struct{})
	var waitErr error
	go func() { waitErr = cmd.Wait(); logFile.Close(); close(done) }()
	stop := func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	}
	// Wait until the frontend answers a health check.
	deadline := time.Now().Add(60 * time.Second)
	for {
		hc, err := client.Dial(client.Options{HostPort: net.JoinHostPort(host, port), Logger: quietLogger{}})
		if err == nil {
			_, err = hc.CheckHealth(ctx, &client.CheckHealthRequest{})
			hc.Close()
			if err == nil {
				log.Info("Temporal dev server ready", "address", net.JoinHostPort(host, port), "ui_port", uiPort, "fairness", fair)
				return devChild{stop: stop, done: done}, nil
			}
		}
		select {
		case <-done:
			return devChild{}, fmt.Errorf("the Temporal dev server exited at start (%v); see %s", waitErr, filepath.Join(dataDir, "temporal.log"))
		case <-ctx.Done():
			stop()
			return devChild{}, ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			stop()
			return devChild{}, fmt.Errorf("the Temporal dev server did not answer within 60 s; see %s", filepath.Join(dataDir, "temporal.log"))
		}
	}
}

// quietLogger discards the SDK's logs while polling for readiness.
type quietLogger struct{}

func (quietLogger) Debug(string, ...interface{}) {}
func (quietLogger) Info(string, ...interface{})  {}
func (quietLogger) Warn(string, ...interface{})  {}
func (quietLogger) Error(string, ...interface{}) {}

// configDefault is the default of configuration key name ("" if none).
func configDefault(name string) string {
	for _, k := range config.Keys {
		if k.Name == name {
			return k.Default
		}
	}
	return ""
}
