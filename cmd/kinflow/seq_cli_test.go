package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestSeqIDAndPlanCommands(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("KINFLOW_DATABASE_URL", "sqlite:"+filepath.Join(dir, "k.db"))
	t.Setenv("KINFLOW_MEDIA_ROOT", filepath.Join(dir, "media"))
	fa := filepath.Join(dir, "s.fa")
	if err := os.WriteFile(fa, []byte(">a\nMKT\n>b\nAC\nD\n>c\n MKT\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	var out, errb bytes.Buffer
	if rc := run(context.Background(), []string{"seqid", fa}, &out, &errb); rc != 0 {
		t.Fatalf("seqid rc %d: %s", rc, errb.String())
	}
	if got := out.String(); got != "366893d2245f\t3\n00e66854ddc4\t3\n366893d2245f\t3\n" {
		t.Fatalf("seqid output %q", got)
	}
	out.Reset()
	if rc := run(context.Background(), []string{"plan", "--method", "A-L", fa}, &out, &errb); rc != 0 {
		t.Fatalf("plan rc %d: %s", rc, errb.String())
	}
	for _, want := range []string{"sequences 2", "files total 24, cached 0, to compute 24", "step methoda_esmc_layers: 2 sequences"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("plan output lacks %q:\n%s", want, out.String())
		}
	}
	out.Reset()
	if rc := run(context.Background(), []string{"plan", "--method", "B", "--target", "kcat/Km", fa, "--json"}, &out, &errb); rc != 0 {
		t.Fatalf("plan --json rc %d: %s", rc, errb.String())
	}
	var p map[string]any
	if err := json.Unmarshal(out.Bytes(), &p); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"profile", "seq_ids", "seq_id_to_seq", "expected_paths_by_seq", "missing_paths_by_seq", "watch_dirs",
		"step_plans", "total", "cached_already", "need_computation"} {
		if _, ok := p[k]; !ok {
			t.Errorf("plan JSON lacks %s", k)
		}
	}
	if rc := run(context.Background(), []string{"plan", "--method", "C", "--target", "kcat/Km", fa}, &out, &errb); rc != 2 {
		t.Errorf("unsupported target rc %d", rc)
	}
	if rc := run(context.Background(), []string{"seqmap", "import", filepath.Join(dir, "missing")}, &out, &errb); rc != 1 {
		t.Errorf("missing seqmap rc %d", rc)
	}
}
