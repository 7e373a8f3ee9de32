package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
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
// in the repository root, against the api at base (empty: the README's own
// http://127.0.0.1:8000), and checks that their output has every line of
// FirstJobOutput. It returns the output.
func RunFirstJob(tb testing.TB, base string) string {
	tb.Helper()
	block := READMEBlock(tb, "## A first job")
	const readmeBase = "BASE=http://127.0.0.1:8000"
	if !strings.Contains(block, readmeBase) {
		tb.Fatalf("the README's first job no longer sets %s", readmeBase)
	}
	if base != "" {
		block = strings.Replace(block, readmeBase, "BASE="+base, 1)
	}
	sh := exec.Command("bash", "-euo", "pipefail", "-c", block)
	sh.Dir = RepoRoot()
	out, err := sh.CombinedOutput()
	if err != nil {
		tb.Fatalf("README commands: %v\n%s", err, out)
	}
	for _, want := range FirstJobOutput {
		if !strings.Contains(string(out), want) {
			tb.Errorf("README commands' output lacks %q:\n%s", want, out)
		}
	}
	return string(out)
}
