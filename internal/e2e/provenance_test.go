package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/provenance"
)

// TestSyntheticCacheThenRealModels runs on real processes: a first deployment
// on the embedded defaults fills the cache with synthetic files; a second one
// on the same media root, with real step programs (kinflow's own, on tiny
// random-weight models) and a real prediction engine (a stand-in program of
// method B), submits the same rows. The step program computes the three
// sequences (the synthetic files are replaced, never consumed), the result is
// a prediction with its provenance (the family's recorded fingerprint, the
// engine's, the model version), and a host whose weights differ by one byte
// refuses the family with one line (the job then falls back to the CPU
// worker's synthetic executor, and its result is flagged synthetic: nothing
// of another model is mixed in, and no stand-in is presented as a
// prediction).
func TestSyntheticCacheThenRealModels(t *testing.T) {
	py := stepsPython(t)
	if _, err := os.Stat(input.DefaultPython); err != nil {
		t.Skipf("the engine stand-in needs %s", input.DefaultPython)
	}
	lines := tinyModels(t, py)
	models := map[string]string{}
	for _, l := range lines {
		k, v, _ := strings.Cut(l, "=")
		models[k] = v
	}
	media := filepath.Join(t.TempDir(), "media")
	rows := csvRows(randSeed(), 3, 30)
	famDir := filepath.Join(media, "sequence_info", "prot_t5_last", "mean_vecs")
	const fam = "prot_t5_last/mean_vecs"

	// 1. `make run`: synthetic step executor and engine.
	a := newStack(t, map[string]string{"KINFLOW_MEDIA_ROOT": media}, nil)
	job := a.submit(rows, []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := a.waitDone(job, 120*time.Second); st.Status != "Completed" || !st.Synthetic {
		t.Fatalf("synthetic job: %+v", st)
	}
	rec, err := provenance.ReadRecorded(famDir)
	if err != nil || !rec.AllSynthetic() {
		t.Fatalf("after the synthetic job the family's record is %+v (%v)", rec, err)
	}
	synthetic := map[string]bool{}
	for sid, e := range embedding.ReadManifest(famDir) {
		if e.Synthetic {
			synthetic[sid] = true
		}
	}
	if len(synthetic) != 3 {
		t.Fatalf("manifest flags %d synthetic files, want 3", len(synthetic))
	}
	a.stop()

	// 2. Real step programs and a real engine on the same media root.
	dir := t.TempDir()
	bScript := filepath.Join(dir, "b.py")
	if err := os.WriteFile(bScript, []byte(engineB), 0o644); err != nil {
		t.Fatal(err)
	}
	methodsFile := filepath.Join(dir, "methods.yaml")
	if err := os.WriteFile(methodsFile, []byte(fmt.Sprintf("methods:\n  - key: B\n    command: {python: %s, script: %s}\n", input.DefaultPython, bScript)), 0o644); err != nil {
		t.Fatal(err)
	}
	hostEnv := envFile(t, append(lines, "KINFLOW_STEPS_DEVICE=cpu",
		"GPU_EMBED_STEP_SERVER_PROT_T5_MEAN="+py+" -m kinflow_steps --step prot_t5_mean")...)
	hashCache := filepath.Join(dir, "sha256.json")
	b := newStack(t, map[string]string{
		"KINFLOW_MEDIA_ROOT": media, "KINFLOW_PREDICTION_ENGINE": "command", "KINFLOW_METHODS_FILE": methodsFile,
		"GPU_EMBED_JOB_TIMEOUT_SECONDS": "300", "KINFLOW_HASH_CACHE": hashCache,
	}, map[string]map[string]string{"gpu-worker": {"KINFLOW_GPU_ENV_FILE": hostEnv, "KINFLOW_STEP_EXECUTOR": "command"}})
	job2 := b.submit(rows, []string{"kcat"}, map[string]string{"kcat": "B"})
	st := b.waitDone(job2, 300*time.Second)
	if st.Status != "Completed" || st.Synthetic {
		t.Fatalf("real job: %+v", st)
	}
	if len(st.Stages) != 1 || st.Stages[0].Embedding.Cached != 0 || st.Stages[0].Embedding.Need != 3 {
		t.Fatalf("the plan must count the synthetic files as missing: %+v", st.Stages)
	}
	if r := st.reasons(); len(r) == 0 || r[len(r)-1] != "done" {
		t.Fatalf("events %v: want the GPU host's step program to compute the files", r)
	}
	rec, err = provenance.ReadRecorded(famDir)
	if err != nil || rec.AllSynthetic() || !strings.HasPrefix(rec.ID, "fp-") || len(rec.Fingerprint.Weights) == 0 {
		t.Fatalf("after the real job the record is %+v (%v)", rec, err)
	}
	for sid, e := range embedding.ReadManifest(famDir) {
		if e.Synthetic {
			t.Errorf("%s is still flagged synthetic", sid)
		}
	}
	body := b.resultCSV(job2)
	if strings.Contains(strings.ToLower(body), "synthetic") || !strings.Contains(body, "Prediction from Method B") {
		t.Fatalf("result:\n%s", body)
	}
	var res struct {
		Synthetic  *bool              `json:"synthetic"`
		Provenance []provenance.Stage `json:"provenance"`
	}
	if code := b.do("GET", "/api/v1/result/"+job2+"/?format=json", nil, "", &res); code != 200 {
		t.Fatalf("JSON result: %d", code)
	}
	if res.Synthetic != nil || len(res.Provenance) != 1 {
		t.Fatalf("JSON result: %+v", res)
	}
	p := res.Provenance[0]
	if p.Method != "B" || p.ModelVersion != "1" || p.Engine != "command" || !strings.HasPrefix(p.EngineFingerprint, "fp-") ||
		p.Families[fam] != rec.ID || p.Synthetic || len(p.Unverified) != 0 {
		t.Fatalf("provenance %+v (family record %s)", p, rec.ID)
	}
	var raw map[string]json.RawMessage
	if code := b.do("GET", "/api/v1/status/"+job2+"/", nil, "", &raw); code != 200 || !strings.Contains(string(raw["provenance"]), rec.ID) {
		t.Fatalf("final status provenance: %s", raw["provenance"])
	}

	// 3. One byte of the weights changes: a GPU host refuses the family.
	weights := filepath.Join(models["KINFLOW_PROT_T5_PATH"], "model.safetensors")
	data, err := os.ReadFile(weights)
	if err != nil {
		t.Skipf("the tiny ProtT5 has no model.safetensors: %v", err)
	}
	data[len(data)-1] ^= 1
	if err := os.WriteFile(weights, data, 0o644); err != nil {
		t.Fatal(err)
	}
	b.kill9("gpu-worker")
	b.start("gpu-worker")
	b.waitHealthy()
	job3 := b.submit(csvRows(randSeed(), 1, 25), []string{"kcat"}, map[string]string{"kcat": "B"})
	st = b.waitDone(job3, 300*time.Second)
	// The GPU road fails; the fail-open fallback's synthetic executor
	// computes the file, and the result says it is no prediction.
	if st.Status != "Completed" || !st.Synthetic || strings.Join(st.reasons(), ",") != "submitted,failed,fallback_local,computed_locally" {
		t.Fatalf("a job whose family is refused: %+v %v, want Completed on the synthetic fallback, flagged synthetic", st, st.reasons())
	}
	if body := b.resultCSV(job3); !strings.Contains(body, "built on synthetic embeddings, not a prediction") {
		t.Fatalf("result of the refused job:\n%s", body)
	}
	logData, _ := os.ReadFile(b.logs["gpu-worker"])
	want := "kinflow cache purge --family " + fam
	var line string
	for _, l := range strings.Split(string(logData), "\n") {
		if strings.Contains(l, want) {
			line = l
			break
		}
	}
	if line == "" || !strings.Contains(line, rec.ID) {
		t.Fatalf("the GPU host's log has no refusal naming %s and %s:\n%s", fam, rec.ID, tail(logData, 3000))
	}
	if now, _ := provenance.ReadRecorded(famDir); now.ID != rec.ID {
		t.Fatalf("the refused host changed the record: %s", now.ID)
	}
}

// TestReferenceCacheIsUnverifiedUntilAdopted: a media root that already
// holds a reference deployment's files (same paths, no fingerprint record,
// no integrity record) is never trusted as it is: `cache verify` fails on
// the unrecorded files, and a job sets them aside and computes them again.
// `kinflow cache adopt` (which first verifies a sample with the
// configured step program) is the one way to take such files: after it, a
// job uses them and its result names the adopted fingerprint.
func TestReferenceCacheIsUnverifiedUntilAdopted(t *testing.T) {
	s := newStack(t, nil, nil)
	f, _ := embedding.FamilyByName(embedding.FamilyProtT5LastMean)
	dir := filepath.Join(s.media, "sequence_info", f.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	plant := func(rows string) {
		for _, row := range strings.Split(strings.TrimSpace(rows), "\n")[1:] {
			seq, _, _ := strings.Cut(row, ",")
			// The reference's worker wrote the same values this deployment's
			// configured (synthetic) program computes.
			body, _ := embedding.EncodeArtefact(f.Format, embedding.SyntheticArtefact(f, seq))
			if err := os.WriteFile(filepath.Join(dir, embedding.BaseSeqID(seq)+".npy"), body, 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	type provBody struct {
		Provenance []provenance.Stage `json:"provenance"`
		Notice     string             `json:"notice"`
	}
	rows := csvRows(randSeed(), 2, 30)
	plant(rows)
	// A method H job puts the sequences into the seq map (adopt's sample
	// needs them) and reads another family.
	jobH := s.submit(rows, []string{"kcat"}, map[string]string{"kcat": "H"})
	if st := s.waitDone(jobH, 120*time.Second); st.Status != "Completed" {
		t.Fatalf("method H job: %+v", st)
	}
	s.cli(s.env, "cache", "status").want(t, "cache status", 0, "out:prot_t5_last/mean_vecs")
	s.cli(s.env, "cache", "verify", "--family", f.Name, "--sample", "2").want(t, "cache verify", 1, "without an integrity record")
	s.cli(s.env, "cache", "adopt", "--family", f.Name, "--sample", "2").want(t, "cache adopt", 0, "out:2 of 2 recomputed file(s) within the bound",
		"out:adopted "+f.Name, "out:2 file(s) without a record checked and recorded")

	job2 := s.submit(rows, []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(job2, 120*time.Second); st.Status != "Completed" || st.Stages[0].Embedding.Cached != 2 {
		t.Fatalf("job after adopt: %+v", st)
	}
	pb := provBody{}
	if code := s.do("GET", "/api/v1/result/"+job2+"/?format=json", nil, "", &pb); code != 200 || strings.Contains(pb.Notice, "unverified") ||
		len(pb.Provenance) != 1 || !strings.HasPrefix(pb.Provenance[0].Families[f.Name], "synthetic-") || len(pb.Provenance[0].Unverified) != 0 {
		t.Fatalf("result after adopt: %+v", pb)
	}
	// Files planted after the adopt have no record: a job sets them
	// aside and computes them again.
	rows0 := csvRows(randSeed(), 2, 30)
	plant(rows0)
	job0 := s.submit(rows0, []string{"kcat"}, map[string]string{"kcat": "B"})
	if st := s.waitDone(job0, 120*time.Second); st.Status != "Completed" ||
		!slices.Contains(st.reasons(), "cache_files_quarantined:2") {
		t.Fatalf("job on unrecorded files: %+v %v", st, st.reasons())
	}

}
