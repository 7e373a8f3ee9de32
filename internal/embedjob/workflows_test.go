package embedjob

import (
	"context"
	"slices"
	"sync"
	"testing"

	"go.temporal.io/sdk/activity"
	"go.temporal.io/sdk/testsuite"
)

// TestEmbedJobShardsLargeSteps: a step over ShardSeqs sequences runs as
// ShardCount shards, each its own activity with its shard number; steps keep
// their order (every shard of the first ends before the second starts); the
// status sums the shards.
func TestEmbedJobShardsLargeSteps(t *testing.T) {
	var ts testsuite.WorkflowTestSuite
	env := ts.NewTestWorkflowEnvironment()
	env.RegisterWorkflow(EmbedJob)
	var mu sync.Mutex
	var calls []StepInput
	fake := func(ctx context.Context, in StepInput) (StepResult, error) {
		mu.Lock()
		defer mu.Unlock()
		calls = append(calls, in)
		n := 1200 / max(in.Shards, 1)
		if in.StepKey == "methodh_esm2_last_mean" {
			n = 300
		}
		return StepResult{StepKey: in.StepKey, Requested: n, Written: n - 1, Existing: 1}, nil
	}
	for _, k := range []string{"methoda_t5_full", "methodh_esm2_last_mean"} {
		env.RegisterActivityWithOptions(fake, activity.RegisterOptions{Name: k})
	}
	in := Input{GPUJobID: "j", Steps: []string{"methoda_t5_full", "methodh_esm2_last_mean"},
		StepCounts: map[string]int{"methoda_t5_full": 1200, "methodh_esm2_last_mean": 300}, ShardSeqs: 500, WorkFile: "/w"}
	env.ExecuteWorkflow(EmbedJob, in)
	if err := env.GetWorkflowError(); err != nil {
		t.Fatal(err)
	}
	var st Status
	if err := env.GetWorkflowResult(&st); err != nil {
		t.Fatal(err)
	}
	if len(calls) != 4 {
		t.Fatalf("%d activity calls, want 3 shards + 1: %+v", len(calls), calls)
	}
	var shards []int
	for _, c := range calls[:3] {
		if c.StepKey != "methoda_t5_full" || c.Shards != 3 {
			t.Fatalf("call %+v", c)
		}
		shards = append(shards, c.Shard)
	}
	slices.Sort(shards)
	if !slices.Equal(shards, []int{0, 1, 2}) || calls[3].StepKey != "methodh_esm2_last_mean" || calls[3].Shards != 0 {
		t.Fatalf("calls %+v", calls)
	}
	if st.State != "done" || st.Steps["methoda_t5_full"] != 1200 || st.Written["methoda_t5_full"] != 1197 || st.Steps["methodh_esm2_last_mean"] != 300 {
		t.Fatalf("status %+v", st)
	}
}

func TestShardOfCoversEveryIDOnce(t *testing.T) {
	for _, total := range []int{0, 1, 7, 500, 501, 1999} {
		ids := make([]int, total)
		for i := range ids {
			ids[i] = i
		}
		n := ShardCount(total, 500)
		var got []int
		for i := 0; i < n; i++ {
			s := ShardOf(ids, i, n)
			if len(s) > 500 {
				t.Fatalf("total %d: shard %d holds %d", total, i, len(s))
			}
			got = append(got, s...)
		}
		if !slices.Equal(got, ids) {
			t.Fatalf("total %d: shards cover %d ids", total, len(got))
		}
	}
}

// TestSmallLaneOnly: a job runs inline only when every step fits the small
// lane whole.
func TestSmallLaneOnly(t *testing.T) {
	base := Input{GPUTaskQueue: "gpu", SmallStepSeqs: 32, Steps: []string{"a", "b"}, StepCounts: map[string]int{"a": 3, "b": 32}}
	cases := []struct {
		name string
		edit func(*Input)
		want bool
	}{
		{"every step small", func(*Input) {}, true},
		{"one step above the lane's size", func(in *Input) { in.StepCounts = map[string]int{"a": 3, "b": 33} }, false},
		{"a step of several shards", func(in *Input) { in.ShardSeqs = 16 }, false},
		{"the lane off", func(in *Input) { in.SmallStepSeqs = 0 }, false},
		{"no GPU queue", func(in *Input) { in.GPUTaskQueue = "" }, false},
		{"no steps", func(in *Input) { in.Steps = nil }, false},
	}
	for _, c := range cases {
		in := base
		c.edit(&in)
		if got := SmallLaneOnly(in); got != c.want {
			t.Errorf("%s: %v, want %v", c.name, got, c.want)
		}
	}
}
