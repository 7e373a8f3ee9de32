package embedjob

import (
	"encoding/json"
	"fmt"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/testenv"
)

// stepProgramEnv, set in a child's environment, turns the test binary into a
// fake step program (fakeStepProgram): the tests need real processes with
// exit codes, stderr and files, but no model.
const stepProgramEnv = "KINFLOW_TEST_FAKE_STEP_PROGRAM"

func TestMain(m *testing.M) {
	if os.Getenv(stepProgramEnv) == "1" {
		os.Exit(fakeStepProgram(os.Args[1:]))
	}
	code := m.Run()
	testenv.StopTemporal()
	os.Exit(code)
}

// fakeStepProgram follows the step-program contract of docs/gpu-host.md. Its
// arguments: the manifest path, then options:
//
//	omit=SID        write every file but SID's
//	crash           write the first sequence's files, then exit 3
//	oom-above=N     a batch of more than N sequences: stderr KINFLOW_OOM, exit 1
//	oom-exit-above=N  the same, reported by exit code 75
//	oom-seq=SID     any batch holding SID runs out of memory (exit 75)
//	malformed=SID   write SID's files as garbage
//	record=FILE     append "id:len,id:len…" per batch to FILE
//	cuda-oom-above=N  PyTorch's "CUDA out of memory" message, exit 1
//	sleep=DURATION  sleep first
func fakeStepProgram(args []string) int {
	if len(args) < 1 {
		fmt.Fprintln(os.Stderr, "usage: fake MANIFEST [options]")
		return 2
	}
	data, err := os.ReadFile(args[0])
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	var m Manifest
	if err := json.Unmarshal(data, &m); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 2
	}
	opts := map[string]string{}
	for _, a := range args[1:] {
		k, v, _ := strings.Cut(a, "=")
		opts[k] = v
	}
	if f := opts["record"]; f != "" {
		parts := make([]string, len(m.Seqs))
		for i, s := range m.Seqs {
			parts[i] = s.SeqID + ":" + strconv.Itoa(len(s.Sequence))
		}
		fh, _ := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
		fmt.Fprintln(fh, strings.Join(parts, ","))
		fh.Close()
	}
	above := func(k string) bool {
		v, ok := opts[k]
		n, _ := strconv.Atoi(v)
		return ok && len(m.Seqs) > n
	}
	if v, ok := opts["sleep"]; ok {
		d, _ := time.ParseDuration(v)
		time.Sleep(d)
	}
	if above("oom-above") {
		fmt.Fprintln(os.Stderr, "allocating…")
		fmt.Fprintln(os.Stderr, OOMMarker)
		return 1
	}
	if above("oom-exit-above") {
		return ExitOutOfMemory
	}
	if above("cuda-oom-above") {
		fmt.Fprintln(os.Stderr, "torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB")
		return 1
	}
	for _, s := range m.Seqs {
		if s.SeqID == opts["oom-seq"] {
			return ExitOutOfMemory
		}
	}
	fmt.Printf("embedding %d sequences for %s\n", len(m.Seqs), m.StepKey)
	for i, s := range m.Seqs {
		if s.SeqID == opts["omit"] {
			continue
		}
		for _, p := range s.MissingOutputs {
			t := embedding.Tensor{Shape: []int{8}, Data: make([]float32, 8)}
			body, _ := embedding.EncodeNPY(t)
			if strings.HasSuffix(p, ".pt") {
				body, _ = embedding.EncodePT(t)
			}
			if s.SeqID == opts["malformed"] {
				body = []byte("not an array")
			}
			if err := fsutil.WriteFileAtomic(p, body, 0o644); err != nil {
				fmt.Fprintln(os.Stderr, err)
				return 1
			}
		}
		if _, ok := opts["crash"]; ok && i == 0 {
			fmt.Fprintln(os.Stderr, "Traceback (most recent call last): segfault")
			return 3
		}
	}
	return 0
}

// writeNPY writes a float32 vector of dim zeros as a well-formed artefact.
func writeNPY(path string, dim int) error {
	body, err := embedding.EncodeNPY(embedding.Tensor{Shape: []int{dim}, Data: make([]float32, dim)})
	if err != nil {
		return err
	}
	return fsutil.WriteFileAtomic(path, body, 0o644)
}
