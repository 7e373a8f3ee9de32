package methods_test

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/testenv"
)

// folderEngine writes its environment's X_CACHE and its argv to
// KEEP_DIR/seen.json, then answers every row.
const folderEngine = `import json, os, sys
a = sys.argv[1:]
inp, out = a[a.index("--input") + 1], a[a.index("--output") + 1]
job = json.load(open(inp))
json.dump({"env": os.environ.get("X_CACHE"), "argv": a}, open(os.path.join(os.environ["KEEP_DIR"], "seen.json"), "w"))
json.dump({"predictions": [1.0 for r in job["rows"]]}, open(out, "w"))
`

// TestFolderPlaceholder: {folder:<family>} renders to the family's absolute
// folder under the worker's naming, in env_paths and in the command line;
// without a folder resolver the variable is left unset.
func TestFolderPlaceholder(t *testing.T) {
	if err := exec.Command(input.DefaultPython, "-c", "import json").Run(); err != nil {
		testenv.Unavailable(t, "the engine programs need %s", input.DefaultPython)
	}
	dir := t.TempDir()
	script := filepath.Join(dir, "program.py")
	if err := os.WriteFile(script, []byte(folderEngine), 0o644); err != nil {
		t.Fatal(err)
	}
	cat, err := methods.Parse(fmt.Appendf(nil, `methods:
  - key: B
    env_paths: [{name: X_CACHE, value: "{folder:methodg_esm2}"}]
    command:
      python: %s
      script: %s
      extra_env: {KEEP_DIR: %s}
      argv: ["{python}", "{script}", "--turnup={folder:esm1b_methodd}", "--input", "{input}", "--output", "{output}"]
`, input.DefaultPython, script, dir))
	if err != nil {
		t.Fatal(err)
	}
	d, _ := cat.Get("B")
	if got := d.FolderFamilies(); len(got) != 2 || got[0] != embedding.FamilyMethodGESM2 || got[1] != embedding.FamilyESM1bMethodD {
		t.Fatalf("folder families %v", got)
	}
	l, err := embedding.NewLayout(filepath.Join(dir, "media"), "", "", "")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		naming     embedding.Folders
		g, d       string
		noResolver bool
	}{
		{embedding.FoldersKinflow, "methodg_esm2", "esm1b_methodd", false},
		{embedding.FoldersReference, "omniesi_esm2", "esm1b_turnup", false},
		{embedding.FoldersReference, "", "", true},
	} {
		l.Folders = c.naming
		work := filepath.Join(dir, "work")
		if err := os.MkdirAll(work, 0o755); err != nil {
			t.Fatal(err)
		}
		req := methods.CommandRequest{JobID: "job1", Target: "kcat", Dir: work, Env: []string{"PATH=" + os.Getenv("PATH")},
			Rows: []methods.EngineRow{{Seq: "MKV", Kwargs: map[string]string{"substrates": "CCO"}}}}
		if !c.noResolver {
			req.Folder = l.FolderOf
		}
		if _, _, err := methods.RunCommand(context.Background(), d, req); err != nil {
			t.Fatalf("%s: %v", c.naming, err)
		}
		var seen struct {
			Env  *string  `json:"env"`
			Argv []string `json:"argv"`
		}
		data, _ := os.ReadFile(filepath.Join(dir, "seen.json"))
		if err := json.Unmarshal(data, &seen); err != nil {
			t.Fatal(err)
		}
		if c.noResolver {
			if seen.Env != nil {
				t.Errorf("no resolver: X_CACHE=%q, want unset", *seen.Env)
			}
			continue
		}
		if want := filepath.Join(l.SequenceInfo(), c.g); seen.Env == nil || *seen.Env != want {
			t.Errorf("%s: X_CACHE=%v, want %s", c.naming, seen.Env, want)
		}
		if want := "--turnup=" + filepath.Join(l.SequenceInfo(), c.d); len(seen.Argv) == 0 || seen.Argv[0] != want {
			t.Errorf("%s: argv %v, want %s first", c.naming, seen.Argv, want)
		}
	}
}

// TestFolderPlaceholderNamesAFamily: a {folder:…} that names no family, or
// a malformed one, fails the catalogue's load.
func TestFolderPlaceholderNamesAFamily(t *testing.T) {
	for _, v := range []string{"{folder:esm1b_turnup}", "{folder:nosuch}", "{folder:}"} {
		_, err := methods.Parse(fmt.Appendf(nil, `methods:
  - key: B
    env_paths: [{name: X_CACHE, value: "%s"}]
    command: {python: python3, script: s.py}
`, v))
		if err == nil || !strings.Contains(err.Error(), `method "B"`) || !strings.Contains(err.Error(), "folder") {
			t.Errorf("%s: %v", v, err)
		}
	}
	// The built-in catalogue's own placeholders all name families.
	for _, d := range methods.Default().All() {
		for _, name := range d.FolderFamilies() {
			if _, ok := embedding.FamilyOf(name); !ok {
				t.Errorf("%s: {folder:%s}", d.Key, name)
			}
		}
	}
}
