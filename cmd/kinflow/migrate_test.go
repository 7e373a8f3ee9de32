package main

import (
	"bytes"
	"context"
	"path/filepath"
	"strings"
	"testing"

	"fmt"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/workflows"
	"time"
)

// TestMigrateCommand: `kinflow migrate` prints the id of each migration it
// applied, then the up-to-date line; a second run prints only that line. On
// a schema whose oldest_reader this binary does not know, migrate and a
// role (the api) exit 1 with one line naming the migration.
func TestMigrateCommand(t *testing.T) {
	url := "sqlite:" + filepath.Join(t.TempDir(), "k.db")
	t.Setenv("KINFLOW_DATABASE_URL", url)
	ctx := context.Background()
	cli := func(want int, args ...string) (string, string) { t.Helper(); return runWant(t, want, args...) }
	out, _ := cli(0, "migrate")
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) < 3 || lines[0] != "applied 0001_initial" || !strings.Contains(out, "applied 0014_schema_compat\n") ||
		lines[len(lines)-1] != "sqlite database is up to date" {
		t.Fatalf("first migrate:\n%s", out)
	}
	for _, l := range lines[:len(lines)-1] {
		if !strings.HasPrefix(l, "applied 00") {
			t.Fatalf("first migrate, line %q:\n%s", l, out)
		}
	}
	if out, _ := cli(0, "migrate"); out != "sqlite database is up to date\n" {
		t.Fatalf("second migrate:\n%s", out)
	}

	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	const id = "9999_from_a_newer_release"
	if err := st.DB.Exec("INSERT INTO migrations (id) VALUES (?)", id).Error; err != nil {
		t.Fatal(err)
	}
	if out, _ := cli(0, "migrate"); out != "sqlite database is up to date\n" {
		t.Fatalf("migrate with a newer additive migration recorded:\n%s", out)
	}
	if err := st.DB.Exec("UPDATE schema_compat SET oldest_reader = ? WHERE id = 1", id).Error; err != nil {
		t.Fatal(err)
	}
	want := "database schema is newer than this kinflow: migration " + id + " needs a newer binary (run the release that applied it, or newer)\n"
	for _, cmd := range []string{"migrate", "api"} {
		out, errb := cli(1, cmd)
		if out != "" || errb != "kinflow "+cmd+": "+want {
			t.Fatalf("%s on a schema too new: stdout %q, stderr %q", cmd, out, errb)
		}
	}
}

// TestOlderWorkerRefusedAfterANewerOne: once a newer release's workers ran
// here (a higher workflow level recorded), this release's worker exits 1
// with one line naming both levels, before it takes any work;
// `migrate --accept-older-workflows` lets it start only once no job is
// unfinished.
func TestOlderWorkerRefusedAfterANewerOne(t *testing.T) {
	dir := t.TempDir()
	url := "sqlite:" + filepath.Join(dir, "k.db")
	t.Setenv("KINFLOW_DATABASE_URL", url)
	t.Setenv("KINFLOW_MEDIA_ROOT", filepath.Join(dir, "media"))
	t.Setenv("KINFLOW_TEMPORAL_ADDRESS", "127.0.0.1:1") // never reached
	ctx := context.Background()
	cli := func(want int, args ...string) (string, string) { t.Helper(); return runWant(t, want, args...) }
	cli(0, "migrate")
	st, err := store.Open(ctx, url)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	newer := workflows.Level() + 1
	st.DB.Exec("UPDATE schema_compat SET workflow_level = ?", newer)
	_, errb := cli(1, "worker")
	want := fmt.Sprintf("kinflow worker: jobs begun by a newer kinflow (workflow level %d) may still be running, and this kinflow's workflows (level %d) cannot go on with them: run the newer release, or once no job is unfinished run `kinflow migrate --accept-older-workflows`\n", newer, workflows.Level())
	if !strings.HasSuffix(errb, want) {
		t.Fatalf("worker after a newer one: %q", errb)
	}
	st.DB.Create(&store.Job{ID: "running", Status: store.JobPending, SubmittedAt: time.Now().UTC()})
	if _, errb := cli(1, "migrate", "--accept-older-workflows"); !strings.Contains(errb, "1 jobs are unfinished") {
		t.Fatalf("accept with a job pending: %q", errb)
	}
	st.DB.Model(&store.Job{}).Where("id = ?", "running").Update("status", store.JobCompleted)
	if out, _ := cli(0, "migrate", "--accept-older-workflows"); !strings.Contains(out, fmt.Sprintf("workflow level %d accepted (was %d)", workflows.Level(), newer)) {
		t.Fatalf("accept: %q", out)
	}
}

// runWant runs the kinflow command line args and requires exit code want;
// it returns stdout and stderr.
func runWant(t *testing.T, want int, args ...string) (string, string) {
	t.Helper()
	var out, errb bytes.Buffer
	if rc := run(context.Background(), args, &out, &errb); rc != want {
		t.Fatalf("%v: rc %d, want %d: %s%s", args, rc, want, out.String(), errb.String())
	}
	return out.String(), errb.String()
}
