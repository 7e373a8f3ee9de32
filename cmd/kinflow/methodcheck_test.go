package main

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/testenv"
)

// Stand-in programs of the JSON contract: each reads its input and writes
// an answer per row, one of them with a fault.
const (
	checkHeader = `import json, os, sys
a = sys.argv[1:]
job = json.load(open(a[a.index("--input") + 1]))
rows = job["rows"]
out = a[a.index("--output") + 1]
`
	// good answers each row with its sequence length, after checking the
	// seqmap file holds every row's seq_id for its sequence.
	checkGood = checkHeader + `import sqlite3
db = sqlite3.connect(os.path.join(os.environ["MEDIA"], "sequence_info", "seqmap.sqlite3"))
for r in [r for r in rows if "seq_id" in r]:
    got = db.execute("SELECT seq FROM sequences WHERE id = ?", (r["seq_id"],)).fetchone()
    assert got and got[0] == r["sequence"], r["seq_id"]
json.dump([len(r["sequence"]) for r in rows], open(out, "w"))
`
	checkCrash = checkHeader + `sys.stderr.write("loading checkpoint\nRuntimeError: CUDA out of memory\n")
sys.exit(3)
`
	checkShort  = checkHeader + `json.dump([1.0], open(out, "w"))` + "\n"
	checkNone   = checkHeader + `json.dump({"predictions": [None] * len(rows), "invalid_reasons": {"0": "unknown substrate"}}, open(out, "w"))` + "\n"
	checkClass  = checkHeader + `json.dump([9] * len(rows), open(out, "w"))` + "\n"
	checkDelete = checkHeader + `os.remove(os.path.join(os.environ["MEDIA"], "sequence_info", "methodi_prot_t5_residues", "planted.npy"))
json.dump([1] * len(rows), open(out, "w"))
`
)

func TestMethodsCheck(t *testing.T) {
	if err := exec.Command(input.DefaultPython, "-c", "import json, sqlite3").Run(); err != nil {
		testenv.Unavailable(t, "the stand-in programs need %s", input.DefaultPython)
	}
	dir := t.TempDir()
	media := filepath.Join(dir, "media")
	t.Setenv("KINFLOW_DATABASE_URL", "sqlite:"+filepath.Join(dir, "k.db"))
	t.Setenv("KINFLOW_MEDIA_ROOT", media)
	t.Setenv("KINFLOW_PREDICTION_ENGINE", "command")
	t.Setenv("MEDIA", media)
	fam := filepath.Join(media, "sequence_info", "methodi_prot_t5_residues")
	if err := os.MkdirAll(fam, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(fam, "planted.npy"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	script := func(name, body string) string {
		p := filepath.Join(dir, name+".py")
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	py := input.DefaultPython
	// G keeps rows by seq_id; B declares METHODB_TOOLS_PATH from
	// command.paths tools, left unconfigured here; H answers class
	// indices; J's script does not exist; I deletes a file of the family
	// its profile uses.
	file := fmt.Sprintf(`methods:
  - key: G
    command: {python: %s, script: %s, paths: {model_dir: %s, data_dir: %s}}
  - key: B
    supports: [kcat]
    command: {python: %s, script: %s, paths: {model_dir: %s}}
  - key: C
    file_contract: json
    engine: generic
    command: {python: %s, script: %s}
  - key: D
    supports: [kcat]
    file_contract: json
    engine: generic
    command: {python: %s, script: %s}
  - key: E
    command: {python: %s, script: %s}
  - key: H
    command: {python: %s, script: %s}
  - key: J
    command: {python: %s, script: %s}
  - key: I
    command: {python: %s, script: %s, paths: {data_dir: %s}}
`, py, script("good", checkGood), dir, dir,
		py, script("good2", checkGood), dir,
		py, script("crash", checkCrash),
		py, script("short", checkShort),
		py, script("none", checkNone),
		py, script("class", checkClass),
		py, filepath.Join(dir, "absent.py"),
		py, script("delete", checkDelete), dir)
	mf := filepath.Join(dir, "methods.yaml")
	if err := os.WriteFile(mf, []byte(file), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KINFLOW_METHODS_FILE", mf)
	cli := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := run(context.Background(), args, &out, &errb); rc != want {
			t.Fatalf("%v: rc %d, want %d:\n%s%s", args, rc, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	got := cli(0, "methods", "check", "G")
	for _, want := range []string{"ok   G kcat (3 rows, ", "ok   G Km (3 rows, "} {
		if !strings.Contains(got, want) {
			t.Errorf("passing check lacks %q:\n%s", want, got)
		}
	}
	got = cli(1, "methods", "check")
	for _, want := range []string{
		"ok   G kcat",
		"FAIL B kcat: unset variable: METHODB_TOOLS_PATH not set: {tools} has no value",
		"FAIL C kcat: crash: exit status 3; stderr: loading checkpoint | RuntimeError: CUDA out of memory",
		"FAIL D kcat: wrong row count: Method D produced 1 prediction(s) for 3 input(s).",
		"FAIL E Km: every row invalid; first: row 0: unknown substrate",
		"FAIL H kcat: output not in its declared form (class_index): row 0: the method's answer 9 is not one of its 8 class indices (0 to 7)",
		"FAIL J Km: missing file: command.script " + filepath.Join(dir, "absent.py") + " does not exist",
		"FAIL I kcat/Km: shared file deleted: 1 file(s) under sequence_info removed: methodi_prot_t5_residues/planted.npy",
		"10 of 12 method check(s) failed",
	} {
		if !strings.Contains(got, want) {
			t.Errorf("check lacks %q:\n%s", want, got)
		}
	}
	if strings.Contains(got, "ok   B") {
		t.Errorf("B passed with an unset variable:\n%s", got)
	}
	// A key without a command, and an unknown key.
	if got := cli(1, "methods", "check", "A-L"); !strings.Contains(got, "FAIL A-L: no command configured") {
		t.Errorf("A-L:\n%s", got)
	}
	if got := cli(2, "methods", "check", "nope"); !strings.Contains(got, `unknown method "nope" (known: A-H, A-L, B`) {
		t.Errorf("unknown key:\n%s", got)
	}
	// The worker refuses to start, before Temporal (none runs here), on a
	// media root it may write into.
	cli(0, "media", "init")
	t.Setenv("KINFLOW_TEMPORAL_ADDRESS", "127.0.0.1:1")
	if got := cli(1, "worker", "--check"); !strings.Contains(got, "FAIL C kcat: crash") || !strings.Contains(got, "not starting") {
		t.Errorf("worker --check:\n%s", got)
	}
	// A program that outlives its time.
	slow := filepath.Join(dir, "slow.yaml")
	if err := os.WriteFile(slow, fmt.Appendf(nil, "methods:\n  - key: K\n    command: {python: %s, script: %s}\n",
		py, script("slow", "import sys, time\nsys.stderr.write('loading model\\n')\nsys.stderr.flush()\ntime.sleep(60)\n")), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KINFLOW_METHODS_FILE", slow)
	if got := cli(1, "methods", "check", "--timeout", "1s", "K"); !strings.Contains(got, "FAIL K kcat: timeout: the program ran past 1s; stderr: loading model") {
		t.Errorf("timeout:\n%s", got)
	}
	entries, _ := os.ReadDir(filepath.Join(media, "jobs"))
	if len(entries) != 0 {
		t.Errorf("scratch job folders left: %v", entries)
	}
}
