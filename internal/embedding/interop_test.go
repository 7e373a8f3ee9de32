package embedding_test

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/embedding"
	"github.com/kinflow/kinflow/internal/fsutil"
	"github.com/kinflow/kinflow/internal/testenv"
)

// python runs code with Debian's /usr/bin/python3 and returns stdout. The
// real consumers of the cache are numpy and torch, so a missing module is
// Unavailable (a failure under CI=true).
func python(t *testing.T, code string, args ...string) string {
	t.Helper()
	const py = "/usr/bin/python3"
	if _, err := os.Stat(py); err != nil {
		testenv.Unavailable(t, "%s: %v", py, err)
	}
	for _, mod := range []string{"numpy", "torch"} {
		if strings.Contains(code, mod) {
			if err := exec.Command(py, "-c", "import "+mod).Run(); err != nil {
				testenv.Unavailable(t, "python3 module %s (Debian python3-%s): %v", mod, mod, err)
			}
		}
	}
	cmd := exec.Command(py, append([]string{"-c", code}, args...)...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("python: %v\n%s", err, stderr.String())
	}
	return string(out)
}

// rawDigest is the SHA-256 of the little-endian float32 bytes of d.
func rawDigest(d []float32) string {
	b := make([]byte, 4*len(d))
	for i, v := range d {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(v))
	}
	return embedding.SHA256Hex(string(b))
}

func TestInteropNumpyLoadsOurNPY(t *testing.T) {
	dir := t.TempDir()
	var paths []string
	var want []string
	for i, f := range []string{embedding.FamilyProtT5LastMean, embedding.FamilyESMCLayer32Weighted, embedding.FamilyESM1v, embedding.FamilyMethodIProtT5Residues} {
		fam, _ := embedding.FamilyByName(f)
		ten := embedding.SyntheticArtefact(fam, strings.Repeat("MKTAYIAKQR", i+1))
		b, err := embedding.EncodeNPY(ten)
		if err != nil {
			t.Fatal(err)
		}
		sid := fmt.Sprintf("sid%d", i)
		p := filepath.Join(dir, sid+".npy")
		if err := fsutil.WriteFileAtomic(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		want = append(want, fmt.Sprintf("%v %s", ten.Shape, rawDigest(ten.Data)))
	}
	out := python(t, `
import sys, hashlib, numpy as np
for p in sys.argv[1:]:
    a = np.load(p)
    m = np.load(p, mmap_mode='r')
    assert a.dtype == np.float32 and m.dtype == np.float32, a.dtype
    assert a.flags['C_CONTIGUOUS']
    assert np.array_equal(a, m)
    print(list(a.shape), hashlib.sha256(a.astype('<f4').tobytes()).hexdigest())
`, paths...)
	got := strings.Split(strings.TrimSpace(out), "\n")
	for i := range want {
		if g := strings.ReplaceAll(got[i], ",", ""); g != want[i] {
			t.Errorf("file %d: numpy read %q, Go wrote %q", i, got[i], want[i])
		}
	}
}

func TestInteropTorchLoadsOurPT(t *testing.T) {
	dir := t.TempDir()
	gfam, _ := embedding.FamilyByName(embedding.FamilyMethodGESM2)
	efam, _ := embedding.MethodEFamily("kcat", "fold_0__model_0")
	cases := []embedding.Tensor{
		embedding.SyntheticArtefact(gfam, strings.Repeat("MKTAYIAKQR", 3)),
		embedding.SyntheticArtefact(efam, "MKT"),
		{Shape: []int{2, 3, 4, 5}, Data: make([]float32, 120)},
	}
	var paths, want []string
	for i, ten := range cases {
		b, err := embedding.EncodePT(ten)
		if err != nil {
			t.Fatal(err)
		}
		p := filepath.Join(dir, fmt.Sprintf("sid%d.pt", i))
		if err := fsutil.WriteFileAtomic(p, b, 0o644); err != nil {
			t.Fatal(err)
		}
		paths = append(paths, p)
		want = append(want, fmt.Sprintf("%s %s", strings.ReplaceAll(fmt.Sprint(ten.Shape), " ", ", "), rawDigest(ten.Data)))
	}
	out := python(t, `
import sys, hashlib, torch
for p in sys.argv[1:]:
    x = torch.load(p, weights_only=True)
    assert isinstance(x, torch.Tensor) and x.dtype == torch.float32 and x.device.type == 'cpu', (type(x), x.dtype)
    assert x.is_contiguous()
    try:
        y = torch.load(p, weights_only=True, mmap=True)
    except TypeError:  # torch < 2.1 (Debian 12 ships 1.13) has no mmap
        y = x
    assert torch.equal(x, y)
    print(list(x.shape), hashlib.sha256(x.contiguous().numpy().astype('<f4').tobytes()).hexdigest())
`, paths...)
	got := strings.Split(strings.TrimSpace(out), "\n")
	for i := range want {
		if got[i] != want[i] {
			t.Errorf("file %d: torch read %q, Go wrote %q", i, got[i], want[i])
		}
	}
	// And the other way: our reader on files torch.save wrote.
	ref := filepath.Join(dir, "torch.pt")
	view := filepath.Join(dir, "view.pt")
	python(t, `
import sys, torch
x = torch.arange(24, dtype=torch.float32).reshape(4, 6) / 7
torch.save(x, sys.argv[1])
torch.save(x.t()[1:], sys.argv[2])
`, ref, view)
	for _, p := range []string{ref, view} {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		ten, err := embedding.DecodePT(b)
		if err != nil {
			t.Fatalf("decode torch's %s: %v", filepath.Base(p), err)
		}
		if p == ref && (!reflect.DeepEqual(ten.Shape, []int{4, 6}) || ten.Data[23] != float32(23)/7) {
			t.Errorf("torch file: %v %v", ten.Shape, ten.Data)
		}
		// x.t()[1:] is a strided view: row r, col c = x[c][r+1].
		if p == view && (!reflect.DeepEqual(ten.Shape, []int{5, 4}) || ten.Data[0] != float32(1)/7 || ten.Data[1] != float32(7)/7) {
			t.Errorf("strided view: %v %v", ten.Shape, ten.Data[:4])
		}
	}
}
