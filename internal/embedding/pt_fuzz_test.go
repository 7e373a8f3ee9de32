package embedding

import (
	"archive/zip"
	"bytes"
	"slices"
	"strings"
	"testing"
)

// FuzzDecodePT feeds DecodePT arbitrary bytes, seeded with archives EncodePT
// wrote: it must never panic, whatever it accepts must be a tensor whose data
// matches its shape and is no larger than the file could hold (each float
// comes from four stored bytes), and an accepted tensor must survive a round
// trip through EncodePT unchanged.
func FuzzDecodePT(f *testing.F) {
	for _, tn := range []Tensor{
		{Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}},
		{Shape: []int{4}, Data: []float32{-1, 0.5, 3e9, 7}},
		{Shape: []int{1, 0}, Data: []float32{}},
	} {
		b, err := EncodePT(tn)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("PK\x03\x04"))
	f.Fuzz(func(t *testing.T, b []byte) {
		tn, err := DecodePT(b)
		if err != nil {
			return
		}
		if len(tn.Data) != NumElements(tn.Shape) {
			t.Fatalf("shape %v with %d values", tn.Shape, len(tn.Data))
		}
		if 4*len(tn.Data) > len(b) {
			t.Fatalf("%d values from a file of %d bytes", len(tn.Data), len(b))
		}
		again, err := EncodePT(tn)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		back, err := DecodePT(again)
		if err != nil || !slices.Equal(back.Shape, tn.Shape) || len(back.Data) != len(tn.Data) {
			t.Fatalf("round trip: %v %v", back.Shape, err)
		}
		for i := range back.Data {
			if back.Data[i] != tn.Data[i] && (back.Data[i] == back.Data[i] || tn.Data[i] == tn.Data[i]) {
				t.Fatalf("value %d: %v then %v", i, tn.Data[i], back.Data[i])
			}
		}
	})
}

// TestDecodePTRefusesAmplification: a compressed record and a broadcast view
// (stride 0) are refused, so a small file cannot make the reader allocate far
// more than the file holds.
func TestDecodePTRefusesAmplification(t *testing.T) {
	good, err := EncodePT(Tensor{Shape: []int{2, 3}, Data: []float32{1, 2, 3, 4, 5, 6}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := DecodePT(good); err != nil {
		t.Fatalf("stored archive refused: %v", err)
	}
	// rewrite copies good's records, deflating them or swapping data.pkl.
	rewrite := func(method uint16, pkl []byte) []byte {
		zr, err := zip.NewReader(bytes.NewReader(good), int64(len(good)))
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		zw := zip.NewWriter(&buf)
		for _, f := range zr.File {
			data, err := readZipFile(f, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if pkl != nil && strings.HasSuffix(f.Name, "/data.pkl") {
				data = pkl
			}
			w, err := zw.CreateHeader(&zip.FileHeader{Name: f.Name, Method: method})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write(data); err != nil {
				t.Fatal(err)
			}
		}
		if err := zw.Close(); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	if _, err := DecodePT(rewrite(zip.Store, nil)); err != nil {
		t.Fatalf("the rewritten stored archive was refused: %v", err)
	}
	if _, err := DecodePT(rewrite(zip.Deflate, nil)); err == nil || !strings.Contains(err.Error(), "compressed") {
		t.Fatalf("a deflated archive: %v", err)
	}
	// The 6 stored floats seen as [1000, 1000] with stride 0 (broadcast).
	if _, err := DecodePT(rewrite(zip.Store, ptPickleView([]int{1000, 1000}, []int{0, 0}, 6))); err == nil || !strings.Contains(err.Error(), "larger than its storage") {
		t.Fatalf("a broadcast view: %v", err)
	}
	// A strided view inside its storage still reads ([3] of stride 2 over 6).
	tn, err := DecodePT(rewrite(zip.Store, ptPickleView([]int{3}, []int{2}, 6)))
	if err != nil || !slices.Equal(tn.Data, []float32{1, 3, 5}) {
		t.Fatalf("strided view: %v %v", tn.Data, err)
	}
}
