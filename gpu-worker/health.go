package gpuworker

import (
	"context"
	"fmt"
	"math"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"time"
)

// GPUInfo is the GPU part of /health.
type GPUInfo struct {
	Name    string
	FreeGB  *float64
	TotalGB *float64
}

// HealthProbe reads the GPU through nvidia-smi.
type HealthProbe struct {
	// Executor is the step executor's name; "synthetic" says so in gpu_name.
	Executor string
	// FallbackName is GPU_NAME, used when nvidia-smi is absent.
	FallbackName string
	// SMI is the nvidia-smi path; empty means look it up on PATH.
	SMI string

	mu     sync.Mutex
	cached GPUInfo
	at     time.Time
}

// smiTimeout bounds one nvidia-smi run; a wedged driver must not hang
// /health past the backend's 5 s request timeout.
const smiTimeout = 2 * time.Second

// smiCacheFor is how long one reading serves /health: nvidia-smi takes tens
// of milliseconds and every backend process polls /health.
const smiCacheFor = 5 * time.Second

// GPU returns the GPU's name and memory (cached for smiCacheFor).
func (h *HealthProbe) GPU(ctx context.Context) GPUInfo {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !h.at.IsZero() && time.Since(h.at) < smiCacheFor {
		return h.cached
	}
	info, err := h.read(ctx)
	if err != nil {
		name := h.FallbackName
		if name == "" {
			name = "unknown"
		}
		info = GPUInfo{Name: name}
	}
	if h.Executor == "synthetic" {
		info.Name = "synthetic executor (no model runs) on " + info.Name
	}
	h.cached, h.at = info, time.Now()
	return info
}

func (h *HealthProbe) read(ctx context.Context) (GPUInfo, error) {
	smi := h.SMI
	if smi == "" {
		p, err := exec.LookPath("nvidia-smi")
		if err != nil {
			return GPUInfo{}, err
		}
		smi = p
	}
	ctx, cancel := context.WithTimeout(ctx, smiTimeout)
	defer cancel()
	out, err := exec.CommandContext(ctx, smi, "--query-gpu=name,memory.free,memory.total", "--format=csv,noheader,nounits").Output()
	if err != nil {
		return GPUInfo{}, fmt.Errorf("nvidia-smi: %w", err)
	}
	return ParseNvidiaSMI(string(out))
}

// ParseNvidiaSMI reads the first GPU's line of `nvidia-smi
// --query-gpu=name,memory.free,memory.total --format=csv,noheader,nounits`
// (MiB), converting memory to GiB rounded to 2 decimals (docs/gpu-host.md, "HTTP API").
func ParseNvidiaSMI(out string) (GPUInfo, error) {
	line, _, _ := strings.Cut(strings.TrimSpace(out), "\n")
	f := strings.Split(line, ",")
	if len(f) < 3 {
		return GPUInfo{}, fmt.Errorf("nvidia-smi output %q: want name, free, total", line)
	}
	name := strings.TrimSpace(strings.Join(f[:len(f)-2], ","))
	free, err1 := strconv.ParseFloat(strings.TrimSpace(f[len(f)-2]), 64)
	total, err2 := strconv.ParseFloat(strings.TrimSpace(f[len(f)-1]), 64)
	if name == "" || err1 != nil || err2 != nil {
		return GPUInfo{}, fmt.Errorf("nvidia-smi output %q not understood", line)
	}
	gb := func(mib float64) *float64 { v := math.Round(mib/1024*100) / 100; return &v }
	return GPUInfo{Name: name, FreeGB: gb(free), TotalGB: gb(total)}, nil
}
