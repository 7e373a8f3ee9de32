package input

import (
	"fmt"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

// Prediction units: quota counts rows (the reference's wire), but a row may
// carry a `Substrates` list and ';'-separated candidate sequences, each
// predicted. Caps on the units of one row and of one job keep one request
// from buying unbounded work (DESIGN §9).

// UnitCaps are the caps (KINFLOW_MAX_UNITS_PER_ROW, _PER_JOB); 0: none.
type UnitCaps struct {
	PerRow int `json:"perRow"`
	PerJob int `json:"perJob"`
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
	// Error is the sentence a submit of this input would get (empty when
	// it is within the caps).
	Error string `json:"error,omitempty"`
}

// RowUnits is one row's units with their factors.
type RowUnits struct {
	Row        int `json:"row"`
	Units      int `json:"units"`
	Substrates int `json:"substrates"`
	Candidates int `json:"candidates"`
	Targets    int `json:"targets"`
}

// maxOverRows bounds the rows OverRow lists.
const maxOverRows = 20

// CountUnits counts the prediction units of t as the worker will expand them
// (units.Expand): per target, each candidate of a row is one unit, times
// the row's `Substrates` tokens when the target's method predicts each
// substrate on its own (expanded_pair with a `Substrates` column). With no
// targets (a /validate/ without a choice) it counts the most any method
// makes of each row: one target, every token its own unit. It keeps at most
// maxOverRows of the rows over caps.PerRow.
func CountUnits(cat *methods.Catalogue, t *Table, targets []string, chosen map[string]string, caps UnitCaps) UnitsReport {
	rep := UnitsReport{Caps: caps, OverRow: []RowUnits{}}
	seqCol := t.Col(ColProteinSequence)
	subsCol := -1
	if t.Has(ColSubstrates) && !t.Has(ColSubstrate) {
		subsCol = t.Col(ColSubstrates)
	}
	// perSub[i] is whether target i expands per substrate token.
	var perSub []bool
	for _, tg := range targets {
		d, ok := cat.Get(chosen[tg])
		perSub = append(perSub, ok && subsCol >= 0 && d.InputBehavior(methods.Target(tg)) == methods.BehaviorExpandedPair)
	}
	if len(targets) == 0 {
		perSub = []bool{subsCol >= 0}
	}
	for r, row := range t.Rows {
		cands := 1
		if seqCol >= 0 {
			cands = max(1, len(units.Split(cellOf(row, seqCol))))
		}
		subs := 1
		if subsCol >= 0 {
			subs = max(1, len(units.Split(cellOf(row, subsCol))))
		}
		n := 0
		for _, p := range perSub {
			if p {
				n += cands * subs
			} else {
				n += cands
			}
		}
		rep.Total += n
		if caps.PerRow > 0 && n > caps.PerRow && len(rep.OverRow) < maxOverRows {
			rep.OverRow = append(rep.OverRow, RowUnits{Row: r + 1, Units: n, Substrates: subs, Candidates: cands, Targets: len(perSub)})
		}
	}
	rep.OverJob = caps.PerJob > 0 && rep.Total > caps.PerJob
	if err := rep.Err(); err != nil {
		rep.Error = err.Msg
	}
	return rep
}

// Err is the submit error of a report over a cap, nil within the caps. The
// first row over the per-row cap wins over the job's total.
func (rep UnitsReport) Err() *Error {
	if len(rep.OverRow) > 0 {
		o := rep.OverRow[0]
		return &Error{Kind: KindInvalid, Msg: fmt.Sprintf(
			"Row %d asks for %d predictions (%d substrate(s) × %d candidate sequence(s) × %d target(s)); this server predicts at most %d per row. Split the row's Substrates or candidate lists over several rows.",
			o.Row, o.Units, o.Substrates, o.Candidates, o.Targets, rep.Caps.PerRow)}
	}
	if rep.OverJob {
		return &Error{Kind: KindInvalid, Msg: fmt.Sprintf(
			"This input asks for %d predictions (rows × substrates × candidate sequences × targets); this server predicts at most %d per job. Submit it as several smaller jobs.",
			rep.Total, rep.Caps.PerJob)}
	}
	return nil
}
