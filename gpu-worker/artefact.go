package gpuworker

import (
	"archive/zip"
	"bytes"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// CheckArtefact reports whether path is a well-formed artefact for its
// suffix: .npy needs a parsable NPY header and at least the bytes its shape
// and dtype promise; .pt needs a torch zip archive with a data.pkl entry, or
// a legacy torch pickle. Any other suffix only has to be a non-empty regular
// file.
//
// TODO(integrator): delegate to internal/embedding's readers once they land.
func CheckArtefact(path string) error {
	st, err := os.Stat(path)
	if err != nil {
		return err
	}
	if !st.Mode().IsRegular() {
		return fmt.Errorf("%s: not a regular file", path)
	}
	if st.Size() == 0 {
		return fmt.Errorf("%s: empty file", path)
	}
	switch strings.ToLower(filepath.Ext(path)) {
	case ".npy":
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		hdr := make([]byte, min(st.Size(), 1<<16))
		if _, err := io.ReadFull(f, hdr); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		need, err := parseNPYHeader(hdr)
		if err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if st.Size() < need {
			return fmt.Errorf("%s: truncated: %d bytes, header promises %d", path, st.Size(), need)
		}
		return nil
	case ".pt":
		return checkTorch(path, st.Size())
	}
	return nil
}

var (
	npyDescr = regexp.MustCompile(`'descr'\s*:\s*'([<>|=]?)([a-zA-Z])(\d+)'`)
	npyOrder = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	npyShape = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// parseNPYHeader parses an NPY header (format versions 1 to 3) and returns
// the file size the header promises.
func parseNPYHeader(b []byte) (int64, error) {
	if len(b) < 10 || string(b[:6]) != "\x93NUMPY" {
		return 0, errors.New("not an NPY file (bad magic)")
	}
	var hlen, start int
	switch b[6] {
	case 1:
		hlen, start = int(binary.LittleEndian.Uint16(b[8:10])), 10
	case 2, 3:
		if len(b) < 12 {
			return 0, errors.New("short NPY header")
		}
		hlen, start = int(binary.LittleEndian.Uint32(b[8:12])), 12
	default:
		return 0, fmt.Errorf("unsupported NPY version %d", b[6])
	}
	if start+hlen > len(b) {
		return 0, errors.New("NPY header longer than the file")
	}
	h := string(b[start : start+hlen])
	d := npyDescr.FindStringSubmatch(h)
	if d == nil || npyOrder.FindString(h) == "" {
		return 0, errors.New("NPY header lacks descr or fortran_order")
	}
	size, err := strconv.ParseInt(d[3], 10, 64)
	if err != nil || size <= 0 || size > 64 {
		return 0, fmt.Errorf("NPY dtype %q not understood", d[2]+d[3])
	}
	sh := npyShape.FindStringSubmatch(h)
	if sh == nil {
		return 0, errors.New("NPY header lacks shape")
	}
	n := int64(1)
	for _, f := range strings.Split(sh[1], ",") {
		f = strings.TrimSpace(f)
		if f == "" {
			continue
		}
		dim, err := strconv.ParseInt(f, 10, 64)
		if err != nil || dim < 0 {
			return 0, fmt.Errorf("NPY shape %q not understood", sh[1])
		}
		if dim > 0 && n > math.MaxInt64/dim/size {
			return 0, errors.New("NPY shape overflows")
		}
		n *= dim
	}
	return int64(start+hlen) + n*size, nil
}

// legacyTorchMagic is the pickled magic number that opens a pre-1.6
// torch.save file (protocol 2 pickle of 0x1950a86a20f9469cfc6c).
var legacyTorchMagic = []byte{0x80, 0x02, 0x8a, 0x0a, 0x6c, 0xfc, 0x9c, 0x46, 0xf9, 0x20, 0x6a, 0xa8, 0x50, 0x19}

func checkTorch(path string, size int64) error {
	f, err := os.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	head := make([]byte, min(size, int64(len(legacyTorchMagic))))
	if _, err := io.ReadFull(f, head); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if bytes.Equal(head, legacyTorchMagic) {
		return nil
	}
	zr, err := zip.NewReader(f, size)
	if err != nil {
		return fmt.Errorf("%s: not a torch file (neither zip nor legacy pickle): %w", path, err)
	}
	for _, e := range zr.File {
		if e.Name == "data.pkl" || strings.HasSuffix(e.Name, "/data.pkl") {
			return nil
		}
	}
	return fmt.Errorf("%s: torch zip archive without data.pkl", path)
}

// writeAtomic writes data to path through a hidden temp file in the same
// directory, fsynced and renamed (WIRE-CONTRACT §9.7), so a watcher or planner
// never sees a partial artefact.
func writeAtomic(path string, data []byte) error {
	dir := filepath.Dir(path)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return fmt.Errorf("create %s: %w", dir, err)
	}
	var rnd [6]byte
	_, _ = rand.Read(rnd[:])
	base := filepath.Base(path)
	ext := filepath.Ext(base)
	tmp := filepath.Join(dir, "."+strings.TrimSuffix(base, ext)+"."+hex.EncodeToString(rnd[:])+ext)
	f, err := os.OpenFile(tmp, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o644)
	if err != nil {
		return fmt.Errorf("create temp file for %s: %w", path, err)
	}
	_, werr := f.Write(data)
	serr := f.Sync()
	cerr := f.Close()
	if err := errors.Join(werr, serr, cerr); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("write %s: %w", path, err)
	}
	if err := os.Rename(tmp, path); err != nil {
		_ = os.Remove(tmp)
		return fmt.Errorf("commit %s: %w", path, err)
	}
	return nil
}

// syntheticNPY is a float32 array drawn deterministically from key, as NPY
// version 1.0 bytes: a vector of dim values, or a rows × dim matrix when
// rows > 0.
func syntheticNPY(key string, rows, dim int) []byte {
	shape := fmt.Sprintf("(%d,)", dim)
	n := dim
	if rows > 0 {
		shape, n = fmt.Sprintf("(%d, %d)", rows, dim), rows*dim
	}
	header := fmt.Sprintf("{'descr': '<f4', 'fortran_order': False, 'shape': %s, }", shape)
	// Pad so that the data start is 64-byte aligned, as numpy does.
	pad := 64 - (10+len(header)+1)%64
	if pad == 64 {
		pad = 0
	}
	header += strings.Repeat(" ", pad) + "\n"
	var b bytes.Buffer
	b.WriteString("\x93NUMPY\x01\x00")
	_ = binary.Write(&b, binary.LittleEndian, uint16(len(header)))
	b.WriteString(header)
	seed := sha256.Sum256([]byte(key))
	// Eight float32 values per SHA-256 block keeps a 10,000 × 1280 matrix
	// under a second.
	var blk [32]byte
	data := make([]byte, 4*n)
	for i := 0; i < n; i++ {
		if i%8 == 0 {
			blk = sha256.Sum256(append(seed[:], byte(i), byte(i>>8), byte(i>>16), byte(i>>24)))
		}
		u := binary.LittleEndian.Uint32(blk[(i%8)*4:])
		v := float32(u)/float32(math.MaxUint32)*2 - 1
		binary.LittleEndian.PutUint32(data[4*i:], math.Float32bits(v))
	}
	b.Write(data)
	return b.Bytes()
}

// syntheticPT is a torch zip archive whose data.pkl is a pickled dict
// {"synthetic": True, "key": key}: torch.load reads it, and it says plainly
// that it holds no embedding.
func syntheticPT(key string) []byte {
	var p bytes.Buffer
	p.Write([]byte{0x80, 0x02, '}', 'q', 0x00, '('}) // PROTO 2, EMPTY_DICT, BINPUT 0, MARK
	str := func(s string) {
		p.WriteByte('X') // BINUNICODE
		_ = binary.Write(&p, binary.LittleEndian, uint32(len(s)))
		p.WriteString(s)
	}
	str("synthetic")
	p.WriteByte(0x88) // NEWTRUE
	str("key")
	str(key)
	p.Write([]byte{'u', '.'}) // SETITEMS, STOP
	var z bytes.Buffer
	zw := zip.NewWriter(&z)
	for _, e := range []struct{ name, body string }{
		{"archive/data.pkl", p.String()},
		{"archive/byteorder", "little"},
		{"archive/version", "3\n"},
	} {
		w, _ := zw.CreateHeader(&zip.FileHeader{Name: e.name, Method: zip.Store})
		_, _ = w.Write([]byte(e.body))
	}
	_ = zw.Close()
	return z.Bytes()
}
