package testenv

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// StepsPython is the step programs' interpreter (.venv-steps, made by
// scripts/steps-venv.sh from `make test`); without it the test is
// Unavailable.
func StepsPython(t testing.TB) string {
	t.Helper()
	py := filepath.Join(RepoRoot(), ".venv-steps", "bin", "python")
	if _, err := os.Stat(py); err != nil {
		Unavailable(t, "the step programs' venv is missing (%v): run scripts/steps-venv.sh", err)
	}
	return py
}

// TinyModels writes the tiny random-weight models of steps/ under a temp
// folder and returns the env lines that point the step programs at them.
func TinyModels(t testing.TB, py string) []string {
	t.Helper()
	envPath := filepath.Join(t.TempDir(), "models.env")
	out, err := exec.Command(py, filepath.Join(RepoRoot(), "steps", "tests", "make_tiny_models.py"), filepath.Join(t.TempDir(), "models"), "--env-file", envPath).CombinedOutput()
	if err != nil {
		t.Fatalf("make_tiny_models: %v\n%s", err, out)
	}
	data, err := os.ReadFile(envPath)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Split(strings.TrimSpace(string(data)), "\n")
}
