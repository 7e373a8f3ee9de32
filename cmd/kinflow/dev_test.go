package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/testenv"
	"gopkg.in/yaml.v3"
)

// TestDevNamesABusyPort: `kinflow dev` beside another stack
// stops before starting anything, naming the busy port, what it is for and
// the setting that moves it, for each of the stack's ports in turn.
func TestDevNamesABusyPort(t *testing.T) {
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer busy.Close()
	busyAddr := busy.Addr().String()
	_, busyPort, _ := net.SplitHostPort(busyAddr)
	for _, c := range []struct {
		env, value, want string
	}{
		{"KINFLOW_TEMPORAL_ADDRESS", busyAddr, "(the Temporal dev server) is already in use"},
		{"KINFLOW_TEMPORAL_UI_PORT", busyPort, "(the Temporal web UI) is already in use"},
		{"KINFLOW_API_LISTEN", busyAddr, "(the API and web page) is already in use"},
		{"KINFLOW_GPU_LISTEN", busyAddr, "(the GPU host) is already in use"},
	} {
		t.Run(c.env, func(t *testing.T) {
			t.Setenv("KINFLOW_DATABASE_URL", "sqlite:"+t.TempDir()+"/k.db")
			t.Setenv("KINFLOW_TEMPORAL_ADDRESS", testenv.FreeAddr(t))
			_, ui, _ := net.SplitHostPort(testenv.FreeAddr(t))
			t.Setenv("KINFLOW_TEMPORAL_UI_PORT", ui)
			t.Setenv("KINFLOW_API_LISTEN", testenv.FreeAddr(t))
			t.Setenv("KINFLOW_GPU_LISTEN", testenv.FreeAddr(t))
			t.Setenv("GPU_EMBED_SERVICE_URL", "")
			t.Setenv(c.env, c.value)
			var out, errOut bytes.Buffer
			err := runDev(context.Background(), []string{"--temporal-cli", "/nonexistent/temporal", "--data-dir", t.TempDir()}, &out, &errOut)
			if err == nil || !strings.Contains(err.Error(), "port 127.0.0.1:"+busyPort+" "+c.want) || !strings.Contains(err.Error(), c.env) {
				t.Fatalf("error %v, want the port %s named with %s", err, busyPort, c.env)
			}
		})
	}
	// The UI port flag still wins over the setting.
	t.Run("flag", func(t *testing.T) {
		t.Setenv("KINFLOW_DATABASE_URL", "sqlite:"+t.TempDir()+"/k.db")
		t.Setenv("KINFLOW_TEMPORAL_ADDRESS", testenv.FreeAddr(t))
		t.Setenv("KINFLOW_API_LISTEN", testenv.FreeAddr(t))
		t.Setenv("KINFLOW_GPU_LISTEN", testenv.FreeAddr(t))
		t.Setenv("GPU_EMBED_SERVICE_URL", "")
		var out, errOut bytes.Buffer
		p, _ := strconv.Atoi(busyPort)
		err := runDev(context.Background(), []string{"--temporal-cli", "/nonexistent/temporal", "--temporal-ui-port", strconv.Itoa(p)}, &out, &errOut)
		if err == nil || !strings.Contains(err.Error(), "(the Temporal web UI) is already in use") {
			t.Fatalf("error %v", err)
		}
	})
}

// The dev server of `kinflow dev` runs on the production topology's dynamic
// configuration (docker/temporal/dynamicconfig.yaml), key for key.
func TestDevServerHasTheTopologysDynamicConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join("..", "..", "docker", "temporal", "dynamicconfig.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var file map[string][]struct {
		Value any `yaml:"value"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	var want []string
	for k, vs := range file {
		if len(vs) != 1 {
			t.Fatalf("%s: %d values; the dev server's flags carry one", k, len(vs))
		}
		want = append(want, fmt.Sprintf("%s=%v", k, vs[0].Value))
	}
	got := slices.Clone(devTopologyDynamicConfig)
	slices.Sort(want)
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Fatalf("dev server %v, docker/temporal/dynamicconfig.yaml %v", got, want)
	}
}

// TestBannerPointsToPasteSafeFirstJob: `make run`'s banner sends the user
// to the README's first job, which can be pasted twice, rather than to a
// key request that answers 409 the second time; on moved ports it names
// the settings the block reads, and on the defaults nothing more.
func TestBannerPointsToPasteSafeFirstJob(t *testing.T) {
	var def, moved bytes.Buffer
	printBanner(&def, "http://127.0.0.1:8000", "http://127.0.0.1:8233", 8233)
	printBanner(&moved, "http://127.0.0.1:8001", "http://127.0.0.1:8234", 8234)
	for _, b := range []string{def.String(), moved.String()} {
		if !strings.Contains(b, `"A first job" in README.md`) || strings.Contains(b, "api-key/generate") {
			t.Errorf("banner:\n%s", b)
		}
	}
	if strings.Contains(def.String(), "export") {
		t.Errorf("default ports, yet an export:\n%s", def.String())
	}
	if !strings.Contains(moved.String(), "export KINFLOW_API_LISTEN=127.0.0.1:8001 KINFLOW_TEMPORAL_UI_PORT=8234") {
		t.Errorf("moved ports not named:\n%s", moved.String())
	}
}
