package embedding

import (
	"archive/zip"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math"
	"strconv"
	"strings"
)

// The .pt artefacts are torch.save archives (the zip layout torch has used
// since 1.6, pickle protocol 2), holding one contiguous float32 CPU tensor.
// They load with torch.load(path, weights_only=True): the pickle references
// only torch._utils._rebuild_tensor_v2, torch.FloatStorage and
// collections.OrderedDict, all on torch's weights-only allow list.

// ptArchive is the archive's top folder; torch.load accepts any name.
const ptArchive = "archive"

// ptAlign is the alignment torch.save gives every record's data, which
// torch.load(mmap=True) relies on.
const ptAlign = 64

// EncodePT encodes t as a torch.save archive.
func EncodePT(t Tensor) ([]byte, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	if len(t.Data) > math.MaxInt32 {
		return nil, errors.New("pt: tensor too large")
	}
	raw := make([]byte, 4*len(t.Data))
	for i, v := range t.Data {
		binary.LittleEndian.PutUint32(raw[4*i:], math.Float32bits(v))
	}
	var out bytes.Buffer
	cw := &countingWriter{w: &out}
	zw := zip.NewWriter(cw)
	records := []struct {
		name string
		data []byte
	}{
		{"data.pkl", ptPickle(t.Shape, len(t.Data))},
		{"byteorder", []byte("little")},
		{"data/0", raw},
		{"version", []byte("3\n")},
	}
	for _, rec := range records {
		// Flush so cw.n is the offset of the next local header.
		if err := zw.Flush(); err != nil {
			return nil, err
		}
		name := ptArchive + "/" + rec.name
		base := cw.n + 30 + int64(len(name)) + 4
		pad := (ptAlign - base%ptAlign) % ptAlign
		extra := make([]byte, 4+pad)
		copy(extra, "FB")
		binary.LittleEndian.PutUint16(extra[2:], uint16(pad))
		for i := 4; i < len(extra); i++ {
			extra[i] = 'Z'
		}
		fh := &zip.FileHeader{
			Name:               name,
			Method:             zip.Store,
			CRC32:              crc32.ChecksumIEEE(rec.data),
			CompressedSize64:   uint64(len(rec.data)),
			UncompressedSize64: uint64(len(rec.data)),
			Extra:              extra,
		}
		w, err := zw.CreateRaw(fh)
		if err != nil {
			return nil, fmt.Errorf("pt: %w", err)
		}
		if _, err := w.Write(rec.data); err != nil {
			return nil, fmt.Errorf("pt: %w", err)
		}
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("pt: %w", err)
	}
	return out.Bytes(), nil
}

type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// ptPickle is data.pkl: _rebuild_tensor_v2(storage, 0, shape, stride, False, OrderedDict()).
func ptPickle(shape []int, numel int) []byte {
	stride := make([]int, len(shape))
	s := 1
	for i := len(shape) - 1; i >= 0; i-- {
		stride[i] = s
		s *= shape[i]
	}
	return ptPickleView(shape, stride, numel)
}

// ptPickleView is the pickle of a view with the given shape and stride over a
// storage of numel floats.
func ptPickleView(shape, stride []int, numel int) []byte {
	var b bytes.Buffer
	b.WriteString("\x80\x02")
	b.WriteString("ctorch._utils\n_rebuild_tensor_v2\n")
	b.WriteByte('(') // args
	b.WriteByte('(') // persistent id
	pickleStr(&b, "storage")
	b.WriteString("ctorch\nFloatStorage\n")
	pickleStr(&b, "0")
	pickleStr(&b, "cpu")
	pickleInt(&b, numel)
	b.WriteByte('t')
	b.WriteByte('Q')
	pickleInt(&b, 0)
	pickleTuple(&b, shape)
	pickleTuple(&b, stride)
	b.WriteByte(0x89) // NEWFALSE: requires_grad
	b.WriteString("ccollections\nOrderedDict\n)R")
	b.WriteString("tR.")
	return b.Bytes()
}

func pickleStr(b *bytes.Buffer, s string) {
	b.WriteByte('X')
	_ = binary.Write(b, binary.LittleEndian, uint32(len(s)))
	b.WriteString(s)
}

func pickleInt(b *bytes.Buffer, v int) {
	switch {
	case v >= 0 && v < 256:
		b.WriteByte('K')
		b.WriteByte(byte(v))
	case v >= 0 && v < 65536:
		b.WriteByte('M')
		_ = binary.Write(b, binary.LittleEndian, uint16(v))
	default:
		b.WriteByte('J')
		_ = binary.Write(b, binary.LittleEndian, int32(v))
	}
}

func pickleTuple(b *bytes.Buffer, vals []int) {
	switch len(vals) {
	case 0:
		b.WriteByte(')')
		return
	case 1, 2, 3:
		for _, v := range vals {
			pickleInt(b, v)
		}
		b.WriteByte(0x85 + byte(len(vals)-1))
		return
	}
	b.WriteByte('(')
	for _, v := range vals {
		pickleInt(b, v)
	}
	b.WriteByte('t')
}

// DecodePT reads a torch.save archive holding one float32 tensor (written by
// EncodePT or by torch.save of a contiguous or strided float32 CPU tensor).
func DecodePT(data []byte) (Tensor, error) {
	zr, err := zip.NewReader(bytes.NewReader(data), int64(len(data)))
	if err != nil {
		return Tensor{}, fmt.Errorf("pt: %w", err)
	}
	files := map[string]*zip.File{}
	prefix := ""
	for _, f := range zr.File {
		files[f.Name] = f
		if strings.HasSuffix(f.Name, "/data.pkl") && prefix == "" {
			prefix = strings.TrimSuffix(f.Name, "data.pkl")
		}
	}
	if prefix == "" {
		return Tensor{}, errors.New("pt: no data.pkl record")
	}
	pkl, err := readZipFile(files[prefix+"data.pkl"], 1<<20)
	if err != nil {
		return Tensor{}, err
	}
	ref, err := unpickleTensor(pkl)
	if err != nil {
		return Tensor{}, err
	}
	if bo, ok := files[prefix+"byteorder"]; ok {
		b, err := readZipFile(bo, 16)
		if err != nil {
			return Tensor{}, err
		}
		if string(b) != "little" {
			return Tensor{}, fmt.Errorf("pt: byte order %q", b)
		}
	}
	sf, ok := files[prefix+"data/"+ref.key]
	if !ok {
		return Tensor{}, fmt.Errorf("pt: storage %q missing", ref.key)
	}
	raw, err := readZipFile(sf, 4*maxNPYElements)
	if err != nil {
		return Tensor{}, err
	}
	if len(raw) < 4*ref.storageNumel {
		return Tensor{}, errors.New("pt: storage shorter than declared")
	}
	n := NumElements(ref.shape)
	// A view never has more elements than its storage unless it broadcasts
	// (stride 0), which no artefact does: refusing it keeps a few bytes of
	// pickle from asking for a gigabyte of output.
	if n > ref.storageNumel {
		return Tensor{}, errors.New("pt: view larger than its storage")
	}
	out := Tensor{Shape: ref.shape, Data: make([]float32, n)}
	if n == 0 {
		return out, nil
	}
	// Walk the strided view in C order.
	idx := make([]int, len(ref.shape))
	for i := 0; i < n; i++ {
		off := ref.offset
		for d, k := range idx {
			off += k * ref.stride[d]
		}
		if off < 0 || off >= ref.storageNumel {
			return Tensor{}, errors.New("pt: view outside its storage")
		}
		out.Data[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*off:]))
		for d := len(idx) - 1; d >= 0; d-- {
			idx[d]++
			if idx[d] < ref.shape[d] {
				break
			}
			idx[d] = 0
		}
	}
	return out, nil
}

// readZipFile reads one record of at most limit bytes. Records must be
// stored uncompressed, as torch.save writes every record (seen for torch 1.13
// and 2.x): a compressed record would let a file of a megabyte decompress to
// the gigabyte limit, so what a .pt file makes the reader hold stays bounded
// by the file's own size.
func readZipFile(f *zip.File, limit int64) ([]byte, error) {
	if f.Method != zip.Store {
		return nil, fmt.Errorf("pt: record %s is compressed (torch.save stores records uncompressed)", f.Name)
	}
	if f.UncompressedSize64 > uint64(limit) {
		return nil, fmt.Errorf("pt: record %s too large", f.Name)
	}
	rc, err := f.Open()
	if err != nil {
		return nil, fmt.Errorf("pt: %w", err)
	}
	defer rc.Close()
	b, err := io.ReadAll(io.LimitReader(rc, limit+1))
	if err != nil {
		return nil, fmt.Errorf("pt: read %s: %w", f.Name, err)
	}
	if int64(len(b)) > limit {
		return nil, fmt.Errorf("pt: record %s too large", f.Name)
	}
	return b, nil
}

type pkGlobal struct{ module, name string }
type pkMark struct{}
type pkStorage struct {
	key   string
	numel int
}
type pkTensor struct {
	key          string
	storageNumel int
	offset       int
	shape        []int
	stride       []int
}
type pkDict struct{}

// unpickleTensor runs the subset of the pickle machine that torch.save emits
// for one tensor and returns the tensor's view of its storage.
func unpickleTensor(p []byte) (*pkTensor, error) {
	var (
		stack []any
		memo  = map[int]any{}
		pos   int
	)
	errShort := errors.New("pt: truncated pickle")
	read := func(n int) ([]byte, error) {
		if n < 0 || pos+n > len(p) {
			return nil, errShort
		}
		b := p[pos : pos+n]
		pos += n
		return b, nil
	}
	readLine := func() (string, error) {
		i := bytes.IndexByte(p[pos:], '\n')
		if i < 0 {
			return "", errShort
		}
		s := string(p[pos : pos+i])
		pos += i + 1
		return s, nil
	}
	pop := func() (any, error) {
		if len(stack) == 0 {
			return nil, errors.New("pt: pickle stack underflow")
		}
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		return v, nil
	}
	popMark := func() ([]any, error) {
		for i := len(stack) - 1; i >= 0; i-- {
			if _, ok := stack[i].(pkMark); ok {
				items := append([]any(nil), stack[i+1:]...)
				stack = stack[:i]
				return items, nil
			}
		}
		return nil, errors.New("pt: pickle mark missing")
	}
	top := func() (int, error) {
		if len(stack) == 0 {
			return 0, errors.New("pt: pickle stack underflow")
		}
		return len(stack) - 1, nil
	}
	for steps := 0; steps < 1<<16; steps++ {
		b, err := read(1)
		if err != nil {
			return nil, err
		}
		switch op := b[0]; op {
		case 0x80: // PROTO
			if _, err := read(1); err != nil {
				return nil, err
			}
		case 0x95: // FRAME
			if _, err := read(8); err != nil {
				return nil, err
			}
		case 'c':
			m, err := readLine()
			if err != nil {
				return nil, err
			}
			n, err := readLine()
			if err != nil {
				return nil, err
			}
			stack = append(stack, pkGlobal{m, n})
		case 0x93: // STACK_GLOBAL
			n, err1 := pop()
			m, err2 := pop()
			ns, ok1 := n.(string)
			ms, ok2 := m.(string)
			if err1 != nil || err2 != nil || !ok1 || !ok2 {
				return nil, errors.New("pt: bad STACK_GLOBAL")
			}
			stack = append(stack, pkGlobal{ms, ns})
		case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
			var k int
			switch op {
			case 'q':
				bb, err := read(1)
				if err != nil {
					return nil, err
				}
				k = int(bb[0])
			case 'r':
				bb, err := read(4)
				if err != nil {
					return nil, err
				}
				k = int(binary.LittleEndian.Uint32(bb))
			default:
				k = len(memo)
			}
			i, err := top()
			if err != nil {
				return nil, err
			}
			memo[k] = stack[i]
		case 'h', 'j': // BINGET, LONG_BINGET
			var k int
			if op == 'h' {
				bb, err := read(1)
				if err != nil {
					return nil, err
				}
				k = int(bb[0])
			} else {
				bb, err := read(4)
				if err != nil {
					return nil, err
				}
				k = int(binary.LittleEndian.Uint32(bb))
			}
			v, ok := memo[k]
			if !ok {
				return nil, errors.New("pt: pickle memo miss")
			}
			stack = append(stack, v)
		case '(':
			stack = append(stack, pkMark{})
		case 't':
			items, err := popMark()
			if err != nil {
				return nil, err
			}
			stack = append(stack, items)
		case ')':
			stack = append(stack, []any{})
		case 0x85, 0x86, 0x87:
			n := int(op-0x85) + 1
			if len(stack) < n {
				return nil, errors.New("pt: pickle stack underflow")
			}
			items := append([]any(nil), stack[len(stack)-n:]...)
			stack = append(stack[:len(stack)-n], items)
		case 'X', 0x8c: // BINUNICODE, SHORT_BINUNICODE
			var n int
			if op == 'X' {
				bb, err := read(4)
				if err != nil {
					return nil, err
				}
				n = int(binary.LittleEndian.Uint32(bb))
			} else {
				bb, err := read(1)
				if err != nil {
					return nil, err
				}
				n = int(bb[0])
			}
			s, err := read(n)
			if err != nil {
				return nil, err
			}
			stack = append(stack, string(s))
		case 'K':
			bb, err := read(1)
			if err != nil {
				return nil, err
			}
			stack = append(stack, int(bb[0]))
		case 'M':
			bb, err := read(2)
			if err != nil {
				return nil, err
			}
			stack = append(stack, int(binary.LittleEndian.Uint16(bb)))
		case 'J':
			bb, err := read(4)
			if err != nil {
				return nil, err
			}
			stack = append(stack, int(int32(binary.LittleEndian.Uint32(bb))))
		case 0x8a: // LONG1
			nb, err := read(1)
			if err != nil {
				return nil, err
			}
			bb, err := read(int(nb[0]))
			if err != nil || len(bb) > 8 {
				return nil, errors.New("pt: bad LONG1")
			}
			var v int64
			for i := len(bb) - 1; i >= 0; i-- {
				v = v<<8 | int64(bb[i])
			}
			if len(bb) > 0 && len(bb) < 8 && bb[len(bb)-1]&0x80 != 0 {
				v -= 1 << (8 * uint(len(bb)))
			}
			stack = append(stack, int(v))
		case 0x88, 0x89:
			stack = append(stack, op == 0x88)
		case 'N':
			stack = append(stack, nil)
		case '}':
			stack = append(stack, pkDict{})
		case ']':
			stack = append(stack, []any{})
		case 'u', 'e':
			if _, err := popMark(); err != nil {
				return nil, err
			}
		case 's', 'a':
			n := 2
			if op == 'a' {
				n = 1
			}
			if len(stack) < n+1 {
				return nil, errors.New("pt: pickle stack underflow")
			}
			stack = stack[:len(stack)-n]
		case 'b': // BUILD: state ignored
			if _, err := pop(); err != nil {
				return nil, err
			}
		case 'Q': // BINPERSID
			v, err := pop()
			if err != nil {
				return nil, err
			}
			t, ok := v.([]any)
			if !ok || len(t) != 5 || t[0] != "storage" {
				return nil, errors.New("pt: unsupported persistent id")
			}
			g, _ := t[1].(pkGlobal)
			if g.module != "torch" || g.name != "FloatStorage" {
				return nil, fmt.Errorf("pt: storage type %s.%s, want torch.FloatStorage", g.module, g.name)
			}
			key, ok1 := t[2].(string)
			numel, ok2 := t[4].(int)
			if !ok1 || !ok2 || numel < 0 || numel > maxNPYElements || strings.ContainsAny(key, "/\\") {
				return nil, errors.New("pt: bad storage reference")
			}
			stack = append(stack, pkStorage{key: key, numel: numel})
		case 'R':
			argv, err := pop()
			if err != nil {
				return nil, err
			}
			fn, err := pop()
			if err != nil {
				return nil, err
			}
			args, ok := argv.([]any)
			g, ok2 := fn.(pkGlobal)
			if !ok || !ok2 {
				return nil, errors.New("pt: bad REDUCE")
			}
			switch g.module + "." + g.name {
			case "collections.OrderedDict":
				stack = append(stack, pkDict{})
			case "torch._utils._rebuild_tensor_v2":
				t, err := rebuildTensor(args)
				if err != nil {
					return nil, err
				}
				stack = append(stack, t)
			default:
				return nil, fmt.Errorf("pt: unsupported callable %s.%s", g.module, g.name)
			}
		case '.':
			v, err := pop()
			if err != nil {
				return nil, err
			}
			t, ok := v.(*pkTensor)
			if !ok {
				return nil, errors.New("pt: archive does not hold a single tensor")
			}
			return t, nil
		default:
			return nil, fmt.Errorf("pt: unsupported pickle opcode 0x%02x at %d", op, pos-1)
		}
	}
	return nil, errors.New("pt: pickle too long")
}

func rebuildTensor(args []any) (*pkTensor, error) {
	if len(args) < 4 {
		return nil, errors.New("pt: bad tensor arguments")
	}
	st, ok := args[0].(pkStorage)
	off, ok2 := args[1].(int)
	if !ok || !ok2 || off < 0 {
		return nil, errors.New("pt: bad tensor storage")
	}
	ints := func(v any) ([]int, error) {
		t, ok := v.([]any)
		if !ok || len(t) > 8 {
			return nil, errors.New("pt: bad tensor size")
		}
		out := make([]int, len(t))
		for i, x := range t {
			n, ok := x.(int)
			if !ok || n < 0 {
				return nil, errors.New("pt: bad tensor size " + strconv.Quote(fmt.Sprint(x)))
			}
			out[i] = n
		}
		return out, nil
	}
	shape, err := ints(args[2])
	if err != nil {
		return nil, err
	}
	stride, err := ints(args[3])
	if err != nil || len(stride) != len(shape) {
		return nil, errors.New("pt: bad tensor stride")
	}
	n := 1
	for _, d := range shape {
		if d != 0 && n > maxNPYElements/d {
			return nil, errors.New("pt: tensor too large")
		}
		n *= d
	}
	return &pkTensor{key: st.key, storageNumel: st.numel, offset: off, shape: shape, stride: stride}, nil
}
