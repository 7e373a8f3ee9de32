package embedjob

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
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
	MainIfStepServer()
	if os.Getenv(stepProgramEnv) == "1" {
		if len(os.Args) > 1 && os.Args[1] == "--serve" {
			os.Exit(fakeStepServer(os.Args[2:]))
		}
		os.Exit(fakeStepProgram(os.Args[1:]))
	}
	code := m.Run()
	testenv.StopTemporal()
	os.Exit(code)
}

// fakeStepServer is fakeStepProgram as a resident step server
// (docs/gpu-host.md's protocol): it answers ready, then runs each batch line
// as fakeStepProgram would run that manifest, with the same options, and
// answers done (exit 0), oom (exit 75 or KINFLOW_OOM) or error; "crash"
// kills the whole server mid-batch. pids=FILE appends its pid per batch.
func fakeStepServer(opts []string) int {
	if fp := fakeFingerprint(opts); fp != nil {
		b, _ := json.Marshal(map[string]any{"ready": true, "model": "fake", "fingerprint": fp})
		fmt.Println(string(b))
	} else {
		fmt.Println(`{"ready": true, "model": "fake"}`)
	}
	in := bufio.NewScanner(os.Stdin)
	in.Buffer(make([]byte, 1<<20), 64<<20)
	for in.Scan() {
		var m Manifest
		if err := json.Unmarshal(in.Bytes(), &m); err != nil {
			fmt.Printf(`{"batch": 0, "status": "error", "message": %q}`+"\n", err.Error())
			continue
		}
		for _, o := range opts {
			if f, ok := strings.CutPrefix(o, "pids="); ok {
				fh, _ := os.OpenFile(f, os.O_APPEND|os.O_CREATE|os.O_WRONLY, 0o644)
				fmt.Fprintln(fh, os.Getpid())
				fh.Close()
			}
		}
		tmp, _ := os.CreateTemp("", "fake-manifest-*.json")
		_, _ = tmp.Write(in.Bytes())
		tmp.Close()
		code := fakeStepProgram(append([]string{tmp.Name()}, opts...))
		os.Remove(tmp.Name())
		switch code {
		case 0:
			fmt.Printf(`{"batch": %d, "status": "done"}`+"\n", m.Batch)
		case ExitOutOfMemory, 1:
			fmt.Printf(`{"batch": %d, "status": "oom"}`+"\n", m.Batch)
		case 3:
			return 3 // crashed mid-batch
		default:
			fmt.Printf(`{"batch": %d, "status": "error", "message": "exit %d"}`+"\n", m.Batch, code)
		}
	}
	return 0
}

// fakeStepProgram follows the step-program contract of docs/gpu-host.md. Its
// arguments: the manifest path, then options:
//
//	omit=SID        write every file but SID's
//	crash           write the first sequence's files, then exit 3
//	oom-above=N     a batch of more than N sequences: stderr KINFLOW_OOM, exit 1
//	oom-exit-above=N  the same, reported by exit code 75
//	oom-seq=SID     any batch holding SID runs out of memory (exit 75)
//	crash-seq=SID   any batch holding SID crashes (exit 3) before writing
//	malformed=SID   write SID's files as garbage
//	record=FILE     append "id:len,id:len…" per batch to FILE
//	cuda-oom-above=N  PyTorch's "CUDA out of memory" message, exit 1
//	sleep=DURATION  sleep first
//	mutate=FILE     with crash: flip FILE's first byte before crashing
//	weights=FILE    report a fingerprint with FILE's SHA-256 (ready line,
//	                or the KINFLOW_FINGERPRINT_ONLY answer)
func fakeStepProgram(args []string) int {
	if os.Getenv(EnvFingerprintOnly) == "1" {
		// The one-shot fingerprint question (docs/gpu-host.md).
		if fp := fakeFingerprint(args); fp != nil {
			b, _ := json.Marshal(map[string]any{"fingerprint": fp})
			fmt.Println(string(b))
			return 0
		}
		return 2
	}
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
		if s.SeqID == opts["crash-seq"] {
			fmt.Fprintln(os.Stderr, "Traceback (most recent call last): segfault")
			return 3
		}
	}
	fmt.Printf("embedding %d sequences for %s\n", len(m.Seqs), m.StepKey)
	for i, s := range m.Seqs {
		if s.SeqID == opts["omit"] {
			continue
		}
		for _, p := range s.MissingOutputs {
			// The family's own shape: the host checks every file's width.
			shape := []int{8}
			// The family comes from the manifest's folders (the host's
			// naming), as a step program must take it.
			rel := FamilyName(&embedding.Layout{}, filepath.Dir(p))
			if name, ok := m.Folders[rel]; ok {
				rel = name
			}
			if f, ok := embedding.FamilyOf(rel); ok {
				shape = f.Shape(len(s.Sequence))
			}
			t := embedding.Tensor{Shape: shape, Data: make([]float32, embedding.NumElements(shape))}
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
			if f := opts["mutate"]; f != "" {
				// The weights change while the server is down.
				b, _ := os.ReadFile(f)
				if len(b) > 0 {
					b[0] ^= 1
					_ = os.WriteFile(f, b, 0o644)
					// A distinct mtime whatever the clock's granularity
					// (sums are remembered by path, size and mtime).
					later := time.Now().Add(2 * time.Second)
					_ = os.Chtimes(f, later, later)
				}
			}
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

// fakeFingerprint is the fingerprint the fake programs report when given
// weights=FILE: the model "fake" and FILE's SHA-256; nil without one.
func fakeFingerprint(opts []string) map[string]any {
	for _, o := range opts {
		if f, ok := strings.CutPrefix(o, "weights="); ok {
			data, err := os.ReadFile(f)
			if err != nil {
				return nil
			}
			sum := sha256.Sum256(data)
			fp := map[string]any{"model": "fake", "weights": map[string]string{filepath.Base(f): hex.EncodeToString(sum[:])},
				"precision": "fp32", "program": "fake step program", "program_version": "1"}
			if slices.Contains(opts, "claim-synthetic") {
				fp["synthetic"] = true
			}
			return fp
		}
	}
	return nil
}
