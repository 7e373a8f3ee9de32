package provenance

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func realFP(sum string) Fingerprint {
	return Fingerprint{Model: "esm2_t33_650M_UR50D.pt", Weights: map[string]string{"esm2_t33_650M_UR50D.pt": sum},
		Precision: "fp32", Libraries: map[string]string{"torch": "2.4.0", "fair-esm": "2.0.0"},
		Program: "kinflow_steps methoda_esm2_layers", ProgramVersion: "0.1.0"}
}

func TestIDStableAndDistinct(t *testing.T) {
	a := realFP("aa")
	// Map order must not matter: a copy built in another order has the same id.
	b := realFP("aa")
	b.Libraries = map[string]string{"fair-esm": "2.0.0", "torch": "2.4.0"}
	if a.ID() != b.ID() || !strings.HasPrefix(a.ID(), "fp-") || len(a.ID()) != 19 {
		t.Fatalf("ids %q %q", a.ID(), b.ID())
	}
	if realFP("ab").ID() == a.ID() {
		t.Fatal("a changed weights sum must change the id")
	}
	if a.ForFamily("esm2_layer_26/mean_vecs").ID() == a.ForFamily("esm2_layer_29/mean_vecs").ID() {
		t.Fatal("families must differ")
	}
	s := Synthetic("methoda_esm2_layers")
	if !strings.HasPrefix(s.ID(), "synthetic-") {
		t.Fatalf("synthetic id %q", s.ID())
	}
	f := a.ForFamily("esm2_layer_26/weighted_vecs")
	if f.Layer != "26" || f.Reduction != "weighted" {
		t.Fatalf("layer/reduction %+v", f)
	}
	if g := a.ForFamily("prot_t5_last/mean_vecs"); g.Layer != "last" || g.Reduction != "mean" {
		t.Fatalf("prot_t5_last: %+v", g)
	}
	if p, ok := Parse(map[string]any{"model": "x", "weights": map[string]any{"x": "11"}}); !ok || p.Weights["x"] != "11" {
		t.Fatalf("parse: %+v %v", p, ok)
	}
	if _, ok := Parse(map[string]any{}); ok {
		t.Fatal("an empty object is no fingerprint")
	}
}

func TestAdmit(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "esm2_layer_26", "mean_vecs")
	fam := "esm2_layer_26/mean_vecs"

	// Synthetic first: recorded as synthetic.
	if v, err := Admit(dir, fam, Synthetic("methoda_esm2_layers")); err != nil || v != Unrecorded {
		t.Fatalf("first synthetic write: %v %v", v, err)
	}
	rec, err := ReadRecorded(dir)
	if err != nil || !rec.AllSynthetic() || rec.Unverified {
		t.Fatalf("record %+v %v", rec, err)
	}
	// A real writer takes over, never refused.
	real1 := realFP("aa")
	if v, err := Admit(dir, fam, real1); err != nil || v != SyntheticRecorded {
		t.Fatalf("real over synthetic: %v %v", v, err)
	}
	rec, _ = ReadRecorded(dir)
	if rec.ID != real1.ForFamily(fam).ID() || !rec.SyntheticFiles {
		t.Fatalf("record after real %+v", rec)
	}
	if v, err := Admit(dir, fam, real1); err != nil || v != Equal {
		t.Fatalf("same model: %v %v", v, err)
	}
	// A synthetic writer is let in and flagged.
	if v, err := Admit(dir, fam, Synthetic("methoda_esm2_layers")); err != nil || v != SyntheticWriter {
		t.Fatalf("synthetic over real: %v %v", v, err)
	}
	// A changed weights file is refused with one line.
	_, err = Admit(dir, fam, realFP("ab"))
	var me *MismatchError
	if !errors.As(err, &me) {
		t.Fatalf("want a mismatch, got %v", err)
	}
	msg := err.Error()
	for _, want := range []string{fam, rec.ID, realFP("ab").ForFamily(fam).ID(), "kinflow cache purge --family " + fam, "kinflow cache adopt --family " + fam} {
		if !strings.Contains(msg, want) {
			t.Errorf("message %q lacks %q", msg, want)
		}
	}
	if strings.Contains(msg, "\n") || strings.Contains(msg, root) {
		t.Errorf("message must be one line without server paths: %q", msg)
	}

	// A folder with files of unknown origin is recorded as unverified.
	dir2 := filepath.Join(root, "esm1v")
	if err := os.MkdirAll(dir2, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir2, "P1.npy"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Admit(dir2, "esm1v", real1); err != nil {
		t.Fatal(err)
	}
	if rec, _ := ReadRecorded(dir2); !rec.Unverified {
		t.Fatalf("want unverified: %+v", rec)
	}
}

func TestHashCacheRemembers(t *testing.T) {
	dir := t.TempDir()
	w := filepath.Join(dir, "w.pt")
	if err := os.WriteFile(w, []byte("weights-1"), 0o644); err != nil {
		t.Fatal(err)
	}
	cachePath := filepath.Join(dir, "c", "sha256.json")
	c := NewHashCache(cachePath)
	s1, err := c.Sum(w)
	if err != nil {
		t.Fatal(err)
	}
	// Same size and mtime: the remembered sum is used, even by a new cache
	// over the same file (that is what saves a rehash at each start).
	st, _ := os.Stat(w)
	if err := os.WriteFile(w, []byte("weights-2"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Chtimes(w, st.ModTime(), st.ModTime()); err != nil {
		t.Fatal(err)
	}
	if s, _ := NewHashCache(cachePath).Sum(w); s != s1 {
		t.Fatal("a file with the same size and mtime must not be rehashed")
	}
	// A changed mtime is rehashed.
	later := st.ModTime().Add(time.Second)
	if err := os.Chtimes(w, later, later); err != nil {
		t.Fatal(err)
	}
	s2, err := NewHashCache(cachePath).Sum(w)
	if err != nil || s2 == s1 {
		t.Fatalf("changed file: %q %v", s2, err)
	}
	tree, err := c.SumTree(dir)
	if err != nil || tree["w.pt"] != s2 || tree["c/sha256.json"] == "" {
		t.Fatalf("tree %v %v", tree, err)
	}
}

// TestSumTreeIgnoresBytecodeCaches: running a Python program from a folder
// that a fingerprint hashes (a method's model_dir, a step's source tree)
// writes __pycache__; the folder's sums, hence the fingerprint, stay.
func TestSumTreeIgnoresBytecodeCaches(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "predict.py"), []byte("X = 1\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	c := NewHashCache(filepath.Join(t.TempDir(), "sha256.json"))
	before, err := c.SumTree(dir)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "__pycache__"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{"__pycache__/predict.cpython-311.pyc", "stray.pyc"} {
		if err := os.WriteFile(filepath.Join(dir, p), []byte("bytecode"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	after, err := c.SumTree(dir)
	if err != nil || len(after) != 1 || after["predict.py"] != before["predict.py"] || len(before) != 1 {
		t.Fatalf("before %v after %v %v", before, after, err)
	}
}
