package embedding

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
)

// BindingSiteHeader is the binding-site table's header line, the reference
// deployment's (docs/embedding.md, "Binding-site table").
const BindingSiteHeader = "PDB\tPred_BS_Scores"

// bindingSiteLockSuffix names the table's lock file (<table>.lock). Writers
// take it exclusively; readers need not, because they ignore an
// unterminated last line.
const bindingSiteLockSuffix = ".lock"

// BindingSiteRow is one row: the seq id and its per-residue binding-site
// probabilities.
type BindingSiteRow struct {
	SeqID  string
	Scores []float32
}

// scanTable calls fn with the id column and the rest of every complete line
// (ending in '\n') after the header. The id column is `PDB`, or the first
// column when no `PDB` header exists; rows are split on tabs. A final line
// without '\n' is a write in progress and is skipped, so readers never see a
// half line. A missing file is empty.
func scanTable(path string, fn func(id, rest []byte)) error {
	f, err := os.Open(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("read binding-site table: %w", err)
	}
	defer f.Close()
	const chunk = 1 << 20
	buf := make([]byte, 0, chunk)
	idCol, scoreCol := -1, -1
	header := true
	handle := func(line []byte) {
		line = bytes.TrimSuffix(line, []byte("\r"))
		if header {
			header = false
			cols := bytes.Split(line, []byte("\t"))
			for i, c := range cols {
				switch string(bytes.TrimSpace(c)) {
				case "PDB":
					idCol = i
				case "Pred_BS_Scores":
					scoreCol = i
				}
			}
			if idCol >= 0 {
				return
			}
			// No header: the first column holds ids and this line is data.
			idCol, scoreCol = 0, 1
		}
		col, start := 0, 0
		var id, rest []byte
		for i := 0; i <= len(line); i++ {
			if i == len(line) || line[i] == '\t' {
				if col == idCol {
					id = line[start:i]
				}
				if col == scoreCol {
					rest = line[start:i]
				}
				col++
				start = i + 1
			}
		}
		if len(id) > 0 {
			fn(id, rest)
		}
	}
	for {
		n, err := f.Read(buf[len(buf):cap(buf)])
		buf = buf[:len(buf)+n]
		off := 0
		for {
			i := bytes.IndexByte(buf[off:], '\n')
			if i < 0 {
				break
			}
			handle(buf[off : off+i])
			off += i + 1
		}
		// Move the unterminated tail to the front; grow for a long line.
		tail := len(buf) - off
		if off == 0 && tail == cap(buf) {
			nb := make([]byte, tail, 2*cap(buf))
			copy(nb, buf)
			buf = nb
		} else {
			copy(buf, buf[off:])
			buf = buf[:tail]
		}
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("read binding-site table: %w", err)
		}
	}
}

// BindingSiteIDs returns the set of seq ids with a row in the table at path.
// An unreadable file is treated as empty (every sequence's row then counts
// as missing), except that I/O errors
// other than absence are returned.
func BindingSiteIDs(path string) (map[string]struct{}, error) {
	ids := map[string]struct{}{}
	err := scanTable(path, func(id, _ []byte) { ids[string(id)] = struct{}{} })
	return ids, err
}

// FormatBindingSiteRow is one table line: `<sid>\t<p1>,<p2>,…\n`, each
// probability with 6 decimals.
func FormatBindingSiteRow(r BindingSiteRow) []byte {
	b := make([]byte, 0, len(r.SeqID)+2+9*len(r.Scores))
	b = append(b, r.SeqID...)
	b = append(b, '\t')
	for i, v := range r.Scores {
		if i > 0 {
			b = append(b, ',')
		}
		b = strconv.AppendFloat(b, float64(v), 'f', 6, 32)
	}
	return append(b, '\n')
}

// AppendBindingSites appends rows to the table at path, writing the header
// first when the file is new and skipping ids that already have a row. It
// holds an exclusive lock on <path>.lock for the whole read-check-append, so
// concurrent writers on one host and across hosts (NFS) never duplicate or
// interleave rows; all new rows go out in one write, fsynced. A torn last
// line left by a crashed writer is cut off first. It returns the ids written.
func AppendBindingSites(path string, rows []BindingSiteRow) ([]string, error) {
	if len(rows) == 0 {
		return nil, nil
	}
	for _, r := range rows {
		if !ValidSeqID(r.SeqID) {
			return nil, fmt.Errorf("binding sites: invalid seq id %q", r.SeqID)
		}
	}
	if err := ensureDir(filepath.Dir(path)); err != nil {
		return nil, err
	}
	unlock, err := lockFile(path+bindingSiteLockSuffix, true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	have, err := BindingSiteIDs(path)
	if err != nil {
		return nil, err
	}
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o644)
	if err != nil {
		return nil, fmt.Errorf("open binding-site table: %w", err)
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		return nil, fmt.Errorf("stat binding-site table: %w", err)
	}
	size := st.Size()
	if size > 0 {
		// Cut a torn last line (a writer died mid-write).
		end, err := lastNewline(f, size)
		if err != nil {
			return nil, err
		}
		if end != size {
			if err := f.Truncate(end); err != nil {
				return nil, fmt.Errorf("repair binding-site table: %w", err)
			}
			size = end
		}
	}
	var out bytes.Buffer
	if size == 0 {
		out.WriteString(BindingSiteHeader + "\n")
	}
	var written []string
	for _, r := range rows {
		if _, ok := have[r.SeqID]; ok {
			continue
		}
		have[r.SeqID] = struct{}{}
		out.Write(FormatBindingSiteRow(r))
		written = append(written, r.SeqID)
	}
	if len(written) == 0 {
		return nil, nil
	}
	if _, err := f.WriteAt(out.Bytes(), size); err != nil {
		return nil, fmt.Errorf("append binding sites: %w", err)
	}
	if err := f.Sync(); err != nil {
		return nil, fmt.Errorf("append binding sites: %w", err)
	}
	return written, nil
}

// lastNewline returns the offset just after the file's last '\n' (0 if none).
func lastNewline(f *os.File, size int64) (int64, error) {
	const block = 64 << 10
	buf := make([]byte, block)
	for end := size; end > 0; {
		start := max(end-block, 0)
		n, err := f.ReadAt(buf[:end-start], start)
		if err != nil && !errors.Is(err, io.EOF) {
			return 0, fmt.Errorf("read binding-site table: %w", err)
		}
		if i := bytes.LastIndexByte(buf[:n], '\n'); i >= 0 {
			return start + int64(i) + 1, nil
		}
		end = start
	}
	return 0, nil
}
