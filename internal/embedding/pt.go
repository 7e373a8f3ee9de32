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
	m := &pickleMachine{p: p, memo: map[int]any{}}
	for steps := 0; steps < 1<<16; steps++ {
		b, err := m.read(1)
		if err != nil {
			return nil, err
		}
		t, err := m.exec(b[0])
		if err != nil || t != nil {
			return t, err
		}
	}
	return nil, errors.New("pt: pickle too long")
}

// errShortPickle is a pickle that ends inside an opcode or its argument.
var errShortPickle = errors.New("pt: truncated pickle")

// pickleMachine is the state of unpickleTensor: the pickle, the read
// position, the stack and the memo.
type pickleMachine struct {
	p     []byte
	pos   int
	stack []any
	memo  map[int]any
}

func (m *pickleMachine) read(n int) ([]byte, error) {
	if n < 0 || m.pos+n > len(m.p) {
		return nil, errShortPickle
	}
	b := m.p[m.pos : m.pos+n]
	m.pos += n
	return b, nil
}

func (m *pickleMachine) readLine() (string, error) {
	i := bytes.IndexByte(m.p[m.pos:], '\n')
	if i < 0 {
		return "", errShortPickle
	}
	s := string(m.p[m.pos : m.pos+i])
	m.pos += i + 1
	return s, nil
}

// readUint reads an n-byte little-endian unsigned integer (n is 1, 2 or 4).
func (m *pickleMachine) readUint(n int) (int, error) {
	bb, err := m.read(n)
	if err != nil {
		return 0, err
	}
	switch n {
	case 1:
		return int(bb[0]), nil
	case 2:
		return int(binary.LittleEndian.Uint16(bb)), nil
	}
	return int(binary.LittleEndian.Uint32(bb)), nil
}

func (m *pickleMachine) push(v any) { m.stack = append(m.stack, v) }

func (m *pickleMachine) pop() (any, error) {
	if len(m.stack) == 0 {
		return nil, errors.New("pt: pickle stack underflow")
	}
	v := m.stack[len(m.stack)-1]
	m.stack = m.stack[:len(m.stack)-1]
	return v, nil
}

func (m *pickleMachine) popMark() ([]any, error) {
	for i := len(m.stack) - 1; i >= 0; i-- {
		if _, ok := m.stack[i].(pkMark); ok {
			items := append([]any(nil), m.stack[i+1:]...)
			m.stack = m.stack[:i]
			return items, nil
		}
	}
	return nil, errors.New("pt: pickle mark missing")
}

// exec runs one opcode; at STOP it returns the tensor.
func (m *pickleMachine) exec(op byte) (*pkTensor, error) {
	var err error
	switch op {
	case 0x80: // PROTO
		_, err = m.read(1)
	case 0x95: // FRAME
		_, err = m.read(8)
	case 'c': // GLOBAL
		err = m.global()
	case 0x93: // STACK_GLOBAL
		err = m.stackGlobal()
	case 'q', 'r', 0x94: // BINPUT, LONG_BINPUT, MEMOIZE
		err = m.put(op)
	case 'h', 'j': // BINGET, LONG_BINGET
		err = m.get(op)
	case '(':
		m.push(pkMark{})
	case 't':
		var items []any
		if items, err = m.popMark(); err == nil {
			m.push(items)
		}
	case ')', ']':
		m.push([]any{})
	case 0x85, 0x86, 0x87: // TUPLE1, TUPLE2, TUPLE3
		n := int(op-0x85) + 1
		if len(m.stack) < n {
			return nil, errors.New("pt: pickle stack underflow")
		}
		items := append([]any(nil), m.stack[len(m.stack)-n:]...)
		m.stack = append(m.stack[:len(m.stack)-n], items)
	case 'X', 0x8c: // BINUNICODE, SHORT_BINUNICODE
		err = m.unicode(op)
	case 'K', 'M': // BININT1, BININT2
		size := 1
		if op == 'M' {
			size = 2
		}
		var n int
		if n, err = m.readUint(size); err == nil {
			m.push(n)
		}
	case 'J': // BININT
		var n int
		if n, err = m.readUint(4); err == nil {
			m.push(int(int32(uint32(n))))
		}
	case 0x8a: // LONG1
		err = m.long1()
	case 0x88, 0x89: // NEWTRUE, NEWFALSE
		m.push(op == 0x88)
	case 'N':
		m.push(nil)
	case '}':
		m.push(pkDict{})
	case 'u', 'e': // SETITEMS, APPENDS: contents ignored
		_, err = m.popMark()
	case 's', 'a': // SETITEM, APPEND: contents ignored
		n := 2
		if op == 'a' {
			n = 1
		}
		if len(m.stack) < n+1 {
			return nil, errors.New("pt: pickle stack underflow")
		}
		m.stack = m.stack[:len(m.stack)-n]
	case 'b': // BUILD: state ignored
		_, err = m.pop()
	case 'Q': // BINPERSID
		err = m.persistentID()
	case 'R': // REDUCE
		err = m.reduce()
	case '.': // STOP
		return m.stop()
	default:
		return nil, fmt.Errorf("pt: unsupported pickle opcode 0x%02x at %d", op, m.pos-1)
	}
	return nil, err
}

func (m *pickleMachine) global() error {
	mod, err := m.readLine()
	if err != nil {
		return err
	}
	name, err := m.readLine()
	if err != nil {
		return err
	}
	m.push(pkGlobal{mod, name})
	return nil
}

func (m *pickleMachine) stackGlobal() error {
	n, err1 := m.pop()
	mod, err2 := m.pop()
	ns, ok1 := n.(string)
	ms, ok2 := mod.(string)
	if err1 != nil || err2 != nil || !ok1 || !ok2 {
		return errors.New("pt: bad STACK_GLOBAL")
	}
	m.push(pkGlobal{ms, ns})
	return nil
}

func (m *pickleMachine) put(op byte) error {
	var k int
	var err error
	switch op {
	case 'q':
		k, err = m.readUint(1)
	case 'r':
		k, err = m.readUint(4)
	default:
		k = len(m.memo)
	}
	if err != nil {
		return err
	}
	if len(m.stack) == 0 {
		return errors.New("pt: pickle stack underflow")
	}
	m.memo[k] = m.stack[len(m.stack)-1]
	return nil
}

func (m *pickleMachine) get(op byte) error {
	n := 1
	if op == 'j' {
		n = 4
	}
	k, err := m.readUint(n)
	if err != nil {
		return err
	}
	v, ok := m.memo[k]
	if !ok {
		return errors.New("pt: pickle memo miss")
	}
	m.push(v)
	return nil
}

func (m *pickleMachine) unicode(op byte) error {
	size := 1
	if op == 'X' {
		size = 4
	}
	n, err := m.readUint(size)
	if err != nil {
		return err
	}
	s, err := m.read(n)
	if err != nil {
		return err
	}
	m.push(string(s))
	return nil
}

func (m *pickleMachine) long1() error {
	nb, err := m.read(1)
	if err != nil {
		return err
	}
	bb, err := m.read(int(nb[0]))
	if err != nil || len(bb) > 8 {
		return errors.New("pt: bad LONG1")
	}
	var v int64
	for i := len(bb) - 1; i >= 0; i-- {
		v = v<<8 | int64(bb[i])
	}
	if len(bb) > 0 && len(bb) < 8 && bb[len(bb)-1]&0x80 != 0 {
		v -= 1 << (8 * uint(len(bb)))
	}
	m.push(int(v))
	return nil
}

func (m *pickleMachine) persistentID() error {
	v, err := m.pop()
	if err != nil {
		return err
	}
	t, ok := v.([]any)
	if !ok || len(t) != 5 || t[0] != "storage" {
		return errors.New("pt: unsupported persistent id")
	}
	g, _ := t[1].(pkGlobal)
	if g.module != "torch" || g.name != "FloatStorage" {
		return fmt.Errorf("pt: storage type %s.%s, want torch.FloatStorage", g.module, g.name)
	}
	key, ok1 := t[2].(string)
	numel, ok2 := t[4].(int)
	if !ok1 || !ok2 || numel < 0 || numel > maxNPYElements || strings.ContainsAny(key, "/\\") {
		return errors.New("pt: bad storage reference")
	}
	m.push(pkStorage{key: key, numel: numel})
	return nil
}

func (m *pickleMachine) reduce() error {
	argv, err := m.pop()
	if err != nil {
		return err
	}
	fn, err := m.pop()
	if err != nil {
		return err
	}
	args, ok := argv.([]any)
	g, ok2 := fn.(pkGlobal)
	if !ok || !ok2 {
		return errors.New("pt: bad REDUCE")
	}
	switch g.module + "." + g.name {
	case "collections.OrderedDict":
		m.push(pkDict{})
	case "torch._utils._rebuild_tensor_v2":
		t, err := rebuildTensor(args)
		if err != nil {
			return err
		}
		m.push(t)
	default:
		return fmt.Errorf("pt: unsupported callable %s.%s", g.module, g.name)
	}
	return nil
}

func (m *pickleMachine) stop() (*pkTensor, error) {
	v, err := m.pop()
	if err != nil {
		return nil, err
	}
	t, ok := v.(*pkTensor)
	if !ok {
		return nil, errors.New("pt: archive does not hold a single tensor")
	}
	return t, nil
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
