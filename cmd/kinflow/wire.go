package main

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"path/filepath"
	"strings"
	"time"

	"go.temporal.io/sdk/client"
	tlog "go.temporal.io/sdk/log"

	"github.com/kinflow/kinflow/api"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/mediaroot"
	"github.com/kinflow/kinflow/internal/store"
)

// This file is the one place that turns configuration into dependencies.

// loadConfig reads and validates the environment; an invalid value becomes a
// one-line error naming the key.
func loadConfig() (*config.Config, error) {
	cfg, err := config.FromEnv()
	if err != nil {
		return nil, err
	}
	if err := useRecordKey(cfg); err != nil {
		return nil, err
	}
	return cfg, nil
}

// useRecordKey loads the cache record key (KINFLOW_CACHE_RECORD_KEY_FILE)
// for this process's integrity records. A key inside the media root would
// be readable by whoever can forge a record, so it is refused.
func useRecordKey(cfg *config.Config) error {
	path := cfg.CacheRecordKeyFile
	if path == "" {
		return embedding.LoadRecordKey("", false)
	}
	if abs, err := filepath.Abs(path); err == nil {
		if root, err := filepath.Abs(cfg.MediaRoot); err == nil {
			if rel, err := filepath.Rel(root, abs); err == nil && rel != ".." && !strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
				return fmt.Errorf("KINFLOW_CACHE_RECORD_KEY_FILE: %s is inside the media root (KINFLOW_MEDIA_ROOT); keep the record key where cache writers' storage cannot reach it", path)
			}
		}
	}
	if err := embedding.LoadRecordKey(path, false); err != nil {
		return fmt.Errorf("KINFLOW_CACHE_RECORD_KEY_FILE: %w", err)
	}
	return nil
}

// openMediaRoot opens the media root's identity (mediaroot) for a
// long-running role, before it writes anything: the role remembers the
// identity it finds (marking a fresh root), checks it before each write,
// and never recreates a root that goes away. create lets `kinflow dev`
// make a missing root at its start. A root that is missing or unmarked
// now is logged, not fatal: the role starts, refuses to write into the
// root, and adopts it once it is there and marked.
func openMediaRoot(cfg *config.Config, log *slog.Logger, create bool) (*mediaroot.Root, error) {
	r, err := mediaroot.Open(cfg.MediaRoot, mediaroot.Options{CreateRoot: create})
	if err != nil {
		return nil, err
	}
	if err := r.Check(); err != nil {
		log.Error("media root unavailable: nothing is written into it until it is there with its identity marker",
			"media_root", r.Path(), "kind", mediaroot.Kind(err), "error", err)
	} else {
		log.Info("media root", "media_root", r.Path(), "id", r.ID())
	}
	return r, nil
}

// newLogger writes JSON lines at the configured level, tagged with the role.
func newLogger(cfg *config.Config, w io.Writer, role string) *slog.Logger {
	h := slog.NewJSONHandler(w, &slog.HandlerOptions{Level: cfg.LogLevel})
	return slog.New(h).With("service", role)
}

// openStore opens the application database and applies pending migrations.
func openStore(ctx context.Context, cfg *config.Config) (*store.Store, error) {
	s, err := store.Open(ctx, cfg.DatabaseURL)
	if err != nil {
		return nil, err
	}
	if err := s.Migrate(ctx); err != nil {
		_ = s.Close()
		return nil, err
	}
	return s, nil
}

// storeFromEnv loads the configuration and opens the migrated database: all
// an operator command that only touches the database needs.
func storeFromEnv(ctx context.Context) (*store.Store, error) {
	cfg, err := loadConfig()
	if err != nil {
		return nil, err
	}
	return openStore(ctx, cfg)
}

// temporalOptions are the client options every role uses.
func temporalOptions(cfg *config.Config, log *slog.Logger) client.Options {
	return client.Options{
		HostPort:  cfg.TemporalAddress,
		Namespace: cfg.TemporalNamespace,
		Logger:    tlog.NewStructuredLogger(log.With("component", "temporal")),
	}
}

// dialTemporal connects to Temporal, retrying until ctx ends: a worker started
// beside a Temporal server that is still booting waits instead of exiting.
func dialTemporal(ctx context.Context, cfg *config.Config, log *slog.Logger) (client.Client, error) {
	var lastErr error
	for attempt := 0; ; attempt++ {
		c, err := client.DialContext(ctx, temporalOptions(cfg, log))
		if err == nil {
			return c, nil
		}
		lastErr = err
		if attempt == 0 {
			log.Warn("Temporal not reachable yet; retrying", "address", cfg.TemporalAddress, "error", err)
		}
		select {
		case <-ctx.Done():
			return nil, fmt.Errorf("connect to Temporal at %s: %w", cfg.TemporalAddress, lastErr)
		case <-time.After(time.Second):
		}
	}
}

// lazyTemporal returns a client that connects on first use, so the API starts
// (and reports Temporal as unreachable on /health/) while Temporal is down.
func lazyTemporal(cfg *config.Config, log *slog.Logger) (client.Client, error) {
	return client.NewLazyClient(temporalOptions(cfg, log))
}

// serveHTTP runs h on addr until ctx ends, then shuts down gracefully. ready,
// when not nil, receives the bound address once listening.
func serveHTTP(ctx context.Context, addr string, h http.Handler, log *slog.Logger, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	srv := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second,
		// Uploads of 10,000 long rows take a while on slow links; the body
		// read is bounded by the upload size limit instead of a short timeout.
		ReadTimeout:  5 * time.Minute,
		WriteTimeout: 5 * time.Minute,
		IdleTimeout:  2 * time.Minute,
		// A few KB per header, tens of KB in all (api.MaxHeaderBytes);
		// beyond, net/http answers 431 (made JSON by jsonErrorListener).
		MaxHeaderBytes: api.MaxHeaderBytes,
	}
	if ready != nil {
		ready(ln.Addr())
	}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(jsonErrorListener{ln}) }()
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	log.Info("shutting down HTTP server", "addr", ln.Addr().String())
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	return srv.Shutdown(sctx)
}
