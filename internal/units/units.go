// Package units is kinflow's prediction unit: one engine prediction for one
// (input row, target, candidate sequence, substrate) combination, and the
// reductions that fold a row's units back into that row's three result
// cells (docs/api.md, "Substrate lists, candidate sequences and per-target
// results").
//
// A stage (one target and its method) expands each input row into units when
// it is prepared: one unit per candidate sequence of `Protein Sequence`
// times, for the expanded_pair behaviour over a `Substrates` column, one
// unit per substrate token. The engine predicts units exactly as
// it predicted rows before; Finalize reduces them with Reduce. A row of the
// older wire (one sequence, a `Substrate` cell) is exactly one unit whose
// reduction gives the cells kinflow always wrote.
//
// The unit is also the key of the prediction result cache: its fields are
// everything the engine is given for it, so a cached value is never served
// for different input.
package units

import (
	"slices"
	"strings"
	"time"
)

// Input behaviours of a method for one target, as /methods/ shows them in
// inputBehaviorByTarget.
const (
	// ExpandedPair is the default of every single-substrate method: each
	// token of a `Substrates` list is one unit; `Products` is carried, not used.
	ExpandedPair = "expanded_pair"
	// NativeMulti sends the ordered substrate list to the model whole
	// (method E's kcat).
	NativeMulti = "native_multi"
	// NativeFullReaction is the full-reaction method (D): Substrates +
	// Products as before.
	NativeFullReaction = "native_full_reaction"
)

// Separator is the list separator of `Substrates`, `Products` and
// `Protein Sequence`.
const Separator = ";"

// nullWords are whole-cell spellings of an empty list (any case).
var nullWords = map[string]bool{"none": true, "nan": true, "<na>": true, "nat": true}

// IsNullCell reports whether a cell is empty or one of the null words
// (`none`, `nan`, `<na>`, `nat`, any case) after trimming.
func IsNullCell(cell string) bool {
	t := strings.TrimSpace(cell)
	return t == "" || nullWords[strings.ToLower(t)]
}

// Split is the list rule of `Substrates`, `Products` and candidate
// sequences: the cell's ';'-separated tokens,
// each trimmed, empty fragments dropped; a null cell is the empty list. No
// escaping beyond CSV quoting.
func Split(cell string) []string {
	if IsNullCell(cell) {
		return nil
	}
	parts := strings.Split(cell, Separator)
	out := parts[:0]
	for _, p := range parts {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// Count is len(Split(cell)) without building the list: the caps count the
// tokens of every row before anything else is done with it.
func Count(cell string) int {
	if IsNullCell(cell) {
		return 0
	}
	n := 0
	for len(cell) > 0 {
		tok := cell
		if i := strings.Index(cell, Separator); i >= 0 {
			tok, cell = cell[:i], cell[i+len(Separator):]
		} else {
			cell = ""
		}
		if strings.TrimSpace(tok) != "" {
			n++
		}
	}
	return n
}

// Candidate is one candidate sequence of a row (a `;`-separated
// `Protein Sequence` cell lists several).
type Candidate struct {
	// Sequence is the candidate as given (trimmed when the cell was a list).
	Sequence string `json:"sequence"`
	// Skip is why the candidate is not predicted (too long in skip mode,
	// invalid residues); empty for a predicted candidate.
	Skip string `json:"skip,omitempty"`
}

// Unit is one prediction unit. Its JSON form is stored in the stage's
// rows.json and is stable: the prediction cache keys on it.
type Unit struct {
	// Row is the input row's 0-based index in the stage's rows.
	Row int `json:"row"`
	// Target is the predicted parameter (kcat, Km, kcat/Km).
	Target string `json:"target"`
	// Candidate is the 0-based index of the row's candidate sequence.
	Candidate int `json:"candidate"`
	// Substrate is the 0-based index of the substrate token this unit
	// predicts, or -1 when the unit takes the row's whole substrate input (a
	// `Substrate` cell, native_multi, native_full_reaction).
	Substrate int `json:"substrate"`
	// Seq is the sequence actually sent to the engine (after splitting,
	// trimming and long-sequence truncation).
	Seq string `json:"seq"`
	// Substrates are the substrate token(s) sent: one for an expanded pair,
	// the ordered list for native behaviours, the whole cell for a
	// `Substrate` column.
	Substrates []string `json:"substrates,omitempty"`
	// Products are the product tokens (native_full_reaction only).
	Products []string `json:"products,omitempty"`
	// Kwargs are the engine arguments of the unit (col_to_kwarg with the
	// unit's own substrate text in place of the row's cell).
	Kwargs map[string]string `json:"kwargs,omitempty"`
	// Skip, when set, is why the unit fails before any engine call (an
	// invalid substrate token): it is never sent, its result is this error.
	Skip string `json:"skip,omitempty"`
	// Shared, in a stored unit, says that its Substrates, Products and
	// Kwargs are its row's (RowInput, stored once per row; ShareInputs):
	// the candidates of a native row all send the same lists, which
	// stored per unit made one 1,000-candidate row a 1.36 GB file.
	Shared bool `json:"shared,omitempty"`
	// SeqShared, in a stored unit, says that its Seq is its row's for its
	// candidate (RowInput.Seqs): a row's units of one candidate all send
	// the same sequence, which stored per unit repeated a 10,000-residue
	// sequence for each of a row's substrates.
	SeqShared bool `json:"seq_shared,omitempty"`
}

// RowInput is what every whole-input unit of a row sends besides its
// sequence: stored once per row (ShareInputs).
type RowInput struct {
	Substrates []string          `json:"substrates,omitempty"`
	Products   []string          `json:"products,omitempty"`
	Kwargs     map[string]string `json:"kwargs,omitempty"`
	// Seqs are the sequences sent, by candidate.
	Seqs []string `json:"seqs,omitempty"`
}

// ShareInputs prepares us (the units of rows rows, in row order) for
// storing: in each row with two or more units, the sequence of each
// candidate, and the lists and arguments of whole-input units, go once into
// the returned per-row inputs, and the units keep only SeqShared and
// Shared marks. Rows with one unit (the older wire's one unit per row) are
// left as they are.
func ShareInputs(rows int, us []Unit) []*RowInput {
	count := make([]int, rows)
	for _, u := range us {
		if u.Row >= 0 && u.Row < rows {
			count[u.Row]++
		}
	}
	var out []*RowInput
	for i := range us {
		u := &us[i]
		if u.Row < 0 || u.Row >= rows || count[u.Row] < 2 {
			continue
		}
		if out == nil {
			out = make([]*RowInput, rows)
		}
		in := out[u.Row]
		if in == nil {
			in = &RowInput{}
			out[u.Row] = in
		}
		if !u.SeqShared && u.Candidate >= 0 && u.Seq != "" {
			for len(in.Seqs) <= u.Candidate {
				in.Seqs = append(in.Seqs, "")
			}
			if in.Seqs[u.Candidate] == "" {
				in.Seqs[u.Candidate] = u.Seq
			}
			if in.Seqs[u.Candidate] == u.Seq {
				u.Seq, u.SeqShared = "", true
			}
		}
		if u.Substrate != -1 || u.Shared {
			continue
		}
		if in.Substrates == nil && in.Products == nil && in.Kwargs == nil {
			in.Substrates, in.Products, in.Kwargs = u.Substrates, u.Products, u.Kwargs
		} else if !sameInput(in, u) {
			continue
		}
		u.Substrates, u.Products, u.Kwargs, u.Shared = nil, nil, nil, true
	}
	return out
}

// RestoreInputs gives each Shared unit of us its row's lists and arguments
// back (by reference: units are read-only once stored).
func RestoreInputs(inputs []*RowInput, us []Unit) {
	for i := range us {
		u := &us[i]
		if (!u.Shared && !u.SeqShared) || u.Row < 0 || u.Row >= len(inputs) || inputs[u.Row] == nil {
			continue
		}
		in := inputs[u.Row]
		if u.Shared {
			u.Substrates, u.Products, u.Kwargs, u.Shared = in.Substrates, in.Products, in.Kwargs, false
		}
		if u.SeqShared && u.Candidate >= 0 && u.Candidate < len(in.Seqs) {
			u.Seq, u.SeqShared = in.Seqs[u.Candidate], false
		}
	}
}

func sameInput(in *RowInput, u *Unit) bool {
	if !slices.Equal(in.Substrates, u.Substrates) || !slices.Equal(in.Products, u.Products) || len(in.Kwargs) != len(u.Kwargs) {
		return false
	}
	for k, v := range in.Kwargs {
		if w, ok := u.Kwargs[k]; !ok || w != v {
			return false
		}
	}
	return true
}

// Result is the engine's outcome for one unit: a finite value, or an error.
type Result struct {
	Value *float64 `json:"value"`
	// Source is the Source text of a predicted value.
	Source string `json:"source,omitempty"`
	// Error is why there is no value; empty when Value is set.
	Error string `json:"error,omitempty"`
	// Details is an experimental sentence for this unit, when one applies.
	Details string `json:"details,omitempty"`
	// Cached, when set, is when this unit's value (or error) was first
	// computed: it was served from the prediction cache (internal/predcache).
	Cached *time.Time `json:"cached,omitempty"`
	// Uncertainty is the method's own uncertainty of Value, when the
	// method gives one; nil otherwise.
	Uncertainty *Uncertainty `json:"uncertainty,omitempty"`
}

// Uncertainty is a method's uncertainty of one predicted value, as
// standard deviations of log10 of the value: the total and, when the method
// separates them, its aleatoric (noise in the data) and epistemic (the
// model's own, e.g. the spread of an ensemble) parts. CatPred's service
// reports these three (SD_total, SD_aleatoric, SD_epistemic).
type Uncertainty struct {
	Total     float64  `json:"total"`
	Aleatoric *float64 `json:"aleatoric,omitempty"`
	Epistemic *float64 `json:"epistemic,omitempty"`
	// Synthetic marks the synthetic engine's stand-in: not a method's
	// uncertainty.
	Synthetic bool `json:"synthetic,omitempty"`
}

// Row is how one input row of a stage was expanded: what Reduce needs
// besides the units' results.
type Row struct {
	// Candidates are the row's candidate sequences in order.
	Candidates []Candidate `json:"candidates,omitempty"`
	// Substrates are the tokens of the row's `Substrates` cell when the
	// stage expands per substrate (PerSubstrate).
	Substrates []string `json:"substrates,omitempty"`
	// PerSubstrate is true when the stage's behaviour is expanded_pair and
	// the input has a `Substrates` column: one unit per token.
	PerSubstrate bool `json:"per_substrate,omitempty"`
	// Skip is a row-level skip reason (a sequence-level one blanks every
	// target; a substrate-level one only this target); empty when the row
	// has units.
	Skip string `json:"skip,omitempty"`
	// SequenceSkip is true when Skip is sequence-level.
	SequenceSkip bool `json:"sequence_skip,omitempty"`
}

// Expand returns the units of one row of a stage: for each candidate that
// is not skipped (sent[k] is the sequence sent for candidate k), one unit per
// substrate token when row.PerSubstrate, else one unit with the row's whole
// substrate input. kwargs are the row's engine arguments; with
// PerSubstrate, substrateKwarg (the kwarg of the substrate column) is set to
// each token in turn. wholeSubstrates are the substrate token(s) recorded on
// a whole-input unit, products its product tokens.
func Expand(rowIndex int, target string, row Row, sent []string, kwargs map[string]string, substrateKwarg string, wholeSubstrates, products []string) []Unit {
	if row.Skip != "" {
		return nil
	}
	var out []Unit
	for k, cand := range row.Candidates {
		if cand.Skip != "" {
			continue
		}
		if !row.PerSubstrate {
			out = append(out, Unit{Row: rowIndex, Target: target, Candidate: k, Substrate: -1, Seq: sent[k],
				Substrates: wholeSubstrates, Products: products, Kwargs: kwargs})
			continue
		}
		for s, tok := range row.Substrates {
			kw := make(map[string]string, len(kwargs))
			for key, v := range kwargs {
				kw[key] = v
			}
			kw[substrateKwarg] = tok
			out = append(out, Unit{Row: rowIndex, Target: target, Candidate: k, Substrate: s, Seq: sent[k],
				Substrates: []string{tok}, Kwargs: kw})
		}
	}
	return out
}
