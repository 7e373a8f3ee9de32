// Package experimental looks up measured kinetic values (docs/similarity.md,
// "Experimental values"):
// operator-supplied tables MEDIA/experimental/kcat_experimental.csv and
// km_experimental.csv, loaded once per process (again only when a file
// changes) and indexed by (substrate InChI, protein sequence), with the
// reference's Source labels and Extra Info sentences.
package experimental

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kinflow/kinflow/internal/units"
)

// Param is the kinetic parameter a table holds.
type Param string

// The two tables.
const (
	Kcat Param = "kcat"
	Km   Param = "Km"
)

// ErrNotConfigured is returned when a table file is absent.
var ErrNotConfigured = errors.New("experimental table not configured")

// FileName is the table's file name under the experimental folder.
func (p Param) FileName() string {
	if p == Km {
		return "km_experimental.csv"
	}
	return "kcat_experimental.csv"
}

// ValueColumn is the table's value column (kcat_value or km_value).
func (p Param) ValueColumn() string {
	if p == Km {
		return "km_value"
	}
	return "kcat_value"
}

// sdColumn is the standard-deviation column (kcat_SD or km_SD).
func (p Param) sdColumn() string {
	if p == Km {
		return "km_SD"
	}
	return "kcat_SD"
}

// Record is one matched table row: column name → cell text.
type Record map[string]string

// Table is one loaded, indexed table.
type Table struct {
	param Param
	index map[key]Record
	rows  int
}

type key struct{ inchi, seq string }

// Rows is the number of data rows read.
func (t *Table) Rows() int { return t.rows }

// Lookup returns the first row whose substrate_inchi and protein_sequence
// equal inchi and seq exactly.
func (t *Table) Lookup(inchi, seq string) (Record, bool) {
	r, ok := t.index[key{inchi, seq}]
	return r, ok
}

// Tables loads the tables under Dir on first use and keeps them; a table is
// read again only when its file's size or modification time changes. Safe
// for concurrent use.
type Tables struct {
	// Dir is MEDIA/experimental.
	Dir string

	mu     sync.Mutex
	loaded map[Param]*loadedTable
}

type loadedTable struct {
	size  int64
	mtime time.Time
	table *Table
}

// Get returns the loaded table of p, or ErrNotConfigured when its file is
// absent.
func (ts *Tables) Get(p Param) (*Table, error) {
	path := filepath.Join(ts.Dir, p.FileName())
	fi, err := os.Stat(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil, fmt.Errorf("%s: %w", p.FileName(), ErrNotConfigured)
	}
	if err != nil {
		return nil, fmt.Errorf("experimental table %s: %w", p.FileName(), err)
	}
	ts.mu.Lock()
	defer ts.mu.Unlock()
	if l, ok := ts.loaded[p]; ok && l.size == fi.Size() && l.mtime.Equal(fi.ModTime()) {
		return l.table, nil
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("experimental table %s: %w", p.FileName(), err)
	}
	defer f.Close()
	t, err := Read(f, p)
	if err != nil {
		return nil, fmt.Errorf("experimental table %s: %w", p.FileName(), err)
	}
	if ts.loaded == nil {
		ts.loaded = map[Param]*loadedTable{}
	}
	ts.loaded[p] = &loadedTable{size: fi.Size(), mtime: fi.ModTime(), table: t}
	return t, nil
}

// columns are the table columns kinflow uses (the reference's table
// layout); other
// columns are not kept in memory.
var columns = []string{"substrate_inchi", "protein_sequence", "protein_ID", "protein_type", "mutation",
	"kcat_value", "km_value", "kcat_SD", "km_SD", "all_substrates", "all_products", "temperature", "ph",
	"from_brenda", "from_sabio", "from_uniprot"}

// Read parses a table (CSV with a header row). It needs the columns
// substrate_inchi, protein_sequence and p's value column; the first row of
// each (InChI, sequence) pair wins, as in the reference.
func Read(r io.Reader, p Param) (*Table, error) {
	cr := csv.NewReader(r)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	header, err := cr.Read()
	if err != nil {
		return nil, fmt.Errorf("read header: %w", err)
	}
	pos := map[string]int{}
	for i, h := range header {
		h = strings.TrimPrefix(h, "\ufeff")
		if _, dup := pos[h]; !dup {
			pos[h] = i
		}
	}
	for _, need := range []string{"substrate_inchi", "protein_sequence", p.ValueColumn()} {
		if _, ok := pos[need]; !ok {
			return nil, fmt.Errorf("missing column %q", need)
		}
	}
	t := &Table{param: p, index: map[key]Record{}}
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, fmt.Errorf("row %d: %w", t.rows+2, err)
		}
		t.rows++
		cell := func(name string) string {
			if i, ok := pos[name]; ok && i < len(rec) {
				return rec[i]
			}
			return ""
		}
		k := key{cell("substrate_inchi"), cell("protein_sequence")}
		if _, seen := t.index[k]; seen || k.inchi == "" || k.seq == "" {
			continue
		}
		row := Record{}
		for _, c := range columns {
			if v := cell(c); v != "" {
				row[c] = strings.Clone(v)
			}
		}
		t.index[key{strings.Clone(k.inchi), strings.Clone(k.seq)}] = row
	}
	return t, nil
}

// Nullish reports whether a cell counts as absent: empty, nan, none or "-"
// (case-insensitive, after trimming).
func Nullish(v string) bool {
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "", "nan", "none", "-":
		return true
	}
	return false
}

// Value returns the record's value for p: the number when the cell parses,
// and whether there is one.
func (r Record) Value(p Param) (float64, bool) {
	v := r[p.ValueColumn()]
	if Nullish(v) {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	if err != nil || math.IsNaN(f) || math.IsInf(f, 0) {
		return 0, false
	}
	return f, true
}

// flag reports whether a 0/1 column holds 1 (also "1.0").
func (r Record) flag(col string) bool {
	f, err := strconv.ParseFloat(strings.TrimSpace(r[col]), 64)
	return err == nil && f == 1
}

// Source is the Source label of the record: BRENDA, Sabio-RK, UniProt, or
// Experimental, the first flag set in that order.
func (r Record) Source() string {
	switch {
	case r.flag("from_brenda"):
		return "BRENDA"
	case r.flag("from_sabio"):
		return "Sabio-RK"
	case r.flag("from_uniprot"):
		return "UniProt"
	}
	return "Experimental"
}

// text is a cell as the reference printed it: numbers in Python's float
// form (the tables' numeric columns are read as floats), other text as is.
func text(v string) string {
	t := strings.TrimSpace(v)
	if f, err := strconv.ParseFloat(t, 64); err == nil && !strings.ContainsAny(t, "xX") {
		return FormatFloat(f)
	}
	return v
}

// ExtraInfo is the Extra Info sentence set of a matched record, joined by
// ". " as the reference writes it:
// where it is reported and for which protein (with its type and mutation),
// the standard deviation, the full reaction, temperature and pH, and the
// model's own value when there was one (prediction nil or 0: omitted).
func (r Record) ExtraInfo(p Param, prediction *float64, displayName string) string {
	id := r["protein_ID"]
	if id == "" {
		id = "unknown ID"
	}
	first := fmt.Sprintf("This is reported in %s for protein %s", r.Source(), id)
	var descr []string
	if v := r["protein_type"]; !Nullish(v) {
		descr = append(descr, v)
	}
	if m := r["mutation"]; !Nullish(m) {
		if strings.Contains(strings.ToLower(m), "mutant") {
			m = strings.TrimSpace(strings.ReplaceAll(m, "mutant", ""))
		}
		descr = append(descr, m)
	}
	if len(descr) > 0 {
		first += " (" + strings.Join(descr, " ") + ")"
	}
	parts := []string{first}
	if sd := r[p.sdColumn()]; Nullish(sd) {
		parts = append(parts, "Standard deviation is not reported")
	} else {
		parts = append(parts, "Standard deviation is "+text(sd))
	}
	if s, q := r["all_substrates"], r["all_products"]; !Nullish(s) && !Nullish(q) {
		parts = append(parts, "Full reaction is: "+s+" --> "+q)
	}
	var cond []string
	if t := r["temperature"]; !Nullish(t) {
		cond = append(cond, "temperature "+text(t))
	}
	if ph := r["ph"]; !Nullish(ph) {
		cond = append(cond, "pH "+text(ph))
	}
	if len(cond) > 0 {
		parts = append(parts, "at "+strings.Join(cond, " and "))
	}
	if prediction != nil && *prediction != 0 {
		parts = append(parts, fmt.Sprintf("Prediction by %s is %s", displayName, FormatFloat(*prediction)))
	}
	return strings.Join(parts, ". ")
}

// FormatFloat formats v as Python's repr(float), as the result file writes
// numbers (units.FormatFloat, the one formatter of result cells).
// Empty for Inf and NaN.
func FormatFloat(v float64) string {
	if math.IsInf(v, 0) || math.IsNaN(v) {
		return ""
	}
	return units.FormatFloat(v)
}
