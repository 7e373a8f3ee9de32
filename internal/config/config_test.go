package config

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func env(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) { v, ok := m[k]; return v, ok }
}

func TestDefaults(t *testing.T) {
	c, err := Load(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	if c.GPUEmbedHealthTTL != 10*time.Second || c.GPUEmbedJobTimeout != 1200*time.Second {
		t.Errorf("GPU timings: %v %v", c.GPUEmbedHealthTTL, c.GPUEmbedJobTimeout)
	}
	if c.DefaultDailyQuota != 20000 || c.GPUSlots != 1 || c.MaxRows != 10000 {
		t.Errorf("limits: %+v", c)
	}
	if c.CPUTaskQueue != "kinflow-cpu" || c.GPUTaskQueue != "kinflow-gpu" {
		t.Errorf("queues: %s %s", c.CPUTaskQueue, c.GPUTaskQueue)
	}
	if c.MethodJCacheDir != "./media/sequence_info/methodj_contacts" {
		t.Errorf("METHODJ_CACHE_DIR default: %q", c.MethodJCacheDir)
	}
	if c.GPUEmbedFailClosed || c.GPUEmbedServiceURL != "" {
		t.Error("GPU offload must default to fail-open and unconfigured")
	}
}

func TestInvalidValuesNameTheKey(t *testing.T) {
	cases := map[string]string{
		"GPU_EMBED_HEALTH_TTL_SECONDS":  "abc",
		"GPU_EMBED_JOB_TIMEOUT_SECONDS": "0",
		"GPU_EMBED_FAIL_CLOSED":         "maybe",
		"GPU_EMBED_SERVICE_URL":         "ftp://x",
		"KINFLOW_DATABASE_URL":          "mysql://x",
		"KINFLOW_TEMPORAL_ADDRESS":      "nohostport",
		"KINFLOW_TRUSTED_PROXIES":       "10.0.0.0/8,not-an-ip",
		"LOG_LEVEL":                     "loud",
		"KINFLOW_GPU_SLOTS":             "1000",
		"KINFLOW_STEP_EXECUTOR":         "gpu",
	}
	for key, val := range cases {
		_, err := Load(env(map[string]string{key: val}))
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != key {
			t.Errorf("%s=%q: got %v, want a KeyError naming the key", key, val, err)
			continue
		}
		msg := err.Error()
		if strings.Contains(msg, "\n") || !strings.Contains(msg, key) || !strings.Contains(msg, "want") {
			t.Errorf("%s: message %q is not one line naming the key and what is allowed", key, msg)
		}
	}
}

func TestValuesParse(t *testing.T) {
	c, err := Load(env(map[string]string{
		"GPU_EMBED_SERVICE_URL":   "http://gpu:8080/",
		"GPU_EMBED_FAIL_CLOSED":   "Yes",
		"KINFLOW_TRUSTED_PROXIES": "10.0.0.0/8, 192.168.1.7",
		"LOG_LEVEL":               "DEBUG",
		"KINFLOW_DATABASE_URL":    "postgres://u@h:5432/db",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if c.GPUEmbedServiceURL != "http://gpu:8080" {
		t.Errorf("trailing slash not stripped: %q", c.GPUEmbedServiceURL)
	}
	if !c.GPUEmbedFailClosed {
		t.Error("Yes should be true")
	}
	if len(c.TrustedProxies) != 2 || c.TrustedProxies[1].Bits() != 32 {
		t.Errorf("proxies: %v", c.TrustedProxies)
	}
	// Several GPU hosts: each checked, trimmed and kept in order.
	c, err = Load(env(map[string]string{"GPU_EMBED_SERVICE_URL": " http://gpu-a:8080/ ,https://gpu-b,, "}))
	if err != nil || c.GPUEmbedServiceURL != "http://gpu-a:8080,https://gpu-b" {
		t.Errorf("list: %q, %v", c.GPUEmbedServiceURL, err)
	}
	if _, err := Load(env(map[string]string{"GPU_EMBED_SERVICE_URL": "http://gpu-a,ftp://gpu-b"})); err == nil {
		t.Error("a list with one bad URL was accepted")
	}
}

// TestREADMEConfigTable keeps the README's configuration table equal to the
// key table: a key added here must be documented there.
func TestREADMEConfigTable(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), Markdown()) {
		t.Fatalf("README.md's configuration table is out of date; replace it with `kinflow config --markdown`:\n%s", Markdown())
	}
}

func TestChildEnvDropsSecrets(t *testing.T) {
	in := []string{"PATH=/usr/bin", "KINFLOW_DATABASE_URL=postgres://u:pw@h/db", "GPU_EMBED_SERVICE_TOKEN=t",
		"PGPASSWORD=pw", "KINFLOW_MEDIA_ROOT=/m", "CUDA_VISIBLE_DEVICES=0", "KINFLOW_DATABASE_URL_EXTRA=kept"}
	got := ChildEnv(in)
	want := []string{"PATH=/usr/bin", "KINFLOW_MEDIA_ROOT=/m", "CUDA_VISIBLE_DEVICES=0", "KINFLOW_DATABASE_URL_EXTRA=kept"}
	if strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("ChildEnv = %q, want %q", got, want)
	}
}
