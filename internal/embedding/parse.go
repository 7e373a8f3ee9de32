package embedding

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
)

// MaxSequenceFileBytes bounds what ParseSequenceFile reads: 10,000 rows of
// 10,000-residue sequences with their other columns fit well below it, and
// it keeps a wrong file (a disk image) from exhausting memory.
const MaxSequenceFileBytes = 512 << 20

// ErrNoSequenceColumn is returned for a CSV file without a `Protein Sequence` column.
var ErrNoSequenceColumn = errors.New("CSV has no `Protein Sequence` column")

// ParseSequenceFile reads sequences from FASTA (the first non-blank line
// starts with '>') or CSV with a `Protein Sequence` column, in file order.
// Sequences are returned as read: FASTA lines of one record are joined with
// their surrounding whitespace removed; CSV cells are returned untrimmed.
// Normalisation is the caller's (NormaliseSequences).
func ParseSequenceFile(r io.Reader) ([]string, error) {
	br := bufio.NewReaderSize(io.LimitReader(r, MaxSequenceFileBytes+1), 64<<10)
	head, _ := br.Peek(4096)
	trimmed := bytes.TrimLeft(bytes.TrimPrefix(head, []byte("\xef\xbb\xbf")), " \t\r\n")
	if len(trimmed) > 0 && trimmed[0] == '>' {
		return ParseFASTA(br)
	}
	return ParseCSV(br)
}

// ParseFASTA reads FASTA records: a header line starting with '>' followed by
// sequence lines, which are joined after trimming each. Lines before the
// first header are an error; a record with no sequence lines yields "".
func ParseFASTA(r io.Reader) ([]string, error) {
	sc := bufio.NewScanner(io.LimitReader(r, MaxSequenceFileBytes+1))
	// One line may hold a whole unwrapped sequence.
	sc.Buffer(make([]byte, 64<<10), MaxSequenceFileBytes)
	var (
		out    []string
		cur    strings.Builder
		inRec  bool
		lineNo int
		total  int
	)
	for sc.Scan() {
		lineNo++
		line := sc.Bytes()
		total += len(line) + 1
		if total > MaxSequenceFileBytes {
			return nil, fmt.Errorf("FASTA larger than %d bytes", MaxSequenceFileBytes)
		}
		if lineNo == 1 {
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		// A lone '\r' ends a line too (classic Mac line endings).
		for _, part := range bytes.Split(line, []byte("\r")) {
			t := bytes.TrimSpace(part)
			if len(t) > 0 && t[0] == '>' {
				if inRec {
					out = append(out, cur.String())
					cur.Reset()
				}
				inRec = true
				continue
			}
			if len(t) == 0 || t[0] == ';' {
				continue
			}
			if !inRec {
				return nil, fmt.Errorf("FASTA line %d: sequence before the first '>' header", lineNo)
			}
			cur.Write(t)
		}
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("read FASTA: %w", err)
	}
	if inRec {
		out = append(out, cur.String())
	}
	return out, nil
}

// ParseCSV reads the `Protein Sequence` column of a CSV file with a header
// row. Rows may have differing field counts; a row too short for the column
// yields "".
func ParseCSV(r io.Reader) ([]string, error) {
	lr := &io.LimitedReader{R: r, N: MaxSequenceFileBytes + 1}
	cr := csv.NewReader(lr)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err == io.EOF {
		return nil, ErrNoSequenceColumn
	}
	if err != nil {
		return nil, fmt.Errorf("read CSV header: %w", err)
	}
	col := -1
	for i, h := range header {
		if i == 0 {
			h = strings.TrimPrefix(h, "\ufeff")
		}
		if strings.TrimSpace(h) == methods.ProteinSequenceColumn {
			col = i
			break
		}
	}
	if col < 0 {
		return nil, ErrNoSequenceColumn
	}
	var out []string
	for {
		rec, err := cr.Read()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("read CSV: %w", err)
		}
		if lr.N <= 0 {
			return nil, fmt.Errorf("CSV larger than %d bytes", MaxSequenceFileBytes)
		}
		if col < len(rec) {
			out = append(out, strings.Clone(rec[col]))
		} else {
			out = append(out, "")
		}
	}
	return out, nil
}
