package api

import (
	"context"
	"net/http"
	"time"

	"github.com/gin-gonic/gin"
)

// GPUStatus is the cached health of the GPU service (the worker side owns
// the cache and its TTL).
type GPUStatus interface {
	GPUStatus(ctx context.Context) (configured, online bool)
}

// publicGPUEvents is how many recent precompute events /gpu/status/ shows,
// across all jobs (the same window a job's status keeps).
const publicGPUEvents = 20

// gpuStatusBody is /gpu/status/'s payload: the reference deployment's three
// keys, then kinflow's recent precompute events, which carry no job id: the
// route is public, so nothing in it may identify another user's job.
type gpuStatusBody struct {
	Configured    bool            `json:"configured"`
	Online        bool            `json:"online"`
	Mode          string          `json:"mode"`
	GPUPrecompute publicPrecompte `json:"gpuPrecompute"`
}

type publicPrecompte struct {
	UpdatedAt *string    `json:"updatedAt"`
	Events    []gpuEvent `json:"events"`
}

// gpuStatus answers GET /gpu/status/, configured or not.
func (s *Server) gpuStatus(c *gin.Context) {
	ctx := c.Request.Context()
	var configured, online bool
	if s.deps.GPU != nil {
		// The health read is cached by the implementation; the deadline only
		// guards against a cache miss that hangs.
		hctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		configured, online = s.deps.GPU.GPUStatus(hctx)
		cancel()
	} else if s.deps.Config != nil {
		configured = s.deps.Config.GPUEmbedServiceURL != ""
	}
	evs, err := s.deps.Store.RecentGPUPrecomputeEvents(ctx, publicGPUEvents)
	if err != nil {
		s.internalError(c, "gpu.events_failed", err)
		return
	}
	b := gpuStatusBody{Configured: configured, Online: configured && online, Mode: "cpu",
		GPUPrecompute: publicPrecompte{Events: make([]gpuEvent, 0, len(evs))}}
	if b.Online {
		b.Mode = "gpu"
	}
	for _, e := range evs {
		b.GPUPrecompute.Events = append(b.GPUPrecompute.Events, toGPUEvent(e))
	}
	if n := len(b.GPUPrecompute.Events); n > 0 {
		u := b.GPUPrecompute.Events[n-1].UpdatedAt
		b.GPUPrecompute.UpdatedAt = &u
	}
	c.JSON(http.StatusOK, b)
}
