package methods

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/provenance"
)

// TestEngineFingerprint: the command engine's fingerprint follows its script
// and model folder, not the interpreter's path; the synthetic engine's says
// synthetic and follows the model version.
func TestEngineFingerprint(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "predict.py")
	models := filepath.Join(dir, "models")
	if err := os.MkdirAll(models, 0o755); err != nil {
		t.Fatal(err)
	}
	write := func(p, body string) {
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write(script, "print(1)\n")
	write(filepath.Join(models, "w.pt"), "weights")
	d := &Descriptor{Key: "B", DisplayName: "Method B", ModelVersion: "1",
		Command: &Command{Python: "/usr/bin/python3", Script: script, Paths: map[string]string{"model_dir": models}}}
	hc := provenance.NewHashCache("")
	fp1, err := EngineFingerprint(d, hc)
	if err != nil || !strings.HasPrefix(fp1.ID(), "fp-") || fp1.Weights["models/w.pt"] == "" || fp1.Weights["predict.py/predict.py"] == "" {
		t.Fatalf("fingerprint %+v %v", fp1, err)
	}
	write(filepath.Join(models, "w.pt"), "weightz")
	fp2, _ := EngineFingerprint(d, provenance.NewHashCache(""))
	if fp2.ID() == fp1.ID() {
		t.Fatal("a changed model file must change the engine's fingerprint")
	}
	d2 := *d
	d2.ModelVersion = "2"
	if SyntheticEngineFingerprint(d).ID() == SyntheticEngineFingerprint(&d2).ID() || !strings.HasPrefix(SyntheticEngineFingerprint(d).ID(), "synthetic-") {
		t.Fatal("synthetic engine fingerprint")
	}
	if _, ok := Default().Get("B"); !ok {
		t.Fatal("no B")
	}
	for _, m := range Default().All() {
		if m.ModelVersion != DefaultModelVersion {
			t.Errorf("%s: model version %q", m.Key, m.ModelVersion)
		}
	}
}
