package embedjob

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/converter"
	"go.temporal.io/sdk/temporal"
	"go.temporal.io/sdk/testsuite"

	"github.com/kinflow/kinflow/internal/embedding"
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
	w := Work{MethodKey: "D", Target: "kcat", StepWork: stepWork, SeqIDToSeq: map[string]string{}}
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
	v, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, StepKey: testStep, WorkFile: wf})
	if err != nil {
		t.Fatal(err)
	}
	var res StepResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.StepKey != testStep || res.Requested != 3 || res.Written != 2 || res.Existing != 0 ||
		!slices.Equal(res.MissingSample, []string{"s01: " + f.path("s01")}) || res.MissingSeqs != 1 || res.MissingFiles != 1 {
		t.Fatalf("result %+v", res)
	}
	list, err := os.ReadFile(res.MissingList)
	if err != nil || string(list) != "s01: "+f.path("s01")+": not written by the step program\n" {
		t.Fatalf("missing list %q %v", list, err)
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
	_, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, WorkFile: wf})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != ErrTypeStepFailed || ae.NonRetryable() {
		t.Fatalf("err %v", err)
	}
	if !strings.Contains(ae.Error(), "exit 3") || !strings.Contains(ae.Error(), "s00: "+f.path("s00")) {
		t.Fatalf("message %q", ae.Error())
	}
	var res StepResult
	if err := ae.Details(&res); err != nil || !slices.Equal(res.MissingSample, []string{"s00: " + f.path("s00")}) || res.Written != 1 {
		t.Fatalf("details %+v %v", res, err)
	}
}

func TestRunStepResumesAfterRetry(t *testing.T) {
	f := newFixture(t, 100000)
	// The first attempt wrote s00 before its host died.
	if err := writeNPY(f.path("s00"), 4); err != nil {
		t.Fatal(err)
	}
	env, a := activityEnv(t, f, StepProgress{FilesDone: 1, FilesTotal: 2})
	wf := f.workFile(t, map[string][]string{testStep: {"s00", "s01"}}, map[string]int{"s00": 30, "s01": 40})
	v, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, WorkFile: wf})
	if err != nil {
		t.Fatal(err)
	}
	var res StepResult
	_ = v.Get(&res)
	if res.Existing != 1 || res.Written != 1 || res.MissingFiles != 0 {
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
	for name, in := range map[string]StepInput{
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
		_, err := env.ExecuteActivity(k, StepInput{GPUJobID: jobA, WorkFile: filepath.Join(t.TempDir(), "x.json")})
		if err == nil || strings.Contains(err.Error(), "unable to find") {
			t.Errorf("%s: %v", k, err)
		}
	}
}

// TestLargeFailureStaysUnderThePayloadLimit: a step of 10,000 sequences whose
// program crashes after the first leaves 9,999 files missing; what travels
// through the history (the result in the error's details, and its message)
// stays far under Temporal's 2 MB payload limit, and the full list is in the
// missing-file list.
func TestLargeFailureStaysUnderThePayloadLimit(t *testing.T) {
	f := newFixture(t, 1<<30, "crash")
	env, _ := activityEnv(t, f, nil)
	const n = 10000
	ids := make([]string, n)
	lengths := map[string]int{}
	for i := range ids {
		ids[i] = fmt.Sprintf("q%05d", i)
		lengths[ids[i]] = 20
	}
	wf := f.workFile(t, map[string][]string{testStep: ids}, lengths)
	_, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, WorkFile: wf})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || ae.Type() != ErrTypeStepFailed {
		t.Fatalf("err %v", err)
	}
	var res StepResult
	if err := ae.Details(&res); err != nil {
		t.Fatal(err)
	}
	if res.MissingFiles != n-1 || res.MissingSeqs != n-1 || len(res.MissingSample) != MissingSampleSize {
		t.Fatalf("result counts %d/%d, sample %d", res.MissingFiles, res.MissingSeqs, len(res.MissingSample))
	}
	p, err := converter.GetDefaultDataConverter().ToPayload(res)
	if err != nil {
		t.Fatal(err)
	}
	const limit = 2 << 20
	t.Logf("9,999 missing files: result payload %d bytes, error message %d bytes", p.Size(), len(ae.Error()))
	if size := p.Size() + len(ae.Error()); size > limit/100 {
		t.Fatalf("result and message take %d bytes; want under 1%% of the %d-byte payload limit", size, limit)
	}
	list, err := os.ReadFile(res.MissingList)
	if err != nil || strings.Count(string(list), "\n") != n-1 {
		t.Fatalf("missing list has %d lines, %v", strings.Count(string(list), "\n"), err)
	}
}

// TestRunStepRunsOnlyItsShard: shard 1 of 2 computes the second half of the
// step's seq ids in sorted order, and nothing else.
func TestRunStepRunsOnlyItsShard(t *testing.T) {
	f := newFixture(t, 100000)
	env, _ := activityEnv(t, f, nil)
	wf := f.workFile(t, map[string][]string{testStep: {"s03", "s01", "s00", "s02"}}, map[string]int{"s00": 30, "s01": 40, "s02": 50, "s03": 60})
	v, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, WorkFile: wf, Shard: 1, Shards: 2})
	if err != nil {
		t.Fatal(err)
	}
	var res StepResult
	if err := v.Get(&res); err != nil || res.Requested != 2 || res.Written != 2 {
		t.Fatalf("result %+v %v", res, err)
	}
	for id, want := range map[string]bool{"s00": false, "s01": false, "s02": true, "s03": true} {
		if _, err := os.Stat(f.path(id)); (err == nil) != want {
			t.Errorf("%s written: %v, want %v", id, err == nil, want)
		}
	}
	if _, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, WorkFile: wf, Shard: 2, Shards: 2}); err == nil {
		t.Fatal("shard 2 of 2 accepted")
	}
}

// TestRunStepHeartbeatsOnlyPastTheGrace: a step that ends within
// heartbeatGrace sends no heartbeat (each was a Temporal round trip and a
// workflow update per small job); a longer one sends its batches' progress
// once past the grace.
func TestRunStepHeartbeatsOnlyPastTheGrace(t *testing.T) {
	run := func(t *testing.T, fakeArgs []string, budget int, lengths map[string]int) (beats []StepProgress) {
		f := newFixture(t, budget, fakeArgs...)
		env, _ := activityEnv(t, f, nil)
		var mu sync.Mutex
		env.SetOnActivityHeartbeatListener(func(_ *activity.Info, d converter.EncodedValues) {
			var p StepProgress
			if d.HasValues() {
				_ = d.Get(&p)
			}
			mu.Lock()
			beats = append(beats, p)
			mu.Unlock()
		})
		ids := slices.Sorted(maps.Keys(lengths))
		wf := f.workFile(t, map[string][]string{testStep: ids}, lengths)
		if _, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, StepKey: testStep, WorkFile: wf}); err != nil {
			t.Fatal(err)
		}
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(beats)
	}
	t.Run("small", func(t *testing.T) {
		if beats := run(t, nil, 100000, map[string]int{"s00": 30, "s01": 40}); len(beats) != 0 {
			t.Fatalf("a step of a few milliseconds sent %d heartbeats: %+v", len(beats), beats)
		}
	})
	t.Run("long", func(t *testing.T) {
		// One sequence a batch, each batch 700 ms: reports at 0, 0.7, 1.4
		// and 2.1 s; the last two are past the grace.
		beats := run(t, []string{"sleep=700ms"}, 40, map[string]int{"s00": 30, "s01": 31, "s02": 32})
		if len(beats) == 0 {
			t.Fatal("a step of two seconds sent no heartbeat")
		}
		if first := beats[0]; first.FilesDone < 2 || first.FilesTotal != 3 {
			t.Fatalf("first heartbeat %+v: want the progress after the grace (2 or 3 of 3 files)", first)
		}
	})
}

// TestRunStepWritesUnderTheReferenceFolders: a host with
// KINFLOW_CACHE_FOLDERS=reference has its step program write method D's
// vectors to sequence_info/esm1b_turnup/ (the program takes each path's
// family from the manifest's folders: the stand-in sizes its file from it,
// and a file of the wrong width would be removed), and refuses, without a
// retry, a step submitted under the kinflow naming.
func TestRunStepWritesUnderTheReferenceFolders(t *testing.T) {
	f := newFixture(t, 100000)
	f.layout.L.Folders = embedding.FoldersReference
	env, a := activityEnv(t, f, nil)
	a.Engine.Layout = f.layout.L
	wf := f.workFile(t, map[string][]string{testStep: {"s00", "s01"}}, map[string]int{"s00": 30, "s01": 40})
	v, err := env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, StepKey: testStep, WorkFile: wf, CacheFolders: "reference"})
	if err != nil {
		t.Fatal(err)
	}
	var res StepResult
	if err := v.Get(&res); err != nil {
		t.Fatal(err)
	}
	if res.Written != 2 || res.MissingFiles != 0 {
		t.Fatalf("result %+v", res)
	}
	for _, id := range []string{"s00", "s01"} {
		if _, err := os.Stat(filepath.Join(f.media, "sequence_info", "esm1b_turnup", id+".npy")); err != nil {
			t.Errorf("%s: not under esm1b_turnup: %v", id, err)
		}
	}
	if _, err := os.Stat(filepath.Join(f.media, "sequence_info", "esm1b_methodd")); !os.IsNotExist(err) {
		t.Errorf("the kinflow folder was written: %v", err)
	}
	recs := embedding.ReadFileRecords(filepath.Join(f.media, "sequence_info", "esm1b_turnup"))
	if len(recs) != 2 {
		t.Errorf("records under esm1b_turnup: %v", recs)
	}
	_, err = env.ExecuteActivity(testStep, StepInput{GPUJobID: jobA, StepKey: testStep, WorkFile: wf})
	var ae *temporal.ApplicationError
	if !errors.As(err, &ae) || !ae.NonRetryable() || !strings.Contains(ae.Error(), "cache folder naming mismatch") ||
		!strings.Contains(ae.Error(), "KINFLOW_CACHE_FOLDERS=kinflow") || !strings.Contains(ae.Error(), "KINFLOW_CACHE_FOLDERS=reference") {
		t.Fatalf("a kinflow-named step on a reference host: %v", err)
	}
}
