package e2e

import (
	"encoding/json"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/testenv"
)

// stepsPython is testenv.StepsPython.
func stepsPython(t *testing.T) string { t.Helper(); return testenv.StepsPython(t) }

// tinyModels is testenv.TinyModels.
func tinyModels(t *testing.T, py string) []string { t.Helper(); return testenv.TinyModels(t, py) }

// TestRealStepServersThroughTheGPUHost runs kinflow's own step programs
// (steps/, fair-esm and transformers) on tiny random-weight models as
// resident servers of a real GPU host: a method H job (ESM-2) and a method B
// job (ProtT5) complete on the GPU road; each file is what an independent
// computation in the test gives (the mean of ESM-2's last layer over the
// residues, BOS and EOS excluded); a second job is served by the same
// resident process (the model loaded once); and no server outlives the host.
func TestRealStepServersThroughTheGPUHost(t *testing.T) {
	py := stepsPython(t)
	lines := tinyModels(t, py)
	env := map[string]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, "=")
		env[k] = v
	}
	lines = append(lines,
		"KINFLOW_STEPS_DEVICE=cpu",
		"GPU_EMBED_STEP_SERVER_METHODH_ESM2_LAST_MEAN="+py+" -m kinflow_steps --step methodh_esm2_last_mean",
		"GPU_EMBED_STEP_SERVER_PROT_T5_MEAN="+py+" -m kinflow_steps --step prot_t5_mean",
	)
	s := newStack(t, map[string]string{"GPU_EMBED_JOB_TIMEOUT_SECONDS": "300"},
		map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": envFile(t, lines...), "KINFLOW_STEP_EXECUTOR": "command"}})

	input := csvRows(randSeed(), 3, 40)
	job := s.submit(input, []string{"kcat"}, map[string]string{"kcat": "H"})
	st := s.waitDone(job, 240*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("method H job: %s %s", st.Status, st.Error)
	}
	if r := st.reasons(); r[len(r)-1] != "done" {
		t.Fatalf("events %v: want the GPU host's step server to compute the files", r)
	}
	first := s.stepServerPIDs()
	if len(first) != 1 {
		t.Fatalf("resident servers %v, want one (methodh_esm2_last_mean)", first)
	}

	// An independent computation of every file: fair-esm's own forward
	// pass, mean over the residues of the last layer.
	files, _ := filepath.Glob(filepath.Join(s.media, "sequence_info", "esm2_layer_last_mean", "*.npy"))
	if len(files) != 3 {
		t.Fatalf("%d methodh files, want 3", len(files))
	}
	seqs := map[string]string{}
	for _, row := range strings.Split(strings.TrimSpace(input), "\n")[1:] {
		seq, _, _ := strings.Cut(row, ",")
		// A fresh database: no collision, so the id is the first candidate.
		seqs[embedding.BaseSeqID(seq)] = seq
	}
	script := `
import argparse, json, sys, torch, esm
# torch >= 2.6 loads weights only; fair-esm checkpoints carry an argparse.Namespace.
with torch.serialization.safe_globals([argparse.Namespace]):
    model, alphabet = esm.pretrained.load_model_and_alphabet_local(sys.argv[1])
model.eval()
conv = alphabet.get_batch_converter()
out = {}
for sid, seq in json.loads(sys.argv[2]).items():
    _, _, toks = conv([(sid, seq)])
    with torch.no_grad():
        rep = model(toks, repr_layers=[model.num_layers])["representations"][model.num_layers]
    out[sid] = rep[0, 1:len(seq) + 1].mean(0).tolist()
print(json.dumps(out))
`
	arg, _ := json.Marshal(seqs)
	cmd := exec.Command(py, "-c", script, env["KINFLOW_ESM2_650M_PATH"], string(arg))
	cmd.Env = append(os.Environ(), "PYTHONPATH="+env["PYTHONPATH"])
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("independent computation: %v", err)
	}
	var want map[string][]float64
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		sid := strings.TrimSuffix(filepath.Base(f), ".npy")
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		got, err := embedding.DecodeNPY(fh)
		fh.Close()
		if err != nil {
			t.Fatal(err)
		}
		w := want[sid]
		if len(got.Shape) != 1 || got.Shape[0] != len(w) {
			t.Fatalf("%s: shape %v, want [%d]", sid, got.Shape, len(w))
		}
		for i := range w {
			if math.Abs(float64(got.Data[i])-w[i]) > 1e-4 {
				t.Fatalf("%s[%d] = %v, independent computation %v", sid, i, got.Data[i], w[i])
			}
		}
	}

	// A second job of new sequences: the same resident process serves it.
	job2 := s.submit(csvRows(randSeed(), 2, 50), []string{"kcat"}, map[string]string{"kcat": "H"})
	if st := s.waitDone(job2, 120*time.Second); st.Status != "Completed" {
		t.Fatalf("second job: %s %s", st.Status, st.Error)
	}
	if again := s.stepServerPIDs(); len(again) != 1 || again[0] != first[0] {
		t.Fatalf("servers %v after the second job, want the same process %v", again, first)
	}

	// ProtT5 (transformers) through the same host.
	job3 := s.submit(csvRows(randSeed(), 2, 30), []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(job3, 240*time.Second); st.Status != "Completed" {
		t.Fatalf("method B job: %s %s", st.Status, st.Error)
	}
	t5, _ := filepath.Glob(filepath.Join(s.media, "sequence_info", "prot_t5_last", "mean_vecs", "*.npy"))
	if len(t5) != 2 {
		t.Fatalf("%d prot_t5_mean files, want 2", len(t5))
	}
	for _, f := range t5 {
		if err := embedding.CheckFile(f); err != nil {
			t.Fatal(err)
		}
	}
	all := s.stepServerPIDs()
	s.stop()
	waitGone(t, all, 30*time.Second, "after the GPU host stopped")
}
