package workflows

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"
)

// TestEveryChangeIsListed: every change id the workflow code asks for is in
// Changes, once, so that Level rises with each change and an older worker
// is refused rather than left to fail on a newer run's history.
func TestEveryChangeIsListed(t *testing.T) {
	re := regexp.MustCompile(`(?m)^const \w+Version = "([^"]+)"`)
	var found []string
	for _, dir := range []string{".", filepath.Join("..", "internal", "embedjob")} {
		files, err := filepath.Glob(filepath.Join(dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range re.FindAllSubmatch(b, -1) {
				found = append(found, string(m[1]))
			}
		}
	}
	if len(found) == 0 {
		t.Fatal("no change ids found in the code")
	}
	for _, id := range found {
		if !slices.Contains(Changes, id) {
			t.Errorf("change %q is not in workflows.Changes", id)
		}
	}
	seen := map[string]bool{}
	for _, id := range Changes {
		if seen[id] {
			t.Errorf("change %q listed twice", id)
		}
		seen[id] = true
	}
	if Level() != len(Changes)+Rev {
		t.Fatalf("level %d", Level())
	}
}
