package main

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/api"
	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// apiForCLI is the real API (router, SQLite store, media root) on a
// loopback HTTP server, as the client subcommands meet it, without the
// workers: a job is put into the store as the workers leave it.
type apiForCLI struct {
	t   *testing.T
	url string
	cfg *config.Config
	st  *store.Store
	key string
}

func newAPIForCLI(t *testing.T) *apiForCLI {
	t.Helper()
	cfg, err := config.Load(func(string) (string, bool) { return "", false })
	if err != nil {
		t.Fatal(err)
	}
	cfg.MediaRoot = filepath.Join(t.TempDir(), "media")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if _, err := openMediaRoot(cfg, log, true); err != nil {
		t.Fatal(err)
	}
	st := testenv.OpenStore(t, store.SQLite)
	srv := httptest.NewServer(api.New(api.Deps{Config: cfg, Store: st, Log: log}))
	t.Cleanup(srv.Close)
	a := &apiForCLI{t: t, url: srv.URL, cfg: cfg, st: st}
	gen := a.cli("key", "generate")
	if gen.code != 0 {
		t.Fatalf("key generate: exit %d: %s", gen.code, gen.stderr)
	}
	a.key = strings.TrimSpace(gen.stdout)
	return a
}

type cliOut struct {
	stdout, stderr string
	code           int
}

// cli runs one client subcommand against the server, with the key once
// there is one.
func (a *apiForCLI) cli(args ...string) cliOut {
	a.t.Helper()
	args = append(args, "--url", a.url)
	if a.key != "" {
		args = append(args, "--key", a.key)
	}
	var out, errb bytes.Buffer
	code := run(context.Background(), args, &out, &errb)
	return cliOut{out.String(), errb.String(), code}
}

// completedJob stores a finished kcat·B job of the key, submitted at
// submitted and completed took later, whose output.csv is csv.
func (a *apiForCLI) completedJob(id string, submitted time.Time, took time.Duration, csv string) {
	a.t.Helper()
	ctx := context.Background()
	k, err := a.st.ActiveKeyForIP(ctx, "127.0.0.1")
	if err != nil {
		a.t.Fatal(err)
	}
	job := &store.Job{ID: id, KeyID: k.ID, IPAddress: "127.0.0.1", Status: store.JobPending, PredictionType: "kcat",
		Targets: []string{"kcat"}, Methods: map[string]string{"kcat": "B"}, KcatMethod: "B", HandleLongSequences: "truncate",
		RequestedRows: strings.Count(csv, "\n") - 1, SubmittedAt: submitted.UTC(), InputPath: jobfiles.InputRel(id)}
	if err := a.st.CreateJob(ctx, job, nil); err != nil {
		a.t.Fatal(err)
	}
	rel := "jobs/" + id + "/output.csv"
	out := filepath.Join(a.cfg.MediaRoot, filepath.FromSlash(rel))
	if err := os.MkdirAll(filepath.Dir(out), 0o755); err != nil {
		a.t.Fatal(err)
	}
	if err := os.WriteFile(out, []byte(csv), 0o644); err != nil {
		a.t.Fatal(err)
	}
	if _, err := a.st.FinishJob(ctx, id, store.JobCompleted, "", store.Refund{}, false, rel, submitted.Add(took)); err != nil {
		a.t.Fatal(err)
	}
}

// TestMethodsMarksUncertainty: `kinflow methods` marks, in a column of its
// own, each method that gives an uncertainty (from the server's
// /methods/), and says what the mark means; the others are unmarked.
func TestMethodsMarksUncertainty(t *testing.T) {
	a := newAPIForCLI(t)
	r := a.cli("methods")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	marked, unmarked := 0, 0
	line := regexp.MustCompile(`^  (\S+)\s+(±| ) `)
	for _, l := range strings.Split(r.stdout, "\n") {
		m := line.FindStringSubmatch(l)
		if m == nil {
			continue
		}
		gives := strings.Contains(l, "gives uncertainty")
		if (m[2] == "±") != gives {
			t.Errorf("method %s: mark %q but gives uncertainty %v: %q", m[1], m[2], gives, l)
		}
		if gives {
			marked++
		} else {
			unmarked++
		}
	}
	if marked == 0 || unmarked == 0 {
		t.Fatalf("%d marked and %d unmarked method lines; want some of each:\n%s", marked, unmarked, r.stdout)
	}
	if !strings.Contains(r.stdout, "\n±: the method gives an uncertainty") {
		t.Fatalf("no legend for the mark:\n%s", r.stdout)
	}
}

// TestResultOutSaysWhereAndHowMany: `kinflow result JOB -o FILE` says on
// stderr how many rows it wrote and where (CSV and JSON alike, a quoted
// newline in a cell being no row), and leaves stdout empty; without -o
// the result alone goes to stdout.
func TestResultOutSaysWhereAndHowMany(t *testing.T) {
	a := newAPIForCLI(t)
	const id = "resultOutJob0000000001"
	a.completedJob(id, time.Now().Add(-time.Minute), 30*time.Second,
		"Protein Sequence,Substrate,Name,kcat (1/s)\nMKT,CCO,\"two\nlines\",1.5\nMSK,CC,b,2\n")
	dir := t.TempDir()
	for _, c := range []struct {
		file string
		args []string
	}{{"res.csv", nil}, {"res.json", []string{"--json"}}} {
		path := filepath.Join(dir, c.file)
		r := a.cli(append([]string{"result", id, "-o", path}, c.args...)...)
		if r.code != 0 || r.stdout != "" {
			t.Fatalf("%s: exit %d, stdout %q, stderr %s", c.file, r.code, r.stdout, r.stderr)
		}
		if want := "wrote 2 rows to " + path + " ("; !strings.Contains(r.stderr, want) {
			t.Errorf("%s: stderr lacks %q:\n%s", c.file, want, r.stderr)
		}
		if fi, err := os.Stat(path); err != nil || fi.Size() == 0 {
			t.Errorf("%s: %v", c.file, err)
		}
	}
	r := a.cli("result", id)
	if r.code != 0 || !strings.HasPrefix(r.stdout, "Protein Sequence,") || strings.Contains(r.stderr, "wrote") {
		t.Fatalf("result to stdout: exit %d, stdout %q, stderr %s", r.code, r.stdout, r.stderr)
	}
}

// TestJobsListsWholeSeconds: `kinflow jobs` lists times to the second and
// how long each finished job took, rounded to whole seconds; the API's
// times carry microseconds, the list never does.
func TestJobsListsWholeSeconds(t *testing.T) {
	a := newAPIForCLI(t)
	submitted := time.Date(2026, 3, 4, 14, 30, 2, 123456000, time.UTC)
	a.completedJob("jobsListJob00000000001", submitted, time.Minute+53*time.Second+654321*time.Microsecond, "Protein Sequence,Substrate\nMKT,CCO\n")
	r := a.cli("jobs")
	if r.code != 0 {
		t.Fatalf("exit %d: %s", r.code, r.stderr)
	}
	lines := strings.Split(strings.TrimSpace(r.stdout), "\n")
	if len(lines) != 2 || !strings.HasSuffix(strings.Join(strings.Fields(lines[0]), " "), "SUBMITTED COMPLETED TOOK") {
		t.Fatalf("jobs:\n%s", r.stdout)
	}
	f := strings.Fields(lines[1])
	if want := []string{"2026-03-04", "14:30:02Z", "2026-03-04", "14:31:55Z", "1m54s"}; strings.Join(f[len(f)-5:], " ") != strings.Join(want, " ") {
		t.Fatalf("job line %q: want it to end %v", lines[1], want)
	}
	if regexp.MustCompile(`\d\.\d`).MatchString(r.stdout) {
		t.Fatalf("sub-second parts in the list:\n%s", r.stdout)
	}
}

// TestListDuration: rounded to whole seconds, never negative, "-" for a
// time that does not parse.
func TestListDuration(t *testing.T) {
	for _, c := range []struct{ from, to, want string }{
		{"2026-03-04T14:30:02.123456+00:00", "2026-03-04T14:31:56.000001+00:00", "1m54s"},
		{"2026-03-04T14:30:02.1+00:00", "2026-03-04T14:30:02.4+00:00", "0s"},
		{"2026-03-04T14:30:02+00:00", "2026-03-04T16:30:03+02:00", "1s"},
		{"2026-03-04T14:30:02+00:00", "2026-03-04T14:30:01+00:00", "0s"},
		{"soon", "2026-03-04T14:30:01+00:00", "-"},
	} {
		if got := listDuration(c.from, c.to); got != c.want {
			t.Errorf("listDuration(%q, %q) = %q, want %q", c.from, c.to, got, c.want)
		}
	}
}
