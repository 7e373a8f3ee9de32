package gpuworker

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/kinflow/kinflow/internal/gpujob"
)

// activityEnv registers a's RunStep under testStep (and every other key).
func activityEnv(t *testing.T, f *fixture, heartbeat any) (*testsuite.TestActivityEnvironment, *Activities) {
	t.Helper()
	var ts testsuite.WorkflowTestSuite
	ts.SetLogger(nil)
	env := ts.NewTestActivityEnvironment()
	a := &Activities{Engine: f.engine(), Layout: f.layout, Logs: &JobLogs{Dir: f.settings.JobLogDir},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Known: NewRegistry()}
	a.Register(env)
	if heartbeat != nil {
		env.SetHeartbeatDetails(heartbeat)
	}
	return env, a
}

func (f *fixture) workFile(t *testing.T, stepWork map[string][]string, lengths map[string]int) string {
	t.Helper()
	w := gpujob.Work{MethodKey: "D", Target: "kcat", StepWork: stepWork, SeqIDToSeq: map[string]string{}}
	i := 0
	for id, n := range lengths {
		w.SeqIDToSeq[id] = seqOfLen(n, i)
		i++
	}
	p := filepath.Join(t.TempDir(), "work.json")
	data, _ := json.Marshal(w)
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

var jobA = strings.Repeat("a", 32)

func TestRunStepReportsMissingFiles(t *testing.T) {
	f := newFixture(t, 100000, "omit=s01")
	env, a := activityEnv(t, f, nil)
	wf := f.workFile(t, map[string][]string{testStep: {"s00", "s01", "s02"}}, map[string]int{"s00": 30, "s01": 40, "s02": 50})
	v, err := env.ExecuteActivity(testStep, gpujob.StepInput{GPUJobID: jobA, StepKey: testStep, WorkFile: wf})
	if err != nil {
		t.Fatal(err)
	}
	var res gpujob.StepResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.StepKey != testStep || res.Requested != 3 || res.Written != 2 || res.Existing != 0 ||
		!slices.Equal(res.Missing, []string{"s01: " + f.path("s01")}) {
		t.Fatalf("result %+v", res)
	}
	if !slices.Contains(a.Known.List(), jobA) {
		t.Fatal("the job is not known to the host")
	}
	lines, _ := a.Logs.Tail(jobA, 100)
	log := strings.Join(lines, "\n")
	for _, m := range []string{"JOB_START job_id=" + jobA, "STEP_START job_id=" + jobA + " step=" + testStep + " seq_count=3", "$ ", "[stdout] embedding 3 sequences",
		"STEP_MISSING job_id=" + jobA + " step=" + testStep + " seq_id=s01", "STEP_DONE job_id=" + jobA + " step=" + testStep + " written=2 existing=0 missing=1"} {
		if !strings.Contains(log, m) {
			t.Errorf("log lacks %q:\n%s", m, log)
		}
	}
}

func TestRunStepCrashIsRetryableWithDetails(t *testing.T) {
	f := newFixture(t, 100000, "crash")
	env, _ := activityEnv(t, f, nil)
	wf := f.workFile(t, map[string][]string{testStep: {"s00", "s01"}}, map[string]int{"s00": 30, "s01": 40})
	_, err := env.ExecuteActivity(testStep, gpujob.StepInput{GPUJobID: jobA, WorkFile: wf})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != ErrTypeStepFailed || ae.NonRetryable() {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(ae.Error(), "exit 3") || !strings.Contains(ae.Error(), "s00: "+f.path("s00")) {
		t.Fatalf("message %q", ae.Error())
	}
	var res gpujob.StepResult
	if err := ae.Details(&res); err != nil || !slices.Equal(res.Missing, []string{"s00: " + f.path("s00")}) || res.Written != 1 {
		t.Fatalf("details %+v %v", res, err)
	}
}

func TestRunStepResumesAfterRetry(t *testing.T) {
	f := newFixture(t, 100000)
	// The first attempt wrote s00 before its host died.
	if err := writeAtomic(f.path("s00"), syntheticNPY("x", 0, 4)); err != nil {
		t.Fatal(err)
	}
	env, a := activityEnv(t, f, StepProgress{FilesDone: 1, FilesTotal: 2})
	wf := f.workFile(t, map[string][]string{testStep: {"s00", "s01"}}, map[string]int{"s00": 30, "s01": 40})
	v, err := env.ExecuteActivity(testStep, gpujob.StepInput{GPUJobID: jobA, WorkFile: wf})
	if err != nil {
		t.Fatal(err)
	}
	var res gpujob.StepResult
	_ = v.Get(&res)
	if res.Existing != 1 || res.Written != 1 || len(res.Missing) != 0 {
		t.Fatalf("result %+v", res)
	}
	if b := f.batches(t); len(b) != 1 || !slices.Equal(b[0], []string{"s01:40"}) {
		t.Fatalf("the retry redid written files: %v", b)
	}
	lines, _ := a.Logs.Tail(jobA, 100)
	if !strings.Contains(strings.Join(lines, "\n"), "STEP_RESUME job_id="+jobA+" step="+testStep) {
		t.Fatalf("log %v", lines)
	}
}

func TestRunStepRejectsBadInput(t *testing.T) {
	f := newFixture(t, 100000)
	env, _ := activityEnv(t, f, nil)
	wf := f.workFile(t, map[string][]string{testStep: {"s00", "nosequence"}}, map[string]int{"s00": 30})
	for name, in := range map[string]gpujob.StepInput{
		"no sequence":                    {GPUJobID: jobA, WorkFile: wf},
		"no work file":                   {GPUJobID: jobA, WorkFile: filepath.Join(t.TempDir(), "absent.json")},
		"bad job id":                     {GPUJobID: "../x", WorkFile: wf},
		"other step":                     {GPUJobID: jobA, StepKey: "prot_t5_mean", WorkFile: wf},
		"deprecated key of another step": {GPUJobID: jobA, StepKey: "methoda_bindsites", WorkFile: wf},
	} {
		_, err := env.ExecuteActivity(testStep, in)
		var ae *temporal.ApplicationError
		if !errors.As(err, &ae) || ae.Type() != ErrTypeInvalidStepInput || !ae.NonRetryable() {
			t.Errorf("%s: %v", name, err)
		}
	}
}

func TestRegisterCoversEveryActiveStep(t *testing.T) {
	f := newFixture(t, 100000)
	env, _ := activityEnv(t, f, nil)
	for _, k := range ActiveSteps {
		// Every key is registered: an unregistered one fails with "unable to
		// find activityType" rather than a step error.
		_, err := env.ExecuteActivity(k, gpujob.StepInput{GPUJobID: jobA, WorkFile: filepath.Join(t.TempDir(), "x.json")})
		if err == nil || strings.Contains(err.Error(), "unable to find") {
			t.Errorf("%s: %v", k, err)
		}
	}
}
