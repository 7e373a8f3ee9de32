package config

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestHostDefaults(t *testing.T) {
	h, err := LoadHost(env(nil))
	if err != nil {
		t.Fatal(err)
	}
	want := Host{ToksPerBatch: 4096, ErrorLogTailLines: 120, StepServersMax: 2,
		StepServerIdle: 600 * time.Second, StepServerStart: 600 * time.Second, StepServerAhead: 3}
	if *h != want {
		t.Errorf("defaults %+v, want %+v", *h, want)
	}
}

func TestHostValuesParse(t *testing.T) {
	h, err := LoadHost(env(map[string]string{
		"GPU_EMBED_TOKS_PER_BATCH":         " 2000 ",
		"GPU_EMBED_MAX_BATCH_SEQS":         "8",
		"GPU_EMBED_ERROR_LOG_TAIL_LINES":   "5",
		"GPU_EMBED_SYNTHETIC_DELAY_MS":     "30",
		"GPU_EMBED_JOB_LOG_DIR":            "/logs",
		"GPU_NAME":                         "test-gpu",
		"KINFLOW_STEP_SERVERS_MAX":         "3",
		"KINFLOW_STEP_SERVER_IDLE_SECONDS": "60",
		"KINFLOW_STEP_SERVER_AHEAD":        "4",
		// An empty value counts as unset.
		"KINFLOW_STEP_SERVER_START_SECONDS": " ",
	}))
	if err != nil {
		t.Fatal(err)
	}
	if h.ToksPerBatch != 2000 || h.MaxBatchSeqs != 8 || h.SyntheticDelay != 30*time.Millisecond || h.JobLogDir != "/logs" || h.GPUName != "test-gpu" || h.StepServerAhead != 4 {
		t.Errorf("values %+v", *h)
	}
	if h.ErrorLogTailLines != 20 {
		t.Errorf("tail lines %d, want clamped to 20", h.ErrorLogTailLines)
	}
	if h.StepServersMax != 3 || h.StepServerIdle != time.Minute || h.StepServerStart != 600*time.Second {
		t.Errorf("step servers %+v", *h)
	}
	if h, _ := LoadHost(env(map[string]string{"GPU_EMBED_ERROR_LOG_TAIL_LINES": "99999"})); h.ErrorLogTailLines != 2000 {
		t.Errorf("tail lines %d, want clamped to 2000", h.ErrorLogTailLines)
	}
}

func TestHostInvalidValuesNameTheKey(t *testing.T) {
	cases := map[string]string{
		"GPU_EMBED_TOKS_PER_BATCH":          "lots",
		"GPU_EMBED_MAX_BATCH_SEQS":          "-1",
		"GPU_EMBED_ERROR_LOG_TAIL_LINES":    "x",
		"GPU_EMBED_SYNTHETIC_DELAY_MS":      "-5",
		"KINFLOW_STEP_SERVERS_MAX":          "0",
		"KINFLOW_STEP_SERVER_IDLE_SECONDS":  "soon",
		"KINFLOW_STEP_SERVER_START_SECONDS": "0",
	}
	for key, val := range cases {
		_, err := LoadHost(env(map[string]string{key: val}))
		var ke *KeyError
		if !errors.As(err, &ke) || ke.Key != key {
			t.Errorf("%s=%q: got %v, want a KeyError naming the key", key, val, err)
			continue
		}
		if msg := err.Error(); strings.Contains(msg, "\n") || !strings.Contains(msg, "want") {
			t.Errorf("%s: message %q is not one line saying what is allowed", key, msg)
		}
	}
}

// TestTaskQueueNames pins the derived queue names: recorded histories
// (workflows/testdata) and running workers name them.
func TestTaskQueueNames(t *testing.T) {
	if TrackTaskQueue("kinflow-cpu") != "kinflow-cpu-track" || SmallTaskQueue("kinflow-gpu") != "kinflow-gpu-small" ||
		NoticeTaskQueue("kinflow-cpu") != "kinflow-cpu-notice" {
		t.Error(TrackTaskQueue("kinflow-cpu"), SmallTaskQueue("kinflow-gpu"), NoticeTaskQueue("kinflow-cpu"))
	}
}
