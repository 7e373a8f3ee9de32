package input

import (
	"fmt"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

// Prediction units: quota counts rows (the reference's wire), but a row may
// carry a `Substrates` list and ';'-separated candidate sequences, each
// predicted. Caps on the units of one row and of one job keep one request
// from buying unbounded work, since quota counts rows.

// UnitCaps are the caps (KINFLOW_MAX_UNITS_PER_ROW, _PER_JOB,
// KINFLOW_MAX_CELL_BYTES, KINFLOW_MAX_ROW_LIST_BYTES); 0: none.
type UnitCaps struct {
	PerRow int `json:"perRow"`
	PerJob int `json:"perJob"`
	// CellBytes caps one cell; RowListBytes the list cells of one row
	// (Protein Sequence, Substrates, Products) together.
	CellBytes    int `json:"cellBytes,omitempty"`
	RowListBytes int `json:"rowListBytes,omitempty"`
}

// UnitsReport is the units part of /validate/'s report.
type UnitsReport struct {
	// Total is the job's prediction units.
	Total int `json:"total"`
	// Caps are the server's caps.
	Caps UnitCaps `json:"caps"`
	// OverRow lists the rows over the per-row cap (1-based, as users count
	// them), at most maxOverRows of them.
	OverRow []RowUnits `json:"overRow"`
	// OverJob is set when Total is over the per-job cap.
	OverJob bool `json:"overJob"`
	// OverBytes lists the cells (or rows' list cells together) over
	// caps.CellBytes / caps.RowListBytes, at most maxOverRows of them.
	OverBytes []RowBytes `json:"overBytes,omitempty"`
	// Error is the sentence a submit of this input would get (empty when
	// it is within the caps).
	Error string `json:"error,omitempty"`
}

// RowUnits is one row's units with their factors.
type RowUnits struct {
	Row        int `json:"row"`
	Units      int `json:"units"`
	Substrates int `json:"substrates"`
	// Products counts the row's products when a method reads them (the
	// full-reaction method D): each is a unit of its work too.
	Products   int `json:"products,omitempty"`
	Candidates int `json:"candidates"`
	Targets    int `json:"targets"`
}

// RowBytes is one cell, or one row's list cells together (Column empty),
// over its byte cap.
type RowBytes struct {
	Row    int    `json:"row"`
	Column string `json:"column,omitempty"`
	Bytes  int    `json:"bytes"`
	Cap    int    `json:"cap"`
}

// Text is the sentence naming the cell and the cap.
func (o RowBytes) Text() string {
	if o.Column != "" {
		return fmt.Sprintf("The %s cell holds %d bytes; this server takes at most %d bytes per cell.", o.Column, o.Bytes, o.Cap)
	}
	return fmt.Sprintf("The row's Protein Sequence, Substrates and Products cells hold %d bytes together; this server takes at most %d per row.", o.Bytes, o.Cap)
}

// countBytes adds to rep the cells over caps.CellBytes and the rows whose
// list cells are over caps.RowListBytes.
func countBytes(rep *UnitsReport, t *Table, caps UnitCaps) {
	if caps.CellBytes <= 0 && caps.RowListBytes <= 0 {
		return
	}
	var lists []int
	for _, name := range []string{ColProteinSequence, ColSubstrates, ColProducts} {
		if c := t.Col(name); c >= 0 {
			lists = append(lists, c)
		}
	}
	for r, row := range t.Rows {
		if len(rep.OverBytes) >= maxOverRows {
			return
		}
		if caps.CellBytes > 0 {
			for c, cell := range row.Cells {
				if len(cell) > caps.CellBytes && len(rep.OverBytes) < maxOverRows {
					name := ""
					if c < len(t.Columns) {
						name = t.Columns[c]
					}
					rep.OverBytes = append(rep.OverBytes, RowBytes{Row: r + 1, Column: name, Bytes: len(cell), Cap: caps.CellBytes})
				}
			}
		}
		if caps.RowListBytes > 0 {
			n := 0
			for _, c := range lists {
				n += len(cellOf(row, c))
			}
			if n > caps.RowListBytes && len(rep.OverBytes) < maxOverRows {
				rep.OverBytes = append(rep.OverBytes, RowBytes{Row: r + 1, Bytes: n, Cap: caps.RowListBytes})
			}
		}
	}
}

// Factors is the row's units as the product the user can act on:
// "S substrate(s) × C candidate sequence(s) × T target(s)", with the
// products added to the substrates when a method reads them.
func (o RowUnits) Factors() string {
	if o.Products > 0 {
		return fmt.Sprintf("(%d substrate(s) + %d product(s)) × %d candidate sequence(s) × %d target(s)", o.Substrates, o.Products, o.Candidates, o.Targets)
	}
	return fmt.Sprintf("%d substrate(s) × %d candidate sequence(s) × %d target(s)", o.Substrates, o.Candidates, o.Targets)
}

// maxOverRows bounds the rows OverRow lists.
const maxOverRows = 20

// How a target's method takes a row's lists, for counting (listWork).
const (
	workOne       = iota // one unit per candidate
	workSubs             // per candidate, every substrate token
	workSubsProds        // per candidate, every substrate and product token
)

// CountUnits counts the prediction units of t: the work the method's
// program receives per row and target. Each candidate of a row is one unit,
// times the row's `Substrates` tokens when the target's method predicts
// each substrate on its own (expanded_pair, one call per token) or sends the
// ordered list whole to the model for each candidate (native_multi, method
// E's kcat: the model reads every token); the full-reaction method D
// (native_full_reaction) reads every substrate and every product for each
// candidate, so it counts (substrates + products) × candidates. Counting
// only one unit per candidate for the native methods let one row buy
// gigabytes of work. With no targets (a /validate/ without a
// choice) it counts the most any method makes of each row. It keeps at most
// maxOverRows of the rows over caps.PerRow.
func CountUnits(cat *methods.Catalogue, t *Table, targets []string, chosen map[string]string, caps UnitCaps) UnitsReport {
	rep := UnitsReport{Caps: caps, OverRow: []RowUnits{}}
	seqCol := t.Col(ColProteinSequence)
	// listCol is the `Substrates` list. A single-substrate method reads it
	// only when the table has no `Substrate` column (with both, the older
	// wire, `Substrate` feeds them: subsCol); the full-reaction method D
	// reads `Substrates` and `Products` whatever else the table has.
	listCol, subsCol, prodCol := t.Col(ColSubstrates), -1, t.Col(ColProducts)
	if !t.Has(ColSubstrate) {
		subsCol = listCol
	}
	// work[i] is how target i's method takes the row's lists.
	var work []int
	for _, tg := range targets {
		w := workOne
		if d, ok := cat.Get(chosen[tg]); ok {
			switch d.InputBehavior(methods.Target(tg)) {
			case methods.BehaviorExpandedPair, methods.BehaviorNativeMulti:
				if subsCol >= 0 {
					w = workSubs
				}
			case methods.BehaviorNativeFullReaction:
				if listCol >= 0 {
					w = workSubsProds
				}
			}
		}
		work = append(work, w)
	}
	if len(targets) == 0 {
		switch {
		case listCol >= 0 && prodCol >= 0:
			work = []int{workSubsProds}
		case subsCol >= 0:
			work = []int{workSubs}
		default:
			work = []int{workOne}
		}
	}
	for r, row := range t.Rows {
		cands := 1
		if seqCol >= 0 {
			cands = max(1, units.Count(cellOf(row, seqCol)))
		}
		subs, list, prods := 1, 1, 0
		if subsCol >= 0 {
			subs = max(1, units.Count(cellOf(row, subsCol)))
		}
		if listCol >= 0 {
			list = max(1, units.Count(cellOf(row, listCol)))
		}
		n, withProds := 0, false
		for _, w := range work {
			switch w {
			case workSubs:
				n += cands * subs
			case workSubsProds:
				if !withProds && prodCol >= 0 {
					prods = units.Count(cellOf(row, prodCol))
				}
				withProds = true
				n += cands * (list + prods)
			default:
				n += cands
			}
		}
		rep.Total += n
		if caps.PerRow > 0 && n > caps.PerRow && len(rep.OverRow) < maxOverRows {
			ru := RowUnits{Row: r + 1, Units: n, Substrates: subs, Candidates: cands, Targets: len(work)}
			if withProds {
				ru.Substrates, ru.Products = list, prods
			}
			rep.OverRow = append(rep.OverRow, ru)
		}
	}
	rep.OverJob = caps.PerJob > 0 && rep.Total > caps.PerJob
	countBytes(&rep, t, caps)
	if err := rep.Err(); err != nil {
		rep.Error = err.Msg
	}
	return rep
}

// Err is the submit error of a report over a cap, nil within the caps. A
// cell over its byte cap comes first, then the first row over the per-row
// cap, then the job's total.
func (rep UnitsReport) Err() *Error {
	if len(rep.OverBytes) > 0 {
		o := rep.OverBytes[0]
		return &Error{Kind: KindInvalid, Msg: fmt.Sprintf("Row %d: %s Split it over several rows.", o.Row, o.Text())}
	}
	if len(rep.OverRow) > 0 {
		o := rep.OverRow[0]
		return &Error{Kind: KindInvalid, Msg: fmt.Sprintf(
			"Row %d asks for %d predictions (%s); this server predicts at most %d per row. Split the row's Substrates or candidate lists over several rows.",
			o.Row, o.Units, o.Factors(), rep.Caps.PerRow)}
	}
	if rep.OverJob {
		return &Error{Kind: KindInvalid, Msg: fmt.Sprintf(
			"This input asks for %d predictions (rows × substrates × candidate sequences × targets); this server predicts at most %d per job. Submit it as several smaller jobs.",
			rep.Total, rep.Caps.PerJob)}
	}
	return nil
}
