package embedjob

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/stepserver"
)

// residentFixture is a fixture whose step runs on a resident fake server
// (fakeStepServer) through a real pool; pids records the server's pid per
// batch.
func residentFixture(t *testing.T, budget int, opts ...string) (*fixture, *Engine, string) {
	t.Helper()
	f := newFixture(t, budget)
	pids := f.record + ".pids"
	f.settings.Servers = map[string][]string{testStep: append([]string{os.Args[0], "--serve", "record=" + f.record, "pids=" + pids}, opts...)}
	pool := stepserver.NewPool(stepserver.Options{Max: 1})
	t.Cleanup(pool.Close)
	e := f.engine()
	e.Runner = &CommandRunner{Settings: f.settings, MediaRoot: f.media, Pool: pool}
	return f, e, pids
}

func readPIDs(t *testing.T, path string) []string {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return strings.Fields(string(data))
}

// TestResidentServerServesEveryBatchAndJob: one server process runs every
// batch of a step, and the next job's step too (the model stays loaded).
func TestResidentServerServesEveryBatchAndJob(t *testing.T) {
	f, e, pids := residentFixture(t, 150)
	items := f.items(t, 60, 50, 40, 30, 20)
	out, err := e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: items[:3]})
	if err != nil || out.Failure != nil || out.Written != 3 || out.Batches < 2 {
		t.Fatalf("first job: %+v %v", out, err)
	}
	out, err = e.RunStep(context.Background(), StepRequest{JobID: strings.Repeat("b", 32), StepKey: testStep, Seqs: items[3:]})
	if err != nil || out.Failure != nil || out.Written != 2 {
		t.Fatalf("second job: %+v %v", out, err)
	}
	got := readPIDs(t, pids)
	if len(got) < 3 || len(slices.Compact(slices.Clone(got))) != 1 {
		t.Fatalf("batches ran in processes %v, want one resident server", got)
	}
	for _, it := range items {
		if err := embedding.CheckFile(f.path(it.SeqID)); err != nil {
			t.Fatal(err)
		}
	}
}

// TestResidentOOMSplitsAndStaysUp: an oom answer splits the batch down to
// what fits, and the server is never restarted for it.
func TestResidentOOMSplitsAndStaysUp(t *testing.T) {
	f, e, pids := residentFixture(t, 100000, "oom-above=2")
	out, err := e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: f.items(t, 70, 60, 50, 40, 30, 20, 10)})
	if err != nil || out.Failure != nil || out.Written != 7 || len(out.Missing) != 0 {
		t.Fatalf("%+v %v", out, err)
	}
	b := f.batches(t)
	if len(b[0]) != 7 || len(b) < 5 {
		t.Fatalf("batches %v: want the 7-sequence batch split down to twos", b)
	}
	if got := readPIDs(t, pids); len(slices.Compact(slices.Clone(got))) != 1 {
		t.Fatalf("server restarted on oom: %v", got)
	}
}

// TestResidentCrashFailsTheBatchAndRestarts: a server that dies mid-batch
// fails that batch (its committed files are kept, the rest reported); the
// next batch starts a new server.
func TestResidentCrashFailsTheBatchAndRestarts(t *testing.T) {
	f, e, pids := residentFixture(t, 100000, "crash")
	items := f.items(t, 30, 20)
	out, err := e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: items})
	if err != nil || out.Failure == nil || out.Written != 1 || len(out.Missing) != 1 {
		t.Fatalf("%+v %v", out, err)
	}
	if !strings.Contains(out.Failure.Error(), "step server") {
		t.Fatalf("failure %v", out.Failure)
	}
	out, err = e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: items})
	if err != nil || out.Existing != 1 {
		t.Fatalf("second run %+v %v", out, err)
	}
	if got := readPIDs(t, pids); len(got) != 2 || got[0] == got[1] {
		t.Fatalf("pids %v: want a fresh server after the crash", got)
	}
}

// TestResidentSendAheadCrashRetriesBystanders: with three batches in
// flight, a server that dies of one of them fails all three; each gets one
// more try (the server cannot tell which killed it), the culprit fails on
// its second and is reported missing, every other sequence is written, and
// the step runs on through fresh servers.
func TestResidentSendAheadCrashRetriesBystanders(t *testing.T) {
	// Each batch sleeps first, so the next two are sent before it answers.
	f, e, _ := residentFixture(t, 40, "crash-seq=s01", "sleep=150ms")
	e.Settings.Pool.Ahead = 3
	e.Runner.(*CommandRunner).Pool = stepserver.NewPool(stepserver.Options{Max: 1, Ahead: 3})
	t.Cleanup(e.Runner.(*CommandRunner).Pool.Close)
	out, err := e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: f.items(t, 30, 30, 30, 30, 30, 30)})
	if err != nil || out.Failure == nil || out.Written != 5 || !slices.Equal(missingIDs(out.Missing), []string{"s01"}) {
		t.Fatalf("%+v %v", out, err)
	}
	var se *stepserver.ServerError
	if !errors.As(out.Failure, &se) || se.Interrupted {
		t.Fatalf("failure %v: want the culprit's second, lone crash", out.Failure)
	}
	tries := 0
	for _, b := range f.batches(t) {
		if len(b) == 1 && strings.HasPrefix(b[0], "s01:") {
			tries++
		}
	}
	if tries != 2 {
		t.Fatalf("s01 ran %d times, want 2 (one retry): %v", tries, f.batches(t))
	}
}

// TestResidentMissingProgramIsAConfigError: a server that cannot start at
// all is the host's configuration, not worth a retry.
func TestResidentMissingProgramIsAConfigError(t *testing.T) {
	f, e, _ := residentFixture(t, 100000)
	f.settings.Servers[testStep] = []string{"/nonexistent/step-server"}
	out, _ := e.RunStep(context.Background(), StepRequest{JobID: jobA, StepKey: testStep, Seqs: f.items(t, 10)})
	var ce *ConfigError
	if out.Failure == nil || !errorsAs(out.Failure, &ce) {
		t.Fatalf("failure %v", out.Failure)
	}
}

func TestServerTemplateRejectsBatchPlaceholders(t *testing.T) {
	file := map[string]string{EnvStepServerPrefix + "METHODD_ESM1B": "/opt/esm1b --manifest {manifest_file}"}
	if _, err := LoadSettings(func(k string) (string, bool) { v, ok := file[k]; return v, ok }, file, t.TempDir()); err == nil || !strings.Contains(err.Error(), "{manifest_file}") {
		t.Fatalf("err %v", err)
	}
	file[EnvStepServerPrefix+"METHODD_ESM1B"] = "/opt/esm1b --step {step_key} --media {media_root}"
	st, err := LoadSettings(func(k string) (string, bool) { v, ok := file[k]; return v, ok }, file, t.TempDir())
	if err != nil || !slices.Equal(st.Servers["methodd_esm1b"], []string{"/opt/esm1b", "--step", "{step_key}", "--media", "{media_root}"}) {
		t.Fatalf("%v %v", st, err)
	}
}

func errorsAs(err error, target any) bool { return errors.As(err, target) }
