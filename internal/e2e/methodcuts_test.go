package e2e

import (
	"bytes"
	"encoding/json"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
)

// cutsReference computes, independently of steps/, what each method's own
// code gives for one sequence (docs/method-cuts.md): method D, the layer-33
// BOS vector of the fine-tuned ESM-1b on the first 1,022 residues; methods G
// and H, ESM-2's layer-33 rows after the token matrix is cut to 1,024
// columns (G the rows, H their mean).
const cutsReference = `
import argparse, json, sys, torch, esm
def load(p):
    with torch.serialization.safe_globals([argparse.Namespace]):
        return esm.pretrained.load_model_and_alphabet_local(p)
def reps(model, alphabet, seq, token_cut=None):
    toks = [alphabet.cls_idx] + [alphabet.get_idx(a) for a in seq] + [alphabet.eos_idx]
    if token_cut:
        toks = toks[:token_cut]
    with torch.no_grad():
        return model(torch.tensor([toks]), repr_layers=[model.num_layers])["representations"][model.num_layers][0], len(toks)
esm1b, tuned, esm2, seq = sys.argv[1:5]
m, a = load(esm1b)
raw = torch.load(tuned)
m.load_state_dict({k[len("module.model."):]: v for k, v in raw.items() if k.startswith("module.model.")})
m.eval()
d, _ = reps(m, a, seq[:1022])
m, a = load(esm2)
m.eval()
r, n = reps(m, a, seq, 1024)
rows = r[1:1 + min(len(seq), n - 1)]
print(json.dumps({"d": d[0].tolist(), "g": rows.tolist(), "h": rows.mean(0).tolist()}))
`

// TestMethodCutsOfA1030ResidueSequence runs on real processes: a
// 1,030-residue sequence sent to a real GPU host (its HTTP service, kinflow's
// own step programs as resident servers on tiny random-weight models) gives
// methods D, G and H exactly the cut of each method's own code: D's first
// 1,022 residues (the host does not cut it to 500 + 500 first), and for G and
// H BOS and the first 1,023 residues without EOS (1,023 rows).
func TestMethodCutsOfA1030ResidueSequence(t *testing.T) {
	py := stepsPython(t)
	lines := tinyModels(t, py)
	models := map[string]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, "=")
		models[k] = v
	}
	lines = append(lines, "KINFLOW_STEPS_DEVICE=cpu")
	for _, step := range []string{"methodd_esm1b", "methodg_esm2", "methodh_esm2_last_mean"} {
		lines = append(lines, "GPU_EMBED_STEP_SERVER_"+strings.ToUpper(step)+"="+py+" -m kinflow_steps --step "+step)
	}
	s := newStack(t, nil, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": envFile(t, lines...), "KINFLOW_STEP_EXECUTOR": "command"}})

	r := rand.New(rand.NewPCG(26, 1030))
	var b strings.Builder
	for range 1030 {
		b.WriteByte("ACDEFGHIKLMNPQRSTVWY"[r.IntN(20)])
	}
	seq := b.String()
	sid := embedding.BaseSeqID(seq)
	body, _ := json.Marshal(map[string]any{
		"method_key": "cuts", "target": "kcat",
		"step_work":     map[string][]string{"methodd_esm1b": {sid}, "methodg_esm2": {sid}, "methodh_esm2_last_mean": {sid}},
		"seq_id_to_seq": map[string]string{sid: seq},
	})
	gpu := "http://" + s.env["KINFLOW_GPU_LISTEN"]
	resp, err := http.Post(gpu+"/embed/jobs", "application/json", bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	var sub struct {
		JobID string `json:"job_id"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&sub)
	resp.Body.Close()
	if resp.StatusCode != 200 && resp.StatusCode != 202 || sub.JobID == "" {
		t.Fatalf("submit: %d %+v", resp.StatusCode, sub)
	}
	deadline := time.Now().Add(240 * time.Second)
	for {
		var st struct {
			Status string `json:"status"`
			Error  string `json:"error"`
		}
		resp, err := http.Get(gpu + "/embed/jobs/" + sub.JobID)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if st.Status == "done" {
			break
		}
		if st.Status == "failed" || time.Now().After(deadline) {
			t.Fatalf("embed job: %+v", st)
		}
		time.Sleep(500 * time.Millisecond)
	}

	cmd := exec.Command(py, "-c", cutsReference, models["KINFLOW_ESM1B_PATH"], models["KINFLOW_METHODD_CHECKPOINT"], models["KINFLOW_ESM2_650M_PATH"], seq)
	cmd.Env = append(os.Environ(), "PYTHONPATH="+models["PYTHONPATH"])
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("independent computation: %v", err)
	}
	var want struct {
		D []float64   `json:"d"`
		G [][]float64 `json:"g"`
		H []float64   `json:"h"`
	}
	if err := json.Unmarshal(out, &want); err != nil {
		t.Fatal(err)
	}
	if len(want.G) != 1023 {
		t.Fatalf("the reference rule gives %d rows, want 1,023", len(want.G))
	}
	read := func(family, suffix string) embedding.Tensor {
		t.Helper()
		p := filepath.Join(s.media, "sequence_info", family, sid+suffix)
		data, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		var tn embedding.Tensor
		if suffix == ".pt" {
			tn, err = embedding.DecodePT(data)
		} else {
			tn, err = embedding.DecodeNPY(bytes.NewReader(data))
		}
		if err != nil {
			t.Fatalf("%s: %v", family, err)
		}
		return tn
	}
	near := func(what string, got []float32, want []float64) {
		t.Helper()
		if len(got) != len(want) {
			t.Fatalf("%s: %d values, want %d", what, len(got), len(want))
		}
		for i := range want {
			if math.Abs(float64(got[i])-want[i]) > 1e-4*(1+math.Abs(want[i])) {
				t.Fatalf("%s[%d] = %v, the method's rule gives %v", what, i, got[i], want[i])
			}
		}
	}
	near("D", read("esm1b_methodd", ".npy").Data, want.D)
	g := read("methodg_esm2", ".pt")
	if len(g.Shape) != 2 || g.Shape[0] != 1023 {
		t.Fatalf("G shape %v, want [1023, D]", g.Shape)
	}
	var flat []float64
	for _, row := range want.G {
		flat = append(flat, row...)
	}
	near("G", g.Data, flat)
	near("H", read("esm2_layer_last_mean", ".npy").Data, want.H)
}
