package input

import (
	"context"
	"strings"
)

// Run-time skip reasons of the engines' row validation, verbatim: they are
// the result's Source text and the reference's.
const (
	ReasonInvalidProtein   = "Invalid protein sequence (unsupported amino acid characters)"
	ReasonInvalidSubstrate = "Invalid substrate (not a valid SMILES or InChI)"
	ReasonInvalidProduct   = "Invalid product (not a valid SMILES or InChI)"
	// ReasonUncheckedSubstrate and ReasonUncheckedProduct are kinflow's own
	// (not in the reference): RDKit could not check the molecule within the
	// time bound, so the row is skipped without calling it invalid.
	ReasonUncheckedSubstrate = "Substrate could not be checked in time"
	ReasonUncheckedProduct   = "Product could not be checked in time"
)

// RowRule is which engine row-validation rule a method follows
// (docs/input.md, "The rules in order").
type RowRule int

const (
	// RuleGeneric is the generic subprocess engine (B, E, G, H, I, J): every
	// mapped chemistry field split on ';', non-InChI tokens split on '.',
	// at least one token, all valid.
	RuleGeneric RowRule = iota
	// RuleWholeCell is the dedicated single-substrate engines (C, F, A-H,
	// A-L): the whole Substrate cell parses (dot-joined fragments included).
	RuleWholeCell
	// RuleReaction is the dedicated full-reaction engine (D): each ';' token
	// of Substrates, then of Products, parses.
	RuleReaction
)

// RuleFor returns the rule a method's engine applies.
func RuleFor(m MethodInfo) RowRule {
	switch {
	case m.Generic:
		return RuleGeneric
	case m.InputFormat == "multi":
		return RuleReaction
	default:
		return RuleWholeCell
	}
}

// chemColumns are the method's mapped columns other than Protein Sequence.
func chemColumns(m MethodInfo) []string {
	var out []string
	for _, c := range m.RequiredColumns {
		if c != ColProteinSequence {
			out = append(out, c)
		}
	}
	if len(out) == 0 && m.InputFormat == "multi" {
		return []string{ColSubstrates, ColProducts}
	}
	if len(out) == 0 {
		return []string{ColSubstrate}
	}
	return out
}

// ValidateRows is the engines' per-row validation at run time for
// method m over table t. seqs holds each row's sequence as the engine gets
// it (after long-sequence truncation; the same length as t.Rows). It
// returns, per row, "" for a valid row or the verbatim skip reason.
// An empty Protein Sequence is skipped with ReasonInvalidProtein (it never
// fails the job), whatever the engine. The sequence is checked before the
// chemistry. An error is returned only when ctx ends.
func ValidateRows(ctx context.Context, chem *Chemistry, m MethodInfo, t *Table, seqs []string) ([]string, error) {
	rule := RuleFor(m)
	cols := chemColumns(m)
	idx := make([]int, len(cols))
	for i, c := range cols {
		idx[i] = t.Col(c)
		if idx[i] < 0 && c == ColSubstrate {
			// A method reading `Substrate` takes a `Substrates` list
			// whole (native_multi).
			idx[i] = t.Col(ColSubstrates)
		}
	}
	// Tokens per row and per column, then one batch check.
	toks := make([][][]string, len(t.Rows))
	var all []string
	for r := range t.Rows {
		toks[r] = make([][]string, len(cols))
		for k, ci := range idx {
			cell := ""
			if ci >= 0 {
				cell = t.Rows[r].Cells[ci]
			}
			var ts []string
			switch rule {
			case RuleGeneric:
				ts = genericTokens(cell)
			case RuleReaction:
				ts = reactionTokens(cell)
			default:
				ts = []string{cell}
			}
			toks[r][k] = ts
			all = append(all, ts...)
		}
	}
	verdict, unchecked, err := chem.ValidManyDetail(ctx, all)
	if err != nil {
		return nil, err
	}
	reasons := make([]string, len(t.Rows))
	for r := range t.Rows {
		if seqs[r] == "" || !ValidResidues(seqs[r]) {
			reasons[r] = ReasonInvalidProtein
			continue
		}
		for k, col := range cols {
			ok := idx[k] >= 0
			if rule == RuleGeneric && len(toks[r][k]) == 0 {
				ok = false
			}
			late := false
			for _, tok := range toks[r][k] {
				if !verdict[tok] {
					ok, late = false, unchecked[tok]
					if !late {
						break
					}
				}
			}
			if !ok {
				product := rule == RuleReaction && col == ColProducts
				switch {
				case late && product:
					reasons[r] = ReasonUncheckedProduct
				case late:
					reasons[r] = ReasonUncheckedSubstrate
				case product:
					reasons[r] = ReasonInvalidProduct
				default:
					reasons[r] = ReasonInvalidSubstrate
				}
				break
			}
		}
	}
	return reasons, nil
}

// genericTokens splits a chemistry cell as the generic engine does: on ';',
// then each token that is not an InChI on '.'; empty pieces are dropped.
func genericTokens(cell string) []string {
	var out []string
	for _, p := range strings.Split(cell, ";") {
		p = strings.TrimSpace(p)
		if p == "" {
			continue
		}
		if strings.HasPrefix(p, "InChI=") {
			out = append(out, p)
			continue
		}
		for _, q := range strings.Split(p, ".") {
			if q = strings.TrimSpace(q); q != "" {
				out = append(out, q)
			}
		}
	}
	return out
}

// ValidateTokens checks substrate tokens one by one as method m's engine
// checks a `Substrate` cell (the expanded_pair behaviour: each
// token of a `Substrates` list is its own prediction). It returns, per
// token, "" or the skip reason (ReasonInvalidSubstrate or
// ReasonUncheckedSubstrate). An error is returned only when ctx ends.
func ValidateTokens(ctx context.Context, chem *Chemistry, m MethodInfo, toks []string) ([]string, error) {
	if len(toks) == 0 {
		return nil, nil
	}
	t := &Table{Rows: make([]Row, len(toks))}
	seqs := make([]string, len(toks))
	for i, tok := range toks {
		t.Rows[i] = Row{Index: i, Cells: []string{"A", tok}}
		seqs[i] = "A"
	}
	t.finish([]string{ColProteinSequence, ColSubstrate})
	single := m
	single.InputFormat = "single"
	single.RequiredColumns = []string{ColProteinSequence, ColSubstrate}
	return ValidateRows(ctx, chem, single, t, seqs)
}
