package embedding

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

func TestCheckFile(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, b []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	good, err := EncodeNPY(Tensor{Shape: []int{3, 5}, Data: make([]float32, 15)})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(write("ok.npy", good)); err != nil {
		t.Errorf("good npy: %v", err)
	}
	// A float16 file as numpy writes it passes: the check is structural.
	half := []byte("\x93NUMPY\x01\x00\x76\x00{'descr': '<f2', 'fortran_order': False, 'shape': (4,), }")
	half = append(half, bytes.Repeat([]byte(" "), 128-len(half)-1)...)
	half = append(append(half, '\n'), make([]byte, 8)...)
	if err := CheckFile(write("half.npy", half)); err != nil {
		t.Errorf("float16 npy: %v", err)
	}
	if err := CheckFile(write("short.npy", good[:len(good)-4])); err == nil {
		t.Error("truncated npy accepted")
	}
	if err := CheckFile(write("junk.npy", []byte("hello world, not numpy"))); err == nil {
		t.Error("junk npy accepted")
	}
	if err := CheckFile(write("empty.npy", nil)); err == nil {
		t.Error("empty file accepted")
	}
	pt, err := EncodePT(Tensor{Shape: []int{4}, Data: make([]float32, 4)})
	if err != nil {
		t.Fatal(err)
	}
	if err := CheckFile(write("ok.pt", pt)); err != nil {
		t.Errorf("good pt: %v", err)
	}
	if err := CheckFile(write("legacy.pt", append(append([]byte{}, legacyTorchMagic...), 1, 2, 3))); err != nil {
		t.Errorf("legacy pt: %v", err)
	}
	if err := CheckFile(write("junk.pt", []byte("PK not really"))); err == nil {
		t.Error("junk pt accepted")
	}
}

func FuzzNPYHeader(f *testing.F) {
	good, _ := EncodeNPY(Tensor{Shape: []int{2, 3}, Data: make([]float32, 6)})
	f.Add(good)
	f.Add([]byte("\x93NUMPY\x01\x00\x10\x00{'descr': '<f4'"))
	f.Fuzz(func(t *testing.T, b []byte) {
		h, err := readNPYHeader(bytes.NewReader(b))
		if err == nil && (h.size < 10 || h.size > int64(len(b))) {
			t.Fatalf("header of %d bytes accepted from %d", h.size, len(b))
		}
	})
}
