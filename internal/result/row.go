package result

import (
	"encoding/json"
	"strconv"
	"strings"

	"github.com/kinflow/kinflow/internal/experimental"
	"github.com/kinflow/kinflow/internal/jobfiles"
	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

// cell is one target's part of a row.
type cell struct {
	cells [3]string
	// rangeCells are a range target's midpoint and experimental cells.
	rangeCells [2]string
	// full: the target has a value (or an experimental one) in this row.
	full bool
	// failed is the reason the target has no value ("" when it has one).
	failed string
	// selected is the candidate whose value the cell shows (-1: none).
	selected int
	unc      *units.Uncertainty
	// sent: some unit of the row went to the engine or the cache;
	// fromCache: every such unit came from the cache.
	sent, fromCache bool
}

// row appends row r's cells to record and counts the row in the summary.
func (b *builder) row(r int, record []string) []string {
	full, fromCache, sent := true, true, false
	failed := b.skip[r]
	kcatSelected := -1
	uncs := make([]*units.Uncertainty, len(b.stages))
	for i := range b.stages {
		st := &b.stages[i]
		c := b.cell(st, r)
		record = append(record, c.cells[:]...)
		if st.rng.IsRange() {
			record = append(record, c.rangeCells[:]...)
		}
		full = full && c.full
		fromCache = fromCache && c.fromCache
		sent = sent || c.sent
		if failed == "" {
			failed = c.failed
		}
		if st.target == "kcat" {
			kcatSelected = c.selected
		}
		uncs[i] = c.unc
	}
	if failed != "" {
		b.skipped[failed] = append(b.skipped[failed], r)
	}
	if full && len(b.stages) > 0 {
		b.out.FullyPredicted++
		if fromCache && sent {
			b.out.FullyCached++
		}
		if sent {
			b.out.CachedRows = append(b.out.CachedRows, b.table.Rows[r].Cells)
		}
	}
	for _, c := range b.inputCols {
		record = append(record, b.table.Rows[r].Cells[c])
	}
	if b.simCols {
		mean, mx := b.an.SimilarityCells(r, kcatSelected)
		record = append(record, mean, mx)
	}
	for i, st := range b.stages {
		if st.unc {
			record = append(record, uncertaintyCells(uncs[i])...)
		}
	}
	return record
}

// cell is stage st's part of row r: the reduced value of the row's units
// (units.Reduce), an experimental value that replaces it, or the row's
// skip reason.
func (b *builder) cell(st *stage, r int) cell {
	c := cell{selected: -1, fromCache: st.has}
	var reduced units.Cell
	var us []units.Unit
	var rs []units.Result
	legacy := false
	var model *float64
	if st.has {
		us, rs = st.unitsOf(r)
		for k := range us {
			if us[k].Skip != "" {
				continue
			}
			c.sent = true
			if rs[k].Cached == nil {
				c.fromCache = false
			}
		}
		shape := st.rows.Shapes[r]
		legacy = !st.rows.CandidateMode && !shape.PerSubstrate
		if legacy && len(us) == 1 {
			model = rs[0].Value
		}
		opts := units.Options{CandidateMode: st.rows.CandidateMode}
		if st.pred.Synthetic {
			opts.LegacyExtra = SyntheticExtraInfo
		}
		reduced = units.Reduce(st.target, shape, us, rs, opts)
		c.selected = reduced.Selected
	}
	// Experimental values apply to rows of the older shape (one sequence,
	// one substrate input), looked up per row.
	if legacy || !st.has {
		if cells, ok := experimentalCells(b.an, st.target, st.display, r, model, b.skip[r]); ok {
			c.cells, c.full = cells, true
			if st.rng.IsRange() {
				// A measured value is no class: its range and midpoint
				// stay blank, the value has its own column.
				c.rangeCells[1], c.cells[0] = cells[0], ""
			}
			return c
		}
	}
	switch {
	case b.skip[r] != "":
		c.cells = [3]string{"", b.skip[r], ""}
	case !st.has:
	default:
		c.cells = [3]string{reduced.Value, reduced.Source, reduced.Extra}
		c.full = reduced.Filled
		if reduced.Filled && st.unc {
			c.unc = cellUncertainty(us, rs, reduced.Selected)
		}
		if !reduced.Filled {
			c.failed = reduced.Source
		}
		if reduced.Filled && st.rng.IsRange() {
			c.rangeCells[0] = reduced.Value
			text, ok := rangeText(st.rng, reduced.Value)
			if !ok {
				// Every served answer was checked against the classes;
				// a cell that still names none is never shown as one.
				c.cells, c.rangeCells, c.full = [3]string{"", reasonNotAClass, ""}, [2]string{}, false
				c.failed = reasonNotAClass
				return c
			}
			c.cells[0] = text
		}
	}
	return c
}

// reasonNotAClass is the Source of a range cell whose value names no class.
const reasonNotAClass = "Prediction is not a known range class"

// rangeText is the range text of a range target's reduced value: the
// class of a single midpoint, or a JSON list of classes (null for a
// missing one) for an array cell; false when a value is not a class
// midpoint.
func rangeText(o methods.Output, value string) (string, bool) {
	if !strings.HasPrefix(value, "[") {
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return "", false
		}
		i, ok := o.ClassOf(v)
		if !ok {
			return "", false
		}
		return o.Label(i), true
	}
	var vals []*float64
	if err := json.Unmarshal([]byte(value), &vals); err != nil {
		return "", false
	}
	texts := make([]*string, len(vals))
	for k, v := range vals {
		if v == nil {
			continue
		}
		i, ok := o.ClassOf(*v)
		if !ok {
			return "", false
		}
		t := o.Label(i)
		texts[k] = &t
	}
	enc, err := json.Marshal(texts)
	if err != nil {
		return "", false
	}
	return string(enc), true
}

// cellUncertainty is the uncertainty of a row's scalar value cell: the
// uncertainty of its one unit, or of the unit of the selected candidate
// (kcat's best candidate). An array cell (one value per substrate or
// candidate) has none in these columns.
func cellUncertainty(us []units.Unit, rs []units.Result, selected int) *units.Uncertainty {
	if len(us) == 1 {
		return rs[0].Uncertainty
	}
	if selected < 0 {
		return nil
	}
	var found *units.Uncertainty
	n := 0
	for k, u := range us {
		if u.Candidate == selected {
			found, n = rs[k].Uncertainty, n+1
		}
	}
	if n != 1 {
		return nil
	}
	return found
}

// uncertaintyCells are the three uncertainty cells of u (blank when nil or
// for a part the method did not give).
func uncertaintyCells(u *units.Uncertainty) []string {
	if u == nil {
		return []string{"", "", ""}
	}
	f := func(v *float64) string {
		if v == nil {
			return ""
		}
		return strconv.FormatFloat(*v, 'g', -1, 64)
	}
	return []string{f(&u.Total), f(u.Aleatoric), f(u.Epistemic)}
}

// experimentalCells are the (value, Source, Extra Info) cells of row r for
// target when the job's experimental look-up matched it (docs/similarity.md,
// "Experimental values"): the
// measured value, the table's Source label and the Extra Info sentences,
// which name the model's own value when it made one. A row skipped for its
// sequence keeps its skip reason instead (the cross-target rule blanks after
// the overrides).
func experimentalCells(an jobfiles.Annotations, target, display string, r int, model *float64, skip string) ([3]string, bool) {
	if skip != "" {
		return [3]string{}, false
	}
	rec, ok := an.ExperimentalMatch(target, r)
	if !ok {
		return [3]string{}, false
	}
	param := experimental.Param(target)
	v, ok := rec.Value(param)
	if !ok {
		return [3]string{}, false
	}
	return [3]string{experimental.FormatFloat(v), rec.Source(), rec.ExtraInfo(param, model, display)}, true
}
