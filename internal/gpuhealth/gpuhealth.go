// Package gpuhealth reads the remote GPU embedding service's health (WIRE
// §9.3, §9.5) through a per-process TTL cache. The API answers
// /api/v1/gpu/status/ with it and the GPUHealth activity gives it to the
// prediction workflow.
package gpuhealth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/config"
)

// gpuHTTPTimeout bounds every request to the GPU service (WIRE §9.3: 5 s).
const gpuHTTPTimeout = 5 * time.Second

// Health is the GPU service's health as the backend sees it (WIRE §9.5).
type Health struct {
	Configured bool   `json:"configured"`
	Online     bool   `json:"online"`
	Reason     string `json:"reason"`
	// Executor is the GPU host's step executor ("command" or
	// "synthetic", from its /health), when it says.
	Executor string `json:"executor,omitempty"`
}

// Checker reads the GPU service's /health and keeps the reading for
// GPU_EMBED_HEALTH_TTL_SECONDS, success and failure alike (WIRE §9.3), per
// process. It also answers the API's /gpu/status/.
type Checker struct {
	Config *config.Config
	HTTP   *http.Client

	mu   sync.Mutex
	at   time.Time
	last Health
}

// New returns a checker for cfg's GPU service.
func New(cfg *config.Config) *Checker {
	return &Checker{Config: cfg, HTTP: &http.Client{Timeout: gpuHTTPTimeout}}
}

// Check returns the GPU service's health, through the TTL cache.
func (h *Checker) Check(ctx context.Context) Health {
	url := h.Config.GPUEmbedServiceURL
	if url == "" {
		return Health{Configured: false, Online: false, Reason: "not_configured"}
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && time.Since(h.at) < h.Config.GPUEmbedHealthTTL {
		return h.last
	}
	r := h.fetch(ctx, url)
	h.at, h.last = time.Now(), r
	return r
}

// GPUStatus implements the API's GPUStatus.
func (h *Checker) GPUStatus(ctx context.Context) (configured, online bool) {
	r := h.Check(ctx)
	return r.Configured, r.Online
}

func (h *Checker) fetch(ctx context.Context, url string) Health {
	ctx, cancel := context.WithTimeout(ctx, gpuHTTPTimeout)
	defer cancel()
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
		Online   *bool  `json:"online"`
		Executor string `json:"executor"`
	}
	if err := json.Unmarshal(body, &payload); err != nil {
		return Health{Configured: true, Reason: "unreachable: invalid JSON from /health"}
	}
	// A health payload without "online" counts as online (WIRE §9.5).
	if payload.Online != nil && !*payload.Online {
		return Health{Configured: true, Online: false, Reason: "remote_offline"}
	}
	return Health{Configured: true, Online: true, Executor: payload.Executor}
}
