// Package docker holds the production packaging; its test checks the
// Dockerfile and compose file by reading them, since no Docker engine runs
// where the tests do.
package docker

import (
	"bufio"
	"os"
	"regexp"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"
)

func dockerfileTargets(t *testing.T) map[string]bool {
	t.Helper()
	f, err := os.Open("Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	from := regexp.MustCompile(`(?i)^FROM\s+\S+(\s+AS\s+(\S+))?\s*$`)
	known := map[string]bool{"FROM": true, "RUN": true, "COPY": true, "WORKDIR": true, "ENV": true, "ARG": true,
		"USER": true, "ENTRYPOINT": true, "CMD": true, "EXPOSE": true, "HEALTHCHECK": true, "LABEL": true}
	targets := map[string]bool{}
	sc := bufio.NewScanner(f)
	cont := false
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		wasCont := cont
		cont = strings.HasSuffix(line, "\\")
		if line == "" || strings.HasPrefix(line, "#") || wasCont {
			continue
		}
		instr := strings.ToUpper(strings.Fields(line)[0])
		if !known[instr] {
			t.Errorf("Dockerfile:%d: unknown instruction %q", n, instr)
		}
		if instr == "FROM" {
			m := from.FindStringSubmatch(line)
			if m == nil {
				t.Errorf("Dockerfile:%d: malformed FROM", n)
				continue
			}
			if m[2] != "" {
				targets[m[2]] = true
			}
		}
		if instr == "CMD" || instr == "ENTRYPOINT" {
			if !strings.HasPrefix(strings.TrimSpace(line[len(instr):]), "[") && instr == "ENTRYPOINT" {
				t.Errorf("Dockerfile:%d: ENTRYPOINT should be exec form", n)
			}
		}
	}
	return targets
}

func TestComposeMatchesDockerfile(t *testing.T) {
	targets := dockerfileTargets(t)
	for _, role := range []string{"api", "worker", "gpu-worker", "migrate"} {
		if !targets[role] {
			t.Errorf("Dockerfile has no target %q", role)
		}
	}
	data, err := os.ReadFile("compose.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Services map[string]struct {
			Image string `yaml:"image"`
			Build *struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
				Target     string `yaml:"target"`
			} `yaml:"build"`
			DependsOn map[string]struct {
				Condition string `yaml:"condition"`
			} `yaml:"depends_on"`
			Volumes []string `yaml:"volumes"`
			Deploy  struct {
				Resources struct {
					Reservations struct {
						Devices []struct {
							Driver       string   `yaml:"driver"`
							Capabilities []string `yaml:"capabilities"`
						} `yaml:"devices"`
					} `yaml:"reservations"`
				} `yaml:"resources"`
			} `yaml:"deploy"`
		} `yaml:"services"`
		Volumes map[string]any `yaml:"volumes"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	for _, name := range []string{"postgres", "temporal", "temporal-ui", "api", "worker", "gpu-worker"} {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("compose.yaml has no service %q", name)
		}
	}
	for name, s := range c.Services {
		if s.Build != nil {
			if !targets[composeDefault(s.Build.Target)] {
				t.Errorf("service %s builds target %q, which the Dockerfile lacks", name, s.Build.Target)
			}
			if s.Build.Dockerfile != "docker/Dockerfile" || s.Build.Context != ".." {
				t.Errorf("service %s: build context/dockerfile %q/%q", name, s.Build.Context, s.Build.Dockerfile)
			}
		} else if s.Image == "" {
			t.Errorf("service %s has neither image nor build", name)
		}
		for dep := range s.DependsOn {
			if _, ok := c.Services[dep]; !ok {
				t.Errorf("service %s depends on unknown %q", name, dep)
			}
		}
	}
	for _, role := range []string{"api", "worker", "gpu-worker"} {
		found := false
		for _, v := range c.Services[role].Volumes {
			if strings.HasPrefix(v, "media:") {
				found = true
			}
		}
		if !found {
			t.Errorf("%s does not mount the shared media volume", role)
		}
	}
	if _, ok := c.Volumes["media"]; !ok {
		t.Error("no media volume declared")
	}
	if len(c.Services["gpu-worker"].Deploy.Resources.Reservations.Devices) != 0 {
		t.Error("compose.yaml reserves a GPU: it must start on any machine (compose.gpu.yaml adds the GPU)")
	}
	gpu, err := os.ReadFile("compose.gpu.yaml")
	if err != nil {
		t.Fatal(err)
	}
	c.Services = nil
	if err := yaml.Unmarshal(gpu, &c); err != nil {
		t.Fatalf("compose.gpu.yaml: %v", err)
	}
	devs := c.Services["gpu-worker"].Deploy.Resources.Reservations.Devices
	if len(devs) == 0 || devs[0].Driver != "nvidia" {
		t.Error("compose.gpu.yaml reserves no NVIDIA GPU for gpu-worker")
	}
	if gw := c.Services["gpu-worker"]; gw.Build != nil || gw.Image != "" || len(c.Services) != 1 {
		t.Error("compose.gpu.yaml should only add the GPU to gpu-worker")
	}
}

// composeDefault resolves a compose value "${VAR:-default}" to its default;
// other values are returned as they are.
func composeDefault(v string) string {
	if strings.HasPrefix(v, "${") && strings.HasSuffix(v, "}") {
		if _, def, ok := strings.Cut(v[2:len(v)-1], ":-"); ok {
			return def
		}
	}
	return v
}
