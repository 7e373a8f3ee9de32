package embedding

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/provenance"
)

// killAtEnv, in a child's environment, makes the test binary run the
// synthetic writer on KINFLOW_TEST_MEDIA and SIGKILL itself at the N-th
// point of the write protocol.
const killAtEnv = "KINFLOW_TEST_KILL_AT"

func TestMain(m *testing.M) {
	if at := os.Getenv(killAtEnv); at != "" {
		os.Exit(killedWriter(at))
	}
	code := m.Run()
	for _, f := range afterTests {
		f()
	}
	os.Exit(code)
}

// killSeqs are the sequences of the kill test.
var killSeqs = []string{"MKTAYIAKQRQISFVK", "MSTNPKPQRKTKRNTN", "MGSSHHHHHHSSGLVP"}

func killSeqMap() ([]string, map[string]string) {
	m := map[string]string{}
	var ids []string
	for _, s := range killSeqs {
		ids = append(ids, BaseSeqID(s))
		m[BaseSeqID(s)] = s
	}
	return ids, m
}

func killedWriter(at string) int {
	n, err := strconv.Atoi(at)
	if err != nil {
		return 2
	}
	seen := 0
	protocolPoint = func(string) {
		seen++
		if seen == n {
			_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
			select {}
		}
	}
	l, err := NewLayout(os.Getenv("KINFLOW_TEST_MEDIA"), "", "", "")
	if err != nil {
		return 2
	}
	ids, m := killSeqMap()
	if _, err := ComputeStep(context.Background(), l, methods.StepMethodAESM2Layers, ids, m, nil); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	return 0
}

// TestKilledSyntheticWriterNeverPassesAsReal kills the synthetic writer
// (a real process, SIGKILL) at every point of its write protocol in turn,
// in a family whose record belongs to a real model and holds one real
// file. After each kill, a real engine's plan counts only the real file as
// cached, and every other file in the family folders is listed as
// synthetic: no killed writer leaves a file that reads as real.
func TestKilledSyntheticWriterNeverPassesAsReal(t *testing.T) {
	ids, m := killSeqMap()
	real := provenance.Fingerprint{Model: "esm2_t33_650M_UR50D", Weights: map[string]string{"w.pt": "00ff"}}
	kills := 0
	for n := 1; ; n++ {
		media := filepath.Join(t.TempDir(), "media")
		l, err := NewLayout(media, "", "", "")
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := l.Step(methods.StepMethodAESM2Layers)
		realFam := spec.Families[0]
		dir := l.FamilyDir(realFam)
		if _, err := provenance.Admit(dir, realFam.Name, real); err != nil {
			t.Fatal(err)
		}
		body, _ := EncodeNPY(Tensor{Shape: []int{realFam.Dim}, Data: make([]float32, realFam.Dim)})
		if err := os.WriteFile(filepath.Join(dir, ids[0]+".npy"), body, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := MergeManifest(dir, []Commit{{SeqID: ids[0], Suffix: ".npy", Bytes: int64(len(body))}}, nil); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), killAtEnv+"="+strconv.Itoa(n), "KINFLOW_TEST_MEDIA="+media)
		out, err := cmd.CombinedOutput()
		var ee *exec.ExitError
		finished := err == nil
		if !finished {
			if !errors.As(err, &ee) || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
				t.Fatalf("kill point %d: the writer failed: %v %s", n, err, out)
			}
			kills++
		}
		// Only the real file counts as cached for a real engine.
		p, err := l.BuildPlan(context.Background(), PlanRequest{MethodKey: "A-H", Target: methods.Kcat, Profile: methods.ProfileMethodAFull,
			SeqIDs: ids, SeqIDToSeq: m, RealOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if p.CachedAlready != 1 {
			t.Fatalf("kill point %d: a real engine's plan counts %d files as cached, want only the real one", n, p.CachedAlready)
		}
		for _, f := range spec.Families {
			d := l.FamilyDir(f)
			rec, err := provenance.ReadRecorded(d)
			if err != nil {
				t.Fatal(err)
			}
			synth := SyntheticInManifest(d)
			ents, _ := os.ReadDir(d)
			for _, e := range ents {
				sid, ok := cutSuffix(e.Name(), ".npy")
				if !ok || isTempName(e.Name()) || (f.Name == realFam.Name && sid == ids[0]) {
					continue
				}
				if !synth[sid] && !(rec.AllSynthetic() && !rec.Unverified) {
					t.Fatalf("kill point %d: %s/%s is visible but not listed as synthetic (record %+v)", n, f.Name, sid, rec)
				}
			}
		}
		if finished {
			break
		}
	}
	// 4 families: 4 admitted, 11 temp files, 4 syncs, 4
	// manifest merges, 11 renames.
	if kills < 30 {
		t.Fatalf("only %d kill points: the protocol was not exercised", kills)
	}
	t.Logf("killed the writer at %d points", kills)
}

func cutSuffix(name, suffix string) (string, bool) {
	if len(name) <= len(suffix) || name[len(name)-len(suffix):] != suffix {
		return "", false
	}
	return name[:len(name)-len(suffix)], true
}
