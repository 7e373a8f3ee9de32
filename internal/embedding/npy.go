package embedding

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"regexp"
	"strconv"
	"strings"
)

// Tensor is a dense float32 array in row-major (C) order.
type Tensor struct {
	Shape []int
	Data  []float32
}

// NumElements is the product of the shape (1 for a scalar).
func NumElements(shape []int) int {
	n := 1
	for _, d := range shape {
		n *= d
	}
	return n
}

func (t Tensor) check() error {
	for _, d := range t.Shape {
		if d < 0 {
			return fmt.Errorf("tensor: negative dimension in %v", t.Shape)
		}
	}
	if NumElements(t.Shape) != len(t.Data) {
		return fmt.Errorf("tensor: shape %v holds %d values, have %d", t.Shape, NumElements(t.Shape), len(t.Data))
	}
	return nil
}

var npyMagic = []byte("\x93NUMPY")

// EncodeNPY encodes t as a .npy file, format 1.0, dtype '<f4', C order, its
// header padded with spaces and a newline to a multiple of 64 bytes, as
// numpy.save writes it.
func EncodeNPY(t Tensor) ([]byte, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	var shape string
	switch len(t.Shape) {
	case 1:
		shape = "(" + strconv.Itoa(t.Shape[0]) + ",)"
	default:
		parts := make([]string, len(t.Shape))
		for i, d := range t.Shape {
			parts[i] = strconv.Itoa(d)
		}
		shape = "(" + strings.Join(parts, ", ") + ")"
	}
	header := "{'descr': '<f4', 'fortran_order': False, 'shape': " + shape + ", }"
	// 10 bytes of preamble (magic, version, uint16 length) + header + '\n'.
	total := 10 + len(header) + 1
	pad := (64 - total%64) % 64
	header += strings.Repeat(" ", pad) + "\n"
	if len(header) > math.MaxUint16 {
		return nil, errors.New("npy: header too long for format 1.0")
	}
	buf := make([]byte, 0, 10+len(header)+4*len(t.Data))
	buf = append(buf, npyMagic...)
	buf = append(buf, 1, 0)
	buf = binary.LittleEndian.AppendUint16(buf, uint16(len(header)))
	buf = append(buf, header...)
	for _, v := range t.Data {
		buf = binary.LittleEndian.AppendUint32(buf, math.Float32bits(v))
	}
	return buf, nil
}

var (
	npyDescr   = regexp.MustCompile(`'descr'\s*:\s*'([^']*)'`)
	npyFortran = regexp.MustCompile(`'fortran_order'\s*:\s*(True|False)`)
	npyShape   = regexp.MustCompile(`'shape'\s*:\s*\(([^)]*)\)`)
)

// maxNPYElements bounds what DecodeNPY accepts (256 Mi floats, 1 GiB): the
// largest real artefact ([10000, 1280]) is 12.8 Mi.
const maxNPYElements = 256 << 20

// npyHeader is a parsed NPY header.
type npyHeader struct {
	descr   string // numpy's dtype string, e.g. "<f4"
	fortran bool
	shape   []int
	// size is the header's own length, preamble included: where data starts.
	size int64
}

// itemSize is the byte width of one element of descr ("<f4" → 4), 0 when
// descr does not end in a width.
func (h npyHeader) itemSize() int64 {
	i := len(h.descr)
	for i > 0 && h.descr[i-1] >= '0' && h.descr[i-1] <= '9' {
		i--
	}
	n, err := strconv.ParseInt(h.descr[i:], 10, 64)
	if err != nil || n <= 0 || n > 64 {
		return 0
	}
	return n
}

// readNPYHeader reads and parses the header of an NPY file (format 1.x, 2.x
// or 3.x) from r, leaving r at the first data byte. The shape's element count
// is bounded by maxNPYElements.
func readNPYHeader(r io.Reader) (npyHeader, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return npyHeader{}, fmt.Errorf("npy: %w", err)
	}
	if !bytes.Equal(pre[:6], npyMagic) {
		return npyHeader{}, errors.New("npy: bad magic")
	}
	var hlen, start int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return npyHeader{}, fmt.Errorf("npy: %w", err)
		}
		hlen, start = int(binary.LittleEndian.Uint16(b[:])), 10
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return npyHeader{}, fmt.Errorf("npy: %w", err)
		}
		hlen, start = int(binary.LittleEndian.Uint32(b[:])), 12
		if hlen > 1<<20 {
			return npyHeader{}, errors.New("npy: header too long")
		}
	default:
		return npyHeader{}, fmt.Errorf("npy: unsupported version %d.%d", pre[6], pre[7])
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return npyHeader{}, fmt.Errorf("npy header: %w", err)
	}
	h := string(hb)
	out := npyHeader{size: int64(start + hlen)}
	m := npyDescr.FindStringSubmatch(h)
	if m == nil {
		return npyHeader{}, errors.New("npy: header lacks descr")
	}
	out.descr = m[1]
	fm := npyFortran.FindStringSubmatch(h)
	if fm == nil {
		return npyHeader{}, errors.New("npy: header lacks fortran_order")
	}
	out.fortran = fm[1] == "True"
	sm := npyShape.FindStringSubmatch(h)
	if sm == nil {
		return npyHeader{}, errors.New("npy: no shape")
	}
	n := 1
	for _, p := range strings.Split(sm[1], ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		d, err := strconv.Atoi(strings.TrimSuffix(p, "L"))
		if err != nil || d < 0 {
			return npyHeader{}, fmt.Errorf("npy: bad shape %q", sm[1])
		}
		if d != 0 && n > maxNPYElements/d {
			return npyHeader{}, fmt.Errorf("npy: shape %q too large", sm[1])
		}
		n *= d
		out.shape = append(out.shape, d)
	}
	return out, nil
}

// DecodeNPY reads a .npy file (format 1.x, 2.x or 3.x) holding
// little-endian float32 in C order.
func DecodeNPY(r io.Reader) (Tensor, error) {
	h, err := readNPYHeader(r)
	if err != nil {
		return Tensor{}, err
	}
	if h.descr != "<f4" && h.descr != "=f4" {
		return Tensor{}, fmt.Errorf("npy: dtype %q, want '<f4'", h.descr)
	}
	if h.fortran {
		return Tensor{}, errors.New("npy: Fortran order is not supported")
	}
	shape := h.shape
	n := NumElements(shape)
	raw := make([]byte, 4*n)
	if _, err := io.ReadFull(r, raw); err != nil {
		return Tensor{}, fmt.Errorf("npy data: %w", err)
	}
	data := make([]float32, n)
	for i := range data {
		data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
	}
	return Tensor{Shape: shape, Data: data}, nil
}
