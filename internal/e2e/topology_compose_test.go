package e2e

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"gopkg.in/yaml.v3"

	"github.com/kinflow/kinflow/internal/testenv"
)

// composeService is the part of a compose service this test reads.
type composeService struct {
	Build *struct {
		Target string `yaml:"target"`
	} `yaml:"build"`
	Image       string            `yaml:"image"`
	Environment map[string]string `yaml:"environment"`
	Entrypoint  []string          `yaml:"entrypoint"`
	Command     []string          `yaml:"command"`
	DependsOn   map[string]struct {
		Condition string `yaml:"condition"`
	} `yaml:"depends_on"`
}

// TestComposeAgreesWithTheTopology checks docker/compose.yaml against the
// topology the tests run (no Docker engine runs here): the same variables
// for every kinflow role, the same listen keys per role, the Temporal server
// built at the Makefile's pinned version with the configuration file and
// schema script the tests use, the namespace prepared by `kinflow
// namespace`, and the same start order.
func TestComposeAgreesWithTheTopology(t *testing.T) {
	root := testenv.RepoRoot()
	data, err := os.ReadFile(filepath.Join(root, "docker", "compose.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Env      map[string]string         `yaml:"x-kinflow-env"`
		Services map[string]composeService `yaml:"services"`
	}
	if err := yaml.Unmarshal(data, &c); err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}

	// Every variable the suite gives every kinflow process, compose gives
	// every kinflow service (values differ: compose reads them from .env).
	suite := topologyEnv("db", "temporal", "media")
	for k := range suite {
		if _, ok := c.Env[k]; !ok {
			t.Errorf("x-kinflow-env lacks %s, which the tests' topology sets", k)
		}
	}
	if got := c.Env["KINFLOW_TEMPORAL_NAMESPACE"]; got != suite["KINFLOW_TEMPORAL_NAMESPACE"] {
		t.Errorf("compose namespace %q, tests %q", got, suite["KINFLOW_TEMPORAL_NAMESPACE"])
	}
	for _, role := range []string{"api", "worker", "gpu-worker"} {
		svc, ok := c.Services[role]
		if !ok {
			t.Fatalf("no service %s", role)
		}
		for k := range suite {
			if _, ok := svc.Environment[k]; !ok {
				t.Errorf("service %s lacks %s", role, k)
			}
		}
		if key := roleListenKey[role]; key != "" && svc.Environment[key] == "" {
			t.Errorf("service %s does not set its listen address %s", role, key)
		}
		// gpu-worker's target is "${KINFLOW_GPU_WORKER_TARGET:-gpu-worker}"
		// (the container test builds gpu-worker-synthetic).
		if svc.Build == nil || (svc.Build.Target != role && svc.Build.Target != "${KINFLOW_GPU_WORKER_TARGET:-"+role+"}") {
			t.Errorf("service %s does not build the %s image", role, role)
		}
	}

	// The Temporal server: the pinned version, the config and schema script
	// of the tests, the database variables the tests set.
	mk, _ := os.ReadFile(filepath.Join(root, "Makefile"))
	df, _ := os.ReadFile(filepath.Join(root, "docker", "Dockerfile"))
	mkVer := regexp.MustCompile(`(?m)^TEMPORAL_SERVER_VERSION\s*:=\s*(\S+)`).FindSubmatch(mk)
	dfVer := regexp.MustCompile(`(?m)^ARG TEMPORAL_SERVER_VERSION=(\S+)`).FindSubmatch(df)
	if mkVer == nil || dfVer == nil || string(mkVer[1]) != string(dfVer[1]) {
		t.Errorf("Temporal server version: Makefile %q, Dockerfile %q", mkVer, dfVer)
	}
	for _, want := range []string{"COPY docker/temporal/config.yaml docker/temporal/dynamicconfig.yaml docker/temporal/setup-schema.sh /etc/kinflow-temporal/",
		"--config-file /etc/kinflow-temporal/config.yaml", "DYNAMIC_CONFIG_FILE_PATH=/etc/kinflow-temporal/dynamicconfig.yaml"} {
		if !strings.Contains(string(df), want) {
			t.Errorf("Dockerfile lacks %q", want)
		}
	}
	if rel, _ := filepath.Rel(root, testenv.TemporalServerConfig()); rel != "docker/temporal/config.yaml" {
		t.Errorf("the tests run the server on %s", rel)
	}
	if rel, _ := filepath.Rel(root, testenv.TemporalDynamicConfig()); rel != "docker/temporal/dynamicconfig.yaml" {
		t.Errorf("the tests give the server the dynamic configuration %s", rel)
	}
	if rel, _ := filepath.Rel(root, testenv.TemporalSchemaScript()); rel != "docker/temporal/setup-schema.sh" {
		t.Errorf("the tests set up the schema with %s", rel)
	}
	for _, name := range []string{"temporal-schema", "temporal"} {
		svc := c.Services[name]
		if svc.Build == nil || svc.Build.Target != "temporal" {
			t.Errorf("service %s does not run the temporal image", name)
		}
		for _, k := range testenv.TemporalDBEnvKeys {
			if _, ok := svc.Environment[k]; !ok {
				t.Errorf("service %s lacks %s", name, k)
			}
		}
	}
	if ep := c.Services["temporal-schema"].Entrypoint; !slices.Contains(ep, "/etc/kinflow-temporal/setup-schema.sh") {
		t.Errorf("temporal-schema runs %v, not setup-schema.sh", ep)
	}
	ns := c.Services["temporal-namespace"]
	if len(ns.Command) == 0 || ns.Command[0] != "namespace" || ns.Build == nil {
		t.Errorf("temporal-namespace runs %v, not `kinflow namespace`", ns.Command)
	}
	if strings.Contains(string(data), "search-attribute create") {
		t.Error("compose.yaml still registers search attributes by hand")
	}

	// Start order: each infrastructure step waits for the one before it, and
	// every role for the namespace step.
	deps := func(name string) map[string]bool {
		seen := map[string]bool{}
		var walk func(string)
		walk = func(n string) {
			for d := range c.Services[n].DependsOn {
				if !seen[d] {
					seen[d] = true
					walk(d)
				}
			}
		}
		walk(name)
		return seen
	}
	infra := topologyStartOrder[:4]
	for i, name := range topologyStartOrder {
		if _, ok := c.Services[name]; !ok {
			t.Errorf("no service %s", name)
			continue
		}
		d := deps(name)
		for _, before := range infra[:min(i, len(infra))] {
			if !d[before] {
				t.Errorf("%s starts without waiting for %s (tests: %v)", name, before, topologyStartOrder)
			}
		}
	}
}
