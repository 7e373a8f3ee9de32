package activities

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

// HealthChecker reads the GPU service's /health and keeps the reading for
// GPU_EMBED_HEALTH_TTL_SECONDS, success and failure alike (WIRE §9.3), per
// process. It also answers the API's /gpu/status/.
type HealthChecker struct {
	Config *config.Config
	HTTP   *http.Client

	mu   sync.Mutex
	at   time.Time
	last Health
}

// NewHealthChecker returns a checker for cfg's GPU service.
func NewHealthChecker(cfg *config.Config) *HealthChecker {
	return &HealthChecker{Config: cfg, HTTP: &http.Client{Timeout: gpuHTTPTimeout}}
}

// Check returns the GPU service's health, through the TTL cache.
func (h *HealthChecker) Check(ctx context.Context) Health {
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
func (h *HealthChecker) GPUStatus(ctx context.Context) (configured, online bool) {
	r := h.Check(ctx)
	return r.Configured, r.Online
}

func (h *HealthChecker) fetch(ctx context.Context, url string) Health {
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
		Online *bool `json:"online"`
	}
	if err := json.Unmarshal(body, &payload); err != nil {
		return Health{Configured: true, Reason: "unreachable: invalid JSON from /health"}
	}
	// A health payload without "online" counts as online (WIRE §9.5).
	if payload.Online != nil && !*payload.Online {
		return Health{Configured: true, Online: false, Reason: "remote_offline"}
	}
	return Health{Configured: true, Online: true}
}

// GPUHealth is the workflow's reading of the GPU service's health.
func (a *Activities) GPUHealth(ctx context.Context) (Health, error) {
	return a.Health.Check(ctx), nil
}
