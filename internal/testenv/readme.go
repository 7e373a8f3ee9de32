package testenv

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
)

// FirstJobOutput lists what the README's "A first job" commands must print
// on a stack with the synthetic backends: health, the Completed status, the
// CSV's header, a synthetic Source cell and the JSON's synthetic flag. The
// README test on `kinflow dev` and the container test on compose share it.
var FirstJobOutput = []string{
	`"status":"ok"`,
	`"status":"Completed"`,
	"kcat (1/s),Source kcat,Extra Info kcat,KM (mM),Source Km,Extra Info Km,Protein Sequence",
	"Synthetic placeholder from Method B (not a prediction)",
	`"synthetic":true`,
}

// READMEBlock returns the first fenced code block after heading in the
// repository's README.md.
func READMEBlock(tb testing.TB, heading string) string {
	tb.Helper()
	data, err := os.ReadFile(filepath.Join(RepoRoot(), "README.md"))
	if err != nil {
		tb.Fatal(err)
	}
	text := string(data)
	i := strings.Index(text, heading)
	if i < 0 {
		tb.Fatalf("README has no %q", heading)
	}
	rest := text[i:]
	start := strings.Index(rest, "```")
	if start < 0 {
		tb.Fatalf("no code block after %q", heading)
	}
	nl := strings.Index(rest[start:], "\n")
	if nl < 0 {
		tb.Fatalf("no code block after %q", heading)
	}
	end := strings.Index(rest[start+nl:], "```")
	if end < 0 {
		tb.Fatalf("no code block after %q", heading)
	}
	return rest[start+nl+1 : start+nl+end]
}

// RunFirstJob runs the README's "A first job" commands, as written, with bash
// in the repository root, twice, as a user who pastes them again would,
// against the api at base (empty: the README's default, the configuration's
// KINFLOW_API_LISTEN), and checks that the output of each run has every line
// of FirstJobOutput and that the second run reused the key the first one
// saved. It returns the output of both runs.
func RunFirstJob(tb testing.TB, base string) string {
	tb.Helper()
	block := READMEBlock(tb, "## A first job")
	// The block's ports come from the settings make run reads, with the
	// configuration's own defaults: a README that drifts from them would
	// send a new user to the wrong port.
	for _, def := range []struct{ name, form string }{
		{"KINFLOW_API_LISTEN", "BASE=http://${KINFLOW_API_LISTEN:-%s}"},
		{"KINFLOW_TEMPORAL_UI_PORT", "${KINFLOW_TEMPORAL_UI_PORT:-%s}"},
	} {
		i := slices.IndexFunc(config.Keys, func(k config.Key) bool { return k.Name == def.name })
		if i < 0 {
			tb.Fatalf("no configuration key %s", def.name)
		}
		if want := fmt.Sprintf(def.form, config.Keys[i].Default); !strings.Contains(block, want) {
			tb.Fatalf("the README's first job no longer has %s (the configuration's default)", want)
		}
	}
	env := []string{"KINFLOW_KEY_FILE=" + filepath.Join(tb.TempDir(), "key")}
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "KINFLOW_API_LISTEN=") && !strings.HasPrefix(kv, "KINFLOW_KEY_FILE=") {
			env = append(env, kv)
		}
	}
	if base != "" {
		addr, ok := strings.CutPrefix(base, "http://")
		if !ok {
			tb.Fatalf("RunFirstJob: base %q is not an http:// address", base)
		}
		env = append(env, "KINFLOW_API_LISTEN="+strings.TrimSuffix(addr, "/"))
	}
	var all strings.Builder
	var keys []string
	for run := 1; run <= 2; run++ {
		sh := exec.Command("bash", "-euo", "pipefail", "-c", block)
		sh.Dir = RepoRoot()
		sh.Env = env
		out, err := sh.CombinedOutput()
		if err != nil {
			tb.Fatalf("README commands, paste %d: %v\n%s", run, err, out)
		}
		for _, want := range FirstJobOutput {
			if !strings.Contains(string(out), want) {
				tb.Errorf("README commands' output lacks %q, paste %d:\n%s", want, run, out)
			}
		}
		key, err := os.ReadFile(strings.TrimPrefix(env[0], "KINFLOW_KEY_FILE="))
		if err != nil || len(strings.TrimSpace(string(key))) != 67 {
			tb.Fatalf("README commands, paste %d: no key saved: %v %q", run, err, key)
		}
		keys = append(keys, string(key))
		all.Write(out)
	}
	if keys[0] != keys[1] {
		tb.Errorf("the second paste of the README's first job made a new key instead of reusing the saved one")
	}
	return all.String()
}
