package gpuworker

import (
	"io"
	"log/slog"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/embedjob"
	"github.com/kinflow/kinflow/internal/fsutil"
)

func TestSubmitValidationErrors(t *testing.T) {
	media := t.TempDir()
	layout := testLayout(t, media, "")
	// s_done's methodd_esm1b file exists already.
	done, _ := layout.ExpectedPaths("methodd_esm1b", "donedonedone")
	body, _ := embedding.EncodeNPY(embedding.Tensor{Shape: []int{4}, Data: make([]float32, 4)})
	if err := fsutil.WriteFileAtomic(done[0], body, 0o644); err != nil {
		t.Fatal(err)
	}
	// Validation never reaches Temporal: a server without a client.
	srv := httptest.NewServer(NewServer(ServerOptions{Layout: layout, MediaRoot: media, Logs: &embedjob.JobLogs{Dir: t.TempDir()},
		Log: slog.New(slog.NewTextHandler(io.Discard, nil)), Health: &HealthProbe{}}))
	defer srv.Close()
	ok := `"seq_id_to_seq":{"aaaaaaaaaaaa":"MKV","donedonedone":"MKVL"}`
	cases := []struct{ name, body, detail string }{
		{"not JSON", `{"method_key":`, "invalid JSON body"},
		{"not an object", `[1,2]`, "invalid JSON body"},
		{"no method_key", `{"target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"]},` + ok + `}`, "method_key is required"},
		{"no target", `{"method_key":"C","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"]},` + ok + `}`, "target is required"},
		{"no step_work", `{"method_key":"C","target":"kcat",` + ok + `}`, "step_work is required"},
		{"empty step_work", `{"method_key":"C","target":"kcat","step_work":{},` + ok + `}`, "step_work is required"},
		{"only empty lists", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":[]},` + ok + `}`, "step_work is required"},
		{"step_work not an object", `{"method_key":"C","target":"kcat","step_work":["prot_t5_mean"],` + ok + `}`, "step_work must be an object"},
		{"list of non-strings", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":[1]},` + ok + `}`, "must be a list of seq id strings"},
		{"unknown step", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_max":["aaaaaaaaaaaa"]},` + ok + `}`, `unknown step key "prot_t5_max"`},
		{"step twice", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"],"prot_t5_mean":["aaaaaaaaaaaa"]},` + ok + `}`, "lists step prot_t5_mean twice"},
		{"invalid seq id", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["../etc/passwd"]},` + ok + `}`, `invalid seq_id "../etc/passwd"`},
		{"flag-like seq id", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["-rf"]},` + ok + `}`, `invalid seq_id "-rf"`},
		{"seq id twice", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa","aaaaaaaaaaaa"]},` + ok + `}`, "lists seq_id aaaaaaaaaaaa twice"},
		{"no sequence", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["bbbbbbbbbbbb"]},` + ok + `}`, "seq_id bbbbbbbbbbbb of step_work[prot_t5_mean] has no sequence"},
		{"seq map not strings", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"]},"seq_id_to_seq":{"aaaaaaaaaaaa":5}}`, "seq_id_to_seq must be an object"},
		{"bad residue", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"]},"seq_id_to_seq":{"aaaaaaaaaaaa":"MKX"}}`, "bad sequence for seq_id aaaaaaaaaaaa: character 'X' at position 3"},
		{"lower case", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"]},"seq_id_to_seq":{"aaaaaaaaaaaa":"mkv"}}`, "bad sequence for seq_id aaaaaaaaaaaa"},
		{"empty sequence", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"]},"seq_id_to_seq":{"aaaaaaaaaaaa":""}}`, "empty sequence"},
		{"too long", `{"method_key":"C","target":"kcat","step_work":{"prot_t5_mean":["aaaaaaaaaaaa"]},"seq_id_to_seq":{"aaaaaaaaaaaa":"` + strings.Repeat("M", embedjob.MaxSequenceLength+1) + `"}}`, "longer than 10000"},
		{"not sparse", `{"method_key":"D","target":"kcat","step_work":{"methodd_esm1b":["aaaaaaaaaaaa","donedonedone"]},` + ok + `}`, "step_work is not sparse: step_work[methodd_esm1b] lists seq_id donedonedone"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, body := do(t, "POST", srv.URL+"/embed/jobs", "", c.body)
			d, _ := body["detail"].(string)
			if code != 400 || !strings.Contains(d, c.detail) {
				t.Fatalf("%d %q, want 400 containing %q", code, d, c.detail)
			}
		})
	}
}

func TestValidateSubmitMapsDeprecatedKeysAndKeepsOrder(t *testing.T) {
	layout := testLayout(t, t.TempDir(), "")
	body := `{"method_key":"A-H","target":"kcat","profile":"methoda_full","step_work":{
		"methoda_esmc_layers":["s2"],
		"methoda_bindsites":["s1"],
		"methoda_prott5_layers":["s1","s2"],
		"methoda_t5_full":["s3"],
		"prot_t5_mean":[]},
		"seq_id_to_seq":{"s1":"MK","s2":"MKV","s3":"MKVL","unused":"MMMM"}}`
	w, order, err := ValidateSubmit([]byte(body), layout)
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(order, []string{"methoda_esmc_layers", "methoda_t5_full"}) {
		t.Fatalf("order %v", order)
	}
	if !slices.Equal(w.StepWork["methoda_t5_full"], []string{"s1", "s2", "s3"}) || len(w.StepWork) != 2 {
		t.Fatalf("step_work %v", w.StepWork)
	}
	if _, ok := w.SeqIDToSeq["unused"]; ok || len(w.SeqIDToSeq) != 3 || w.Profile != "methoda_full" {
		t.Fatalf("work %+v", w)
	}
}

func TestMethodELayout(t *testing.T) {
	root := t.TempDir()
	for _, p := range []string{"kcat/fold_1/model_0/model.pt", "kcat/fold_0/model_1/model.pt", "km/fold_0/model_0/model.pt", "kcat/fold_0/model_1/notes.txt"} {
		full := filepath.Join(root, p)
		_ = os.MkdirAll(filepath.Dir(full), 0o755)
		_ = os.WriteFile(full, []byte("x"), 0o644)
	}
	l := testLayout(t, "/m", root)
	got, err := l.ExpectedPaths("methode_embed_kcat", "abc")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/m/sequence_info/methode_esm2/kcat/fold_0__model_1/abc.pt", "/m/sequence_info/methode_esm2/kcat/fold_1__model_0/abc.pt"}
	if !slices.Equal(got, want) {
		t.Fatalf("%v", got)
	}
	if _, err := l.ExpectedPaths("methoda_t5_full", "a/b"); err == nil {
		t.Fatal("path-building seq id accepted")
	}
}

// testLayout is the artefact layout on media with method E's checkpoints
// under root ("" for none).
func testLayout(t *testing.T, media, root string) embedjob.EmbeddingLayout {
	t.Helper()
	l, err := embedding.NewLayout(media, "", root, "")
	if err != nil {
		t.Fatal(err)
	}
	return embedjob.EmbeddingLayout{L: l}
}

func TestParseNvidiaSMIAndProbe(t *testing.T) {
	g, err := ParseNvidiaSMI("NVIDIA H200, 140000, 143771\nNVIDIA H200, 1, 2\n")
	if err != nil || g.Name != "NVIDIA H200" || *g.FreeGB != 136.72 || *g.TotalGB != 140.4 {
		t.Fatalf("%+v %v", g, err)
	}
	if _, err := ParseNvidiaSMI("garbage"); err == nil {
		t.Fatal("garbage accepted")
	}
	dir := t.TempDir()
	smi := filepath.Join(dir, "nvidia-smi")
	_ = os.WriteFile(smi, []byte("#!/bin/sh\necho 'Tesla T4, 15000, 15360'\n"), 0o755)
	p := &HealthProbe{SMI: smi, Executor: "command"}
	if g := p.GPU(t.Context()); g.Name != "Tesla T4" || *g.TotalGB != 15 {
		t.Fatalf("%+v", g)
	}
	p = &HealthProbe{SMI: smi, Executor: "synthetic"}
	if g := p.GPU(t.Context()); !strings.Contains(g.Name, "synthetic") || !strings.Contains(g.Name, "Tesla T4") {
		t.Fatalf("%+v", g)
	}
	p = &HealthProbe{SMI: filepath.Join(dir, "absent"), FallbackName: "my-gpu", Executor: "command"}
	if g := p.GPU(t.Context()); g.Name != "my-gpu" || g.FreeGB != nil {
		t.Fatalf("%+v", g)
	}
}
