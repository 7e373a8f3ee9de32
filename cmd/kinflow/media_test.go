package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/mediaroot"
)

// TestMediaCommands: `kinflow media show` names a missing root, a fresh one
// and an unmarked one with data (exit 1, writing nothing); `kinflow media
// init` marks the unmarked one, after which show prints its id and a
// second init is refused; init creates no missing root.
func TestMediaCommands(t *testing.T) {
	media := filepath.Join(t.TempDir(), "media")
	t.Setenv("KINFLOW_MEDIA_ROOT", media)
	cli := func(want int, args ...string) string {
		t.Helper()
		var out, errb bytes.Buffer
		if rc := run(context.Background(), append([]string{"media"}, args...), &out, &errb); rc != want {
			t.Fatalf("media %v: rc %d, want %d: %s%s", args, rc, want, out.String(), errb.String())
		}
		return out.String() + errb.String()
	}
	cli(1, "show")
	cli(1, "init")
	if _, err := os.Stat(media); !os.IsNotExist(err) {
		t.Fatalf("init created the missing root: %v", err)
	}
	if err := os.Mkdir(media, 0o755); err != nil {
		t.Fatal(err)
	}
	if out := cli(0, "show"); !strings.Contains(out, "fresh") {
		t.Fatalf("show of a fresh root: %s", out)
	}
	if err := os.Mkdir(filepath.Join(media, "jobs"), 0o755); err != nil {
		t.Fatal(err)
	}
	if out := cli(1, "show"); !strings.Contains(out, "kinflow media init") {
		t.Fatalf("show of an unmarked root: %s", out)
	}
	if _, err := os.Stat(filepath.Join(media, mediaroot.MarkerName)); !os.IsNotExist(err) {
		t.Fatalf("show wrote a marker: %v", err)
	}
	out := cli(0, "init")
	m, err := mediaroot.ReadMarker(media)
	if err != nil || !strings.Contains(out, m.ID) {
		t.Fatalf("init: %s, marker %+v %v", out, m, err)
	}
	if out := cli(0, "show"); !strings.Contains(out, m.ID) {
		t.Fatalf("show after init: %s", out)
	}
	if out := cli(1, "init"); !strings.Contains(out, "already marked") {
		t.Fatalf("second init: %s", out)
	}
	cli(2, "nope")
}
