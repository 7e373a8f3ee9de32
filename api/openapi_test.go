package api

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/testenv"
)

var ginParam = regexp.MustCompile(`:(\w+)`)

// TestOpenAPICoversRoutes checks that every registered route is in the
// OpenAPI document and every documented operation is served.
func TestOpenAPICoversRoutes(t *testing.T) {
	s := New(Deps{Config: testConfig(t)})
	var doc struct {
		Paths map[string]map[string]json.RawMessage `json:"paths"`
	}
	if err := json.Unmarshal(s.openapi, &doc); err != nil {
		t.Fatal(err)
	}
	// Routes registered for every method (anyMethod) are documented with
	// their main method only; the rest must match method for method.
	methodsOf := map[string]map[string]bool{}
	for _, r := range s.Engine().Routes() {
		if !strings.HasPrefix(r.Path, "/api/") && !strings.HasPrefix(r.Path, "/metrics") {
			// The browser page (/ and /static/) is not part of the REST
			// API the document describes; TestWebPage covers it.
			continue
		}
		p := ginParam.ReplaceAllStringFunc(r.Path, func(m string) string {
			if m == ":id" {
				return "{jobId}"
			}
			return "{" + m[1:] + "}"
		})
		if !strings.HasSuffix(p, "/") && !strings.HasSuffix(p, ".json") {
			// Both forms are registered; the slashed one is documented.
			p += "/"
		}
		if methodsOf[p] == nil {
			methodsOf[p] = map[string]bool{}
		}
		methodsOf[p][strings.ToLower(r.Method)] = true
	}
	var problems []string
	for p, ms := range methodsOf {
		ops, ok := doc.Paths[p]
		if !ok {
			problems = append(problems, "route not documented: "+p)
			continue
		}
		anyRoute := len(ms) >= 7
		for m := range ops {
			if !ms[m] {
				problems = append(problems, "documented but not served: "+strings.ToUpper(m)+" "+p)
			}
		}
		if !anyRoute {
			for m := range ms {
				if _, ok := ops[m]; !ok {
					problems = append(problems, "served but not documented: "+strings.ToUpper(m)+" "+p)
				}
			}
		}
	}
	for p := range doc.Paths {
		if methodsOf[p] == nil {
			problems = append(problems, "documented path without a route: "+p)
		}
	}
	sort.Strings(problems)
	if len(problems) > 0 {
		t.Fatal(strings.Join(problems, "\n"))
	}
	if len(methodsOf) != 16 {
		t.Fatalf("%d paths registered; update this test and the document together", len(methodsOf))
	}
}

func TestOpenAPIServed(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do("GET", "/api/v1/openapi.json", "192.0.2.1", "", nil)
	wantStatus(t, r, 200)
	if b := r.json(t); b["openapi"] != "3.1.0" {
		t.Fatalf("%v", b["openapi"])
	}
}

// TestOpenAPILint runs Redocly CLI (tools/openapi, installed by `npm ci`) on
// the document.
func TestOpenAPILint(t *testing.T) {
	dir := filepath.Join(testenv.RepoRoot(), "tools", "openapi")
	bin := filepath.Join(dir, "node_modules", ".bin", "redocly")
	if _, err := os.Stat(bin); err != nil {
		testenv.Unavailable(t, "Redocly CLI not installed (run `npm ci --prefix tools/openapi`)")
	}
	cmd := exec.Command(bin, "lint", "--config", "redocly.yaml", "--format", "stylish", "../../api/openapi.yaml")
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("redocly lint: %v\n%s", err, out)
	}
}
