package input

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"unicode/utf8"
)

// DefaultMaxRows is KINFLOW_MAX_ROWS's default: the contract's 10,000-row
// limit on one validate or submit request.
const DefaultMaxRows = 10000

// MaxColumns is the most columns a table may have, CSV header or union of
// the JSON rows' keys. The input has 2 to 6 columns that kinflow reads plus
// whatever the user carries along (IDs, notes); 64 leaves room for that.
// The cap matters because the table is dense: without it a JSON `data`
// whose rows each bring a new key is an N × N table (10,000 rows in an
// 838 KiB body took the API to 3 GB). With it, the cell array is at most
// DefaultMaxRows × 64 × 16 B = 10 MiB on top of the cell text (≤ the body).
const MaxColumns = 64

// tooManyColumns is the 400 for a table wider than MaxColumns.
func tooManyColumns(what string) *Error {
	return invalidf("Too many columns: at most %d columns are accepted per request (%s).", MaxColumns, what)
}

// Table is a parsed input table. Cells are text; an empty cell stands for a
// missing value (pandas reads it as NaN in the reference), so "null" and ""
// are the same thing here.
type Table struct {
	// Columns are the header names in file order (JSON: first-seen order).
	// Duplicate names are made unique the way pandas does ("A", "A.1"), and
	// an empty name becomes "Unnamed: <i>".
	Columns []string
	// Rows are the data rows left after dropping all-empty rows.
	Rows []Row
	// RawRowCount is the number of data rows the CSV reader saw, all-empty
	// rows included and fully blank lines excluded: /validate/'s rowCount.
	RawRowCount int

	colIndex map[string]int
}

// Row is one data row.
type Row struct {
	// Index is the row's 0-based position among all data rows, counted
	// before all-empty rows were dropped; messages use it (the emptiness
	// rule names Index+2).
	Index int
	// Cells has one value per Table column ("" for a missing value).
	Cells []string
}

// Col returns the index of column name, or -1.
func (t *Table) Col(name string) int {
	if i, ok := t.colIndex[name]; ok {
		return i
	}
	return -1
}

// Has reports whether the table has column name (case-sensitive).
func (t *Table) Has(name string) bool { return t.Col(name) >= 0 }

// Cell returns row r's value in column c ("" when c < 0).
func (t *Table) Cell(r, c int) string {
	if c < 0 || c >= len(t.Rows[r].Cells) {
		return ""
	}
	return t.Rows[r].Cells[c]
}

// Column returns every row's value of column name ("" for each row when the
// column is absent).
func (t *Table) Column(name string) []string {
	c := t.Col(name)
	out := make([]string, len(t.Rows))
	if c < 0 {
		return out
	}
	for i := range t.Rows {
		out[i] = t.Rows[i].Cells[c]
	}
	return out
}

func (t *Table) finish(header []string) {
	t.Columns = uniqueColumns(header)
	t.colIndex = make(map[string]int, len(t.Columns))
	for i, c := range t.Columns {
		t.colIndex[c] = i
	}
}

// uniqueColumns names columns as pandas does: "Unnamed: i" for an empty
// header cell, ".1", ".2"… appended to repeated names.
func uniqueColumns(header []string) []string {
	out := make([]string, len(header))
	seen := make(map[string]bool, len(header))
	for i, h := range header {
		if h == "" {
			h = "Unnamed: " + strconv.Itoa(i)
		}
		name := h
		for n := 1; seen[name]; n++ {
			name = h + "." + strconv.Itoa(n)
		}
		seen[name] = true
		out[i] = name
	}
	return out
}

func allEmpty(cells []string) bool {
	for _, c := range cells {
		if c != "" {
			return false
		}
	}
	return true
}

// tooManyRows is the error for a table over the row limit.
func tooManyRows(max int) *Error {
	return &Error{Kind: KindTooManyRows, Msg: fmt.Sprintf("Too many rows: at most %d rows are accepted per request.", max)}
}

// csvError is a CSV that cannot be read. The validate handler shows it as
// "Could not parse CSV: …" and submit as "Could not read CSV file: …"
// (its step 8); CSVDetail gives the part after the colon.
func csvError(detail string, cause error) *Error {
	return &Error{Kind: KindInvalid, Msg: "Could not parse CSV: " + detail, Err: &csvDetailError{detail: detail, cause: cause}}
}

type csvDetailError struct {
	detail string
	cause  error
}

func (e *csvDetailError) Error() string { return e.detail }
func (e *csvDetailError) Unwrap() error { return e.cause }

// CSVDetail returns the reason part of a CSV parse error, or "" when err is
// not one.
func CSVDetail(err error) string {
	var d *csvDetailError
	if errors.As(err, &d) {
		return d.detail
	}
	return ""
}

// utf8BOM is stripped from the start of an upload (Excel writes it).
var utf8BOM = []byte{0xEF, 0xBB, 0xBF}

// cellSlab is how many cells are allocated at once for row storage: one
// allocation per slab instead of one per row keeps a 10,000-row parse cheap.
const cellSlab = 4096

// ParseCSV reads a UTF-8 CSV upload (optional BOM, header row) as the
// reference's CSV reader does: fully blank lines are skipped, short rows are
// padded with missing values, a row with more fields than the header is an
// error, and all-empty rows are dropped after being counted in RawRowCount.
// It stops reading, with a KindTooManyRows error, as soon as the table has
// more than maxRows data rows (maxRows <= 0: no limit). Errors are *Error.
func ParseCSV(r io.Reader, maxRows int) (*Table, error) {
	br := bufio.NewReaderSize(r, 64*1024)
	if head, err := br.Peek(3); err == nil && bytes.Equal(head, utf8BOM) {
		_, _ = br.Discard(3)
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1
	cr.LazyQuotes = true // the reference's reader tolerates stray quotes
	cr.ReuseRecord = true

	header, err := cr.Read()
	if errors.Is(err, io.EOF) {
		return nil, csvError("no columns to parse from file", err)
	}
	if err != nil {
		return nil, csvReadErr(err)
	}
	if err := checkUTF8(header, cr); err != nil {
		return nil, err
	}
	if len(header) > MaxColumns {
		return nil, tooManyColumns(fmt.Sprintf("the header has %d", len(header)))
	}
	header = append([]string(nil), header...)
	t := &Table{}
	var slab []string
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, csvReadErr(err)
		}
		if len(rec) > len(header) {
			line, _ := cr.FieldPos(0)
			return nil, csvError(fmt.Sprintf("expected %d fields in line %d, saw %d", len(header), line, len(rec)), nil)
		}
		if err := checkUTF8(rec, cr); err != nil {
			return nil, err
		}
		idx := t.RawRowCount
		t.RawRowCount++
		if maxRows > 0 && t.RawRowCount > maxRows {
			return nil, tooManyRows(maxRows)
		}
		if allEmpty(rec) {
			continue
		}
		if len(slab) < len(header) {
			slab = make([]string, max(cellSlab, len(header)))
		}
		cells := slab[:len(header):len(header)]
		slab = slab[len(header):]
		copy(cells, rec) // missing trailing fields stay ""
		t.Rows = append(t.Rows, Row{Index: idx, Cells: cells})
	}
	t.finish(header)
	return t, nil
}

func csvReadErr(err error) *Error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return csvError(fmt.Sprintf("line %d: %v", pe.Line, pe.Err), err)
	}
	e := readErr("", err)
	if e.Kind == KindTooLarge {
		return e
	}
	return csvError("read failed", err)
}

func checkUTF8(rec []string, cr *csv.Reader) *Error {
	for _, f := range rec {
		if !utf8.ValidString(f) {
			line, _ := cr.FieldPos(0)
			return csvError(fmt.Sprintf("line %d is not valid UTF-8", line), nil)
		}
	}
	return nil
}

// WriteCSV writes t (header, then its rows after all-empty rows were
// dropped) as the job's input.csv: comma-separated, "\n" line ends and
// minimal quoting like Python's csv module (a field is quoted only when it
// holds a comma, a quote or a line break; a lone empty field is written as
// "" so that the line is not blank).
func WriteCSV(w io.Writer, t *Table) error {
	bw := bufio.NewWriter(w)
	writeRec := func(rec []string) {
		if len(rec) == 1 && rec[0] == "" {
			bw.WriteString(`""`)
		} else {
			for i, f := range rec {
				if i > 0 {
					bw.WriteByte(',')
				}
				if strings.ContainsAny(f, ",\"\r\n") {
					bw.WriteByte('"')
					bw.WriteString(strings.ReplaceAll(f, `"`, `""`))
					bw.WriteByte('"')
				} else {
					bw.WriteString(f)
				}
			}
		}
		bw.WriteByte('\n')
	}
	writeRec(t.Columns)
	for _, r := range t.Rows {
		writeRec(r.Cells)
	}
	if err := bw.Flush(); err != nil {
		return fmt.Errorf("write input CSV: %w", err)
	}
	return nil
}
