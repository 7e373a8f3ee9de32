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
		// Method K is the reference's second CatRange model.
		if m.ModelVersion != DefaultModelVersion && (m.Key != "K" || m.ModelVersion != "2") {
			t.Errorf("%s: model version %q", m.Key, m.ModelVersion)
		}
	}
}

// TestEngineFingerprintCoversDataCheckpointsAndRDKit: a file changed in
// place in {tools} or {data_dir}, in a checkpoint root named by the environment
// (method E's), or a different RDKit version changes the engine's
// fingerprint, so the prediction cache misses.
func TestEngineFingerprintCoversDataCheckpointsAndRDKit(t *testing.T) {
	dir := t.TempDir()
	write := func(p, body string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	script, data, ckpt := filepath.Join(dir, "predict.py"), filepath.Join(dir, "data"), filepath.Join(dir, "ckpt")
	tools := filepath.Join(dir, "tools")
	write(script, "print(1)\n")
	write(filepath.Join(data, "table.csv"), "a,b\n")
	write(filepath.Join(tools, "seqmap", "main.py"), "print('map')\n")
	// Running the helpers writes bytecode: that must not change anything.
	write(filepath.Join(tools, "seqmap", "__pycache__", "main.cpython-312.pyc"), "bytecode")
	write(filepath.Join(ckpt, "kcat", "fold_0", "model_0", "model.pt"), "weights")
	// A stand-in interpreter whose RDKit version is a file's contents.
	version := filepath.Join(dir, "rdkit-version")
	write(version, "2023.09.1\n")
	py := filepath.Join(dir, "python")
	write(py, "#!/bin/sh\ncat "+version+"\n")
	d := &Descriptor{Key: "E", DisplayName: "Method E", ModelVersion: "1",
		Command: &Command{Python: py, Script: script, Paths: map[string]string{"data_dir": data, "tools": tools}}}
	id := func() string {
		t.Helper()
		rdkitVersions.Clear()
		fp, err := EngineFingerprint(d, provenance.NewHashCache(""), ckpt)
		if err != nil {
			t.Fatal(err)
		}
		return fp.ID()
	}
	fp, _ := EngineFingerprint(d, provenance.NewHashCache(""), ckpt)
	if fp.Libraries["rdkit"] != "2023.09.1" || fp.Weights["data/table.csv"] == "" || fp.Weights["ckpt/kcat/fold_0/model_0/model.pt"] == "" ||
		fp.Weights["tools/seqmap/main.py"] == "" {
		t.Fatalf("fingerprint %+v", fp)
	}
	first := id()
	write(filepath.Join(tools, "seqmap", "__pycache__", "main.cpython-312.pyc"), "other bytecode")
	if id() != first {
		t.Fatal("a bytecode cache under {tools} changed the fingerprint")
	}
	write(filepath.Join(tools, "seqmap", "main.py"), "print('map v2')\n")
	base := id()
	if base == first {
		t.Fatal("a changed file under {tools} left the fingerprint as it was")
	}
	write(filepath.Join(data, "table.csv"), "a,c\n")
	afterData := id()
	write(filepath.Join(ckpt, "kcat", "fold_0", "model_0", "model.pt"), "weightz")
	afterCkpt := id()
	write(version, "2024.03.5\n")
	afterRDKit := id()
	if base == afterData || afterData == afterCkpt || afterCkpt == afterRDKit {
		t.Fatalf("fingerprints %s %s %s %s: each change must show", base, afterData, afterCkpt, afterRDKit)
	}
}

// TestEngineFingerprintCoversHowTheProgramIsCalled: the same files called
// with another static argument, typed param, environment value, row key or
// declared output form have another fingerprint, so the prediction cache
// never serves numbers a differently called program answered; an equal
// descriptor has an equal one.
func TestEngineFingerprintCoversHowTheProgramIsCalled(t *testing.T) {
	dir := t.TempDir()
	script := filepath.Join(dir, "predict.py")
	if err := os.WriteFile(script, []byte("print(1)\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	base := func() *Descriptor {
		d, _ := Default().Get("G")
		d = d.Clone()
		d.Command = &Command{Python: "/usr/bin/python3", Script: script}
		return d
	}
	id := func(d *Descriptor) string {
		fp, err := EngineFingerprint(d, provenance.NewHashCache(""))
		if err != nil {
			t.Fatal(err)
		}
		return fp.ID()
	}
	ref := id(base())
	if id(base()) != ref {
		t.Fatal("equal descriptors must have equal fingerprints")
	}
	changes := map[string]func(d *Descriptor){
		"target kwarg": func(d *Descriptor) { d.TargetKwargs[Kcat]["kinetics_type"] = "KM" },
		"typed param": func(d *Descriptor) {
			d.Params = map[Target]map[string]any{Kcat: {"cleanup_embeddings_after_run": false}}
		},
		"environment": func(d *Descriptor) { d.EnvPaths = append(d.EnvPaths, EnvVar{Name: "X", Value: "1"}) },
		"extra env":   func(d *Descriptor) { d.Command.ExtraEnv = map[string]string{"OMP_NUM_THREADS": "1"} },
		"row key":     func(d *Descriptor) { d.ColToKwarg = []ColumnKwarg{{Column: "Substrate", Kwarg: "smiles"}} },
		"output form": func(d *Descriptor) { d.Outputs = map[Target]Output{Kcat: {Form: FormLog10}} },
		"row seq_id":  func(d *Descriptor) { d.RowSeqID = !d.RowSeqID },
		"extra args":  func(d *Descriptor) { d.Command.ExtraArgs = []string{"--fast"} },
	}
	for name, change := range changes {
		d := base()
		change(d)
		if id(d) == ref {
			t.Errorf("a changed %s left the engine's fingerprint as it was", name)
		}
	}
}
