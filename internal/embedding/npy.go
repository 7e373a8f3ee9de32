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

// DecodeNPY reads a .npy file (format 1.x, 2.x or 3.x) holding
// little-endian float32 in C order.
func DecodeNPY(r io.Reader) (Tensor, error) {
	var pre [8]byte
	if _, err := io.ReadFull(r, pre[:]); err != nil {
		return Tensor{}, fmt.Errorf("npy: %w", err)
	}
	if !bytes.Equal(pre[:6], npyMagic) {
		return Tensor{}, errors.New("npy: bad magic")
	}
	var hlen int
	switch pre[6] {
	case 1:
		var b [2]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Tensor{}, fmt.Errorf("npy: %w", err)
		}
		hlen = int(binary.LittleEndian.Uint16(b[:]))
	case 2, 3:
		var b [4]byte
		if _, err := io.ReadFull(r, b[:]); err != nil {
			return Tensor{}, fmt.Errorf("npy: %w", err)
		}
		hlen = int(binary.LittleEndian.Uint32(b[:]))
		if hlen > 1<<20 {
			return Tensor{}, errors.New("npy: header too long")
		}
	default:
		return Tensor{}, fmt.Errorf("npy: unsupported version %d.%d", pre[6], pre[7])
	}
	hb := make([]byte, hlen)
	if _, err := io.ReadFull(r, hb); err != nil {
		return Tensor{}, fmt.Errorf("npy header: %w", err)
	}
	h := string(hb)
	m := npyDescr.FindStringSubmatch(h)
	if m == nil || (m[1] != "<f4" && m[1] != "=f4") {
		return Tensor{}, fmt.Errorf("npy: dtype %v, want '<f4'", m)
	}
	if m := npyFortran.FindStringSubmatch(h); m == nil || m[1] != "False" {
		return Tensor{}, errors.New("npy: Fortran order is not supported")
	}
	sm := npyShape.FindStringSubmatch(h)
	if sm == nil {
		return Tensor{}, errors.New("npy: no shape")
	}
	var shape []int
	for _, p := range strings.Split(sm[1], ",") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		d, err := strconv.Atoi(strings.TrimSuffix(p, "L"))
		if err != nil || d < 0 {
			return Tensor{}, fmt.Errorf("npy: bad shape %q", sm[1])
		}
		shape = append(shape, d)
	}
	n := 1
	for _, d := range shape {
		if d != 0 && n > maxNPYElements/d {
			return Tensor{}, fmt.Errorf("npy: shape %v too large", shape)
		}
		n *= d
	}
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
