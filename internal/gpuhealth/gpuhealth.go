// Package gpuhealth reads the remote GPU embedding service's health through
// a per-process TTL cache. The API answers
// /api/v1/gpu/status/ with it and the GPUHealth activity gives it to the
// prediction workflow.
package gpuhealth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/config"
)

// gpuHTTPTimeout bounds every request to the GPU service: 5 s, the
// reference backend's constant.
const gpuHTTPTimeout = 5 * time.Second

// Health is the GPU service's health as the backend sees it: not
// configured, unreachable (any network, HTTP or JSON error), or the
// service's own payload. Only configured, online and mode are public.
type Health struct {
	Configured bool   `json:"configured"`
	Online     bool   `json:"online"`
	Reason     string `json:"reason"`
	// Executor is the GPU host's step executor ("command" or
	// "synthetic", from its /health), when it says.
	Executor string `json:"executor,omitempty"`
	// CacheFolders is the GPU host's cache folder naming (its /health
	// "cache_folders"; a host that does not say uses kinflow).
	CacheFolders string `json:"cache_folders,omitempty"`
}

// ReasonCacheFoldersMismatch begins the Reason of a host whose cache folder
// naming differs from this process's: it is treated as offline, since its
// files would land where this process never looks.
const ReasonCacheFoldersMismatch = "cache_folders_mismatch"

// Checker reads the GPU service's /health and keeps the reading for
// GPU_EMBED_HEALTH_TTL_SECONDS, success and failure alike (so an offline
// service is not asked again on every job), per
// process. It also answers the API's /gpu/status/.
type Checker struct {
	Config *config.Config
	HTTP   *http.Client
	// Timeout bounds each host's answer (New: gpuHTTPTimeout).
	Timeout time.Duration

	mu   sync.Mutex
	at   time.Time
	last Health
}

// New returns a checker for cfg's GPU service.
func New(cfg *config.Config) *Checker {
	return &Checker{Config: cfg, HTTP: &http.Client{}, Timeout: gpuHTTPTimeout}
}

// URLs are the GPU hosts' base URLs in GPU_EMBED_SERVICE_URL (one, or
// several joined by commas), in order.
func URLs(cfg *config.Config) []string {
	var out []string
	for _, u := range strings.Split(cfg.GPUEmbedServiceURL, ",") {
		if u = strings.TrimSpace(u); u != "" {
			out = append(out, u)
		}
	}
	return out
}

// Check returns the GPU service's health, through the TTL cache. With
// several hosts the service is online while any of them answers online:
// every host is asked at once and the first online answer is taken (the
// GPU queue is served by every host, so one host that is down must not
// send jobs to the CPU while others are up); when none is online the
// first host's answer is the reason.
func (h *Checker) Check(ctx context.Context) Health {
	urls := URLs(h.Config)
	if len(urls) == 0 {
		return Health{Configured: false, Online: false, Reason: "not_configured"}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && time.Since(h.at) < h.Config.GPUEmbedHealthTTL {
		return h.last
	}
	r := h.any(ctx, urls)
	h.at, h.last = time.Now(), r
	return r
}

// any asks every host in urls and returns the first online answer, or the
// first host's answer when none is online.
func (h *Checker) any(ctx context.Context, urls []string) Health {
	if len(urls) == 1 {
		return h.fetch(ctx, urls[0])
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	type answer struct {
		i int
		h Health
	}
	answers := make(chan answer, len(urls))
	for i, u := range urls {
		go func() { answers <- answer{i, h.fetch(ctx, u)} }()
	}
	var first Health
	for range urls {
		a := <-answers
		if a.h.Online {
			return a.h
		}
		if a.i == 0 {
			first = a.h
		}
	}
	return first
}

// GPUStatus implements the API's GPUStatus.
func (h *Checker) GPUStatus(ctx context.Context) (configured, online bool) {
	r := h.Check(ctx)
	return r.Configured, r.Online
}

func (h *Checker) fetch(ctx context.Context, url string) Health {
	if h.Timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, h.Timeout)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url+"/health", nil)
	if err != nil {
		return Health{Configured: true, Reason: "unreachable: " + err.Error()}
	}
	req.Header.Set("Accept", "application/json")
	if t := h.Config.GPUEmbedServiceToken; t != "" {
		req.Header.Set("Authorization", "Bearer "+t)
	}
	resp, err := h.HTTP.Do(req)
	if err != nil {
		return Health{Configured: true, Reason: "unreachable: " + err.Error()}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return Health{Configured: true, Reason: "unreachable: " + err.Error()}
	}
	if resp.StatusCode != http.StatusOK {
		return Health{Configured: true, Reason: fmt.Sprintf("unreachable: HTTP %d", resp.StatusCode)}
	}
	var payload struct {
		Online       *bool  `json:"online"`
		Executor     string `json:"executor"`
		CacheFolders string `json:"cache_folders"`
	}
	if err := json.Unmarshal(body, &payload); err != nil {
		return Health{Configured: true, Reason: "unreachable: invalid JSON from /health"}
	}
	// A health payload without "online" counts as online, as the
	// reference's backend reads it.
	if payload.Online != nil && !*payload.Online {
		return Health{Configured: true, Online: false, Reason: "remote_offline"}
	}
	theirs := naming(payload.CacheFolders)
	if ours := naming(h.Config.CacheFolders); theirs != ours {
		return Health{Configured: true, Online: false, Executor: payload.Executor, CacheFolders: theirs,
			Reason: fmt.Sprintf("%s: the GPU host has KINFLOW_CACHE_FOLDERS=%s, this process %s; set the same value on every process that shares the cache",
				ReasonCacheFoldersMismatch, theirs, ours)}
	}
	return Health{Configured: true, Online: true, Executor: payload.Executor, CacheFolders: payload.CacheFolders}
}

// naming is a KINFLOW_CACHE_FOLDERS value with the default filled in.
func naming(v string) string {
	if v = strings.TrimSpace(v); v == "" {
		return "kinflow"
	}
	return v
}
