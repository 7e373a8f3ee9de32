package input

import (
	"bytes"
	"context"
	"encoding/json"
	"strconv"
	"strings"

	"github.com/kinflow/kinflow/internal/methods"
	"github.com/kinflow/kinflow/internal/units"
)

// Reasons and values of the /validate/ report, verbatim: clients match them.
const (
	ReasonInvalidSMILES         = "Invalid SMILES/InChI"
	ReasonInvalidReaction       = "Invalid substrate/product SMILES/InChI"
	ReasonEmptySequence         = "Empty sequence"
	ReasonInvalidChars          = "Invalid characters in sequence"
	nullCellText                = "NaN"
	nullToken                   = "nan"
	SimilarityUnavailableReason = "Similarity analysis is not available on this server."
	// ReasonUnchecked is kinflow's own: RDKit could not check a component
	// within the molecule time bound (not "invalid"; a job skips the row).
	// UncheckedComponents lists those components.
	ReasonUnchecked = ReasonUncheckedSubstrate
)

// ValidateReport is the 200 body of /validate/; field order is the
// reference's key order.
type ValidateReport struct {
	RowCount          int              `json:"rowCount"`
	InvalidSubstrates []SubstrateIssue `json:"invalidSubstrates"`
	InvalidProteins   []ProteinIssue   `json:"invalidProteins"`
	LengthViolations  OrderedInts      `json:"lengthViolations"`
	LengthLimits      OrderedInts      `json:"lengthLimits"`
	// Similarity is null unless requested. Validate sets the error object
	// SimilarityUnavailableReason; the API replaces it with the analysis of
	// internal/similarity when the server has it.
	Similarity any `json:"similarity"`
	// PredictionUnits counts the input's prediction units against the
	// server's caps (kinflow's addition; set by the API).
	PredictionUnits *UnitsReport `json:"predictionUnits,omitempty"`
	// Methods is kinflow's addition: the method keys the report is about,
	// when the request chose targets and methods (then lengthViolations
	// and lengthLimits list only these, and "Server"); absent otherwise.
	Methods []string `json:"methods,omitempty"`
	// Messages is kinflow's addition: every finding as one sentence, rows
	// in order (BuildMessages); the same wording in every client.
	Messages []Message `json:"messages"`
}

// SimilarityError is the `similarity` value when the analysis fails.
// Unavailable (kinflow's addition) marks an answer that is information,
// not a failure: the server has no similarity dataset for the request.
type SimilarityError struct {
	Error       string `json:"error"`
	Unavailable bool   `json:"unavailable,omitempty"`
}

// SubstrateIssue is one invalidSubstrates entry. Value is a string
// (single-substrate schema) or the list of failing tokens (full reaction).
type SubstrateIssue struct {
	Row               int      `json:"row"`
	Value             any      `json:"value"`
	Reason            string   `json:"reason"`
	InvalidComponents []string `json:"invalid_components,omitempty"`
	// UncheckedComponents are the components RDKit could not check in time
	// (reason ReasonUnchecked when no component is invalid).
	UncheckedComponents []string `json:"unchecked_components,omitempty"`
	// InvalidSubstrateTokens and InvalidProductTokens are the list schema's
	// per-token findings; both present, possibly empty, for a
	// `Substrates` table, absent otherwise.
	InvalidSubstrateTokens *[]TokenIssue `json:"invalid_substrates,omitempty"`
	InvalidProductTokens   *[]TokenIssue `json:"invalid_products,omitempty"`
}

// TokenIssue is one bad token of a `Substrates` or `Products` list: its
// 1-based position and text, both null for an empty list (the reference
// writes "NaN" there).
type TokenIssue struct {
	Position *int    `json:"position"`
	Value    *string `json:"value"`
}

// ReasonEmptySubstrateList is the list schema's reason for a row without
// substrates (and no bad product).
const ReasonEmptySubstrateList = "Empty substrate list"

// ProteinIssue is one invalidProteins entry.
type ProteinIssue struct {
	Row   int    `json:"row"`
	Value string `json:"value"`
	// Position is the 1-based candidate of a `;`-separated cell;
	// absent for a cell with one sequence.
	Position     int      `json:"position,omitempty"`
	InvalidChars []string `json:"invalid_chars,omitempty"`
	Reason       string   `json:"reason"`
}

// OrderedInts is a JSON object with keys in a fixed order; a nil value is
// written as null (an unlimited method's length limit).
type OrderedInts []KeyInt

// KeyInt is one entry of an OrderedInts.
type KeyInt struct {
	Key   string
	Value *int
}

// Get returns the value of key, and whether it is present.
func (o OrderedInts) Get(key string) (*int, bool) {
	for _, e := range o {
		if e.Key == key {
			return e.Value, true
		}
	}
	return nil, false
}

// MarshalJSON writes the entries in order.
func (o OrderedInts) MarshalJSON() ([]byte, error) {
	var b bytes.Buffer
	b.WriteByte('{')
	for i, e := range o {
		if i > 0 {
			b.WriteByte(',')
		}
		k, _ := json.Marshal(e.Key)
		b.Write(k)
		b.WriteByte(':')
		if e.Value == nil {
			b.WriteString("null")
		} else {
			b.WriteString(strconv.Itoa(*e.Value))
		}
	}
	b.WriteByte('}')
	return b.Bytes(), nil
}

// CheckStructure is /validate/'s structure rule (docs/input.md, "The rules in order"): no
// `Products` without `Substrates`, one of the two substrate columns, then
// `Protein Sequence`.
func CheckStructure(t *Table) error {
	// A table with both Substrate and Substrates is checked with the
	// Substrate schema, as before (see CheckColumns), instead of the
	// reference's `CSV cannot contain both "Substrate" and "Substrates"
	// columns`.
	switch {
	case t.Has(ColProducts) && !t.Has(ColSubstrates):
		return invalidf(`CSV cannot contain "Products" without a "Substrates" column`)
	case !t.Has(ColSubstrate) && !t.Has(ColSubstrates):
		return invalidf(`CSV must contain either a "Substrate" or "Substrates" column`)
	case !t.Has(ColProteinSequence):
		return invalidf("The table needs a 'Protein Sequence' column.")
	}
	return nil
}

// Validate builds the /validate/ report for table t: the structure
// check (an *Error), then per-row substrate and protein findings with
// 1-based row numbers in the cleaned table, and length counts per method in
// registry order then "Server". runSimilarity adds the similarity error
// object. An error is returned for a structure failure or when ctx ends.
func Validate(ctx context.Context, cat *methods.Catalogue, chem *Chemistry, t *Table, runSimilarity bool) (*ValidateReport, error) {
	if err := CheckStructure(t); err != nil {
		return nil, err
	}
	rep := &ValidateReport{RowCount: t.RawRowCount, InvalidSubstrates: []SubstrateIssue{}, InvalidProteins: []ProteinIssue{}}
	if runSimilarity {
		rep.Similarity = &SimilarityError{Error: SimilarityUnavailableReason, Unavailable: true}
	}
	if err := checkSubstrates(ctx, chem, t, rep); err != nil {
		return nil, err
	}
	checkProteins(cat, t, rep)
	rep.Messages = BuildMessages(rep)
	return rep, nil
}

// checkSubstrates adds to rep the substrate findings of t's rows: every
// component is checked in one batch, and identical single-substrate cells
// reuse the first one's verdict.
func checkSubstrates(ctx context.Context, chem *Chemistry, t *Table, rep *ValidateReport) error {
	single := t.Has(ColSubstrate)
	var (
		subCol  = t.Col(ColSubstrate)
		sCol    = t.Col(ColSubstrates)
		pCol    = t.Col(ColProducts)
		texts   []string
		rowToks = make([][]string, len(t.Rows))
	)
	for i, r := range t.Rows {
		if single {
			rowToks[i] = substrateComponents(r.Cells[subCol])
		} else {
			rowToks[i] = units.Split(r.Cells[sCol])
			if pCol >= 0 {
				rowToks[i] = append(rowToks[i], units.Split(r.Cells[pCol])...)
			}
		}
		texts = append(texts, rowToks[i]...)
	}
	verdict, unchecked, err := chem.ValidManyDetail(ctx, texts)
	if err != nil {
		return err
	}
	firstVerdict := map[string]*SubstrateIssue{} // identical cells reuse the first verdict
	okCells := map[string]bool{}
	for i, r := range t.Rows {
		var bad, late []string
		for _, tok := range rowToks[i] {
			switch {
			case unchecked[tok]:
				late = append(late, tok)
			case !verdict[tok]:
				bad = append(bad, tok)
			}
		}
		if single {
			cell := r.Cells[subCol]
			if okCells[cell] {
				continue
			}
			if prev, seen := firstVerdict[cell]; seen {
				issue := *prev
				issue.Row = i + 1
				rep.InvalidSubstrates = append(rep.InvalidSubstrates, issue)
				continue
			}
			if len(rowToks[i]) > 0 && len(bad) == 0 && len(late) == 0 {
				okCells[cell] = true
				continue
			}
			value := cell
			if cell == "" {
				value = nullCellText
			}
			issue := SubstrateIssue{Row: i + 1, Value: value, Reason: ReasonInvalidSMILES, InvalidComponents: bad, UncheckedComponents: late}
			if len(bad) == 0 && len(late) > 0 {
				issue.Reason = ReasonUnchecked
			}
			firstVerdict[cell] = &issue
			rep.InvalidSubstrates = append(rep.InvalidSubstrates, issue)
			continue
		}
		if issue, ok := listIssue(i+1, r.Cells[sCol], cellOf(r, pCol), pCol >= 0, verdict, unchecked); ok {
			rep.InvalidSubstrates = append(rep.InvalidSubstrates, issue)
		}
	}
	return nil
}

// checkProteins adds to rep the protein findings of t's rows and the
// length counts per method, in registry order, then "Server".
func checkProteins(cat *methods.Catalogue, t *Table, rep *ValidateReport) {
	keys := cat.Keys()
	limits := make([]int, len(keys))
	counts := make([]int, len(keys))
	for k, key := range keys {
		if m, ok := methodInfo(cat, key); ok {
			limits[k] = m.MaxSeqLen
		}
	}
	server := 0
	pc := t.Col(ColProteinSequence)
	for i, r := range t.Rows {
		raw := r.Cells[pc]
		cands := []string{strings.TrimSpace(raw)}
		list := strings.Contains(raw, units.Separator)
		if list {
			// Candidate sequences: each is checked and counted.
			cands = units.Split(raw)
		}
		if len(cands) == 0 || cands[0] == "" {
			v := raw
			if raw == "" {
				v = nullCellText
			}
			rep.InvalidProteins = append(rep.InvalidProteins, ProteinIssue{Row: i + 1, Value: v, Reason: ReasonEmptySequence})
			continue
		}
		for k, seq := range cands {
			if !ValidResidues(seq) {
				issue := ProteinIssue{Row: i + 1, Value: seq, InvalidChars: InvalidResidues(seq), Reason: ReasonInvalidChars}
				if list {
					issue.Position = k + 1
				}
				rep.InvalidProteins = append(rep.InvalidProteins, issue)
			}
			n := SeqLen(seq)
			for k, l := range limits {
				if l > 0 && n > l {
					counts[k]++
				}
			}
			if n > ServerLimit {
				server++
			}
		}
	}
	for k, key := range keys {
		c := counts[k]
		rep.LengthViolations = append(rep.LengthViolations, KeyInt{Key: key, Value: &c})
		var lp *int
		if limits[k] > 0 {
			l := limits[k]
			lp = &l
		}
		rep.LengthLimits = append(rep.LengthLimits, KeyInt{Key: key, Value: lp})
	}
	sl := ServerLimit
	rep.LengthViolations = append(rep.LengthViolations, KeyInt{Key: "Server", Value: &server})
	rep.LengthLimits = append(rep.LengthLimits, KeyInt{Key: "Server", Value: &sl})
}

func cellOf(r Row, c int) string {
	if c < 0 {
		return ""
	}
	return r.Cells[c]
}

// listIssue is the list schema's finding for one row: the bad
// substrate tokens, then the bad products (when the table has Products), with
// positions; an empty list is one entry with null position and value. ok is
// false for a clean row. A token RDKit could not check in time is listed
// in unchecked_components, and makes the reason ReasonUnchecked when
// nothing is invalid.
func listIssue(row int, subCell, prodCell string, hasProducts bool, verdict, unchecked map[string]bool) (SubstrateIssue, bool) {
	subs, prods := []TokenIssue{}, []TokenIssue{}
	var late []string
	scan := func(cell string, out *[]TokenIssue) int {
		toks := units.Split(cell)
		if len(toks) == 0 {
			var v *string
			if cell != "" {
				c := cell
				v = &c
			}
			*out = append(*out, TokenIssue{Value: v})
		}
		for p, tok := range toks {
			switch {
			case unchecked[tok]:
				late = append(late, tok)
			case !verdict[tok]:
				pos, v := p+1, tok
				*out = append(*out, TokenIssue{Position: &pos, Value: &v})
			}
		}
		return len(toks)
	}
	nSubs := scan(subCell, &subs)
	if hasProducts {
		scan(prodCell, &prods)
	}
	if len(subs) == 0 && len(prods) == 0 {
		if len(late) == 0 {
			return SubstrateIssue{}, false
		}
		return SubstrateIssue{Row: row, Value: late, Reason: ReasonUnchecked, UncheckedComponents: late,
			InvalidSubstrateTokens: &subs, InvalidProductTokens: &prods}, true
	}
	values := make([]*string, 0, len(subs)+len(prods))
	for _, t := range subs {
		values = append(values, t.Value)
	}
	for _, t := range prods {
		values = append(values, t.Value)
	}
	reason := ReasonInvalidReaction
	if nSubs == 0 && len(prods) == 0 {
		reason = ReasonEmptySubstrateList
	}
	return SubstrateIssue{Row: row, Value: values, Reason: reason, UncheckedComponents: late,
		InvalidSubstrateTokens: &subs, InvalidProductTokens: &prods}, true
}

// substrateComponents are a Substrate cell's components for /validate/:
// none for an empty/None/NaN cell, the whole cell when it starts
// with "InChI=", else its non-empty '.'-separated parts.
func substrateComponents(cell string) []string {
	t := strings.TrimSpace(cell)
	if isNullText(t) {
		return nil
	}
	if strings.HasPrefix(t, "InChI=") {
		return []string{t}
	}
	var out []string
	for _, p := range strings.Split(t, ".") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}

// reactionTokens are a Substrates/Products cell's ';'-separated tokens; a
// missing cell is the token "nan" (invalid), and a cell of separators only
// has none.
func reactionTokens(cell string) []string {
	if cell == "" {
		return []string{nullToken}
	}
	var out []string
	for _, p := range strings.Split(cell, ";") {
		if p = strings.TrimSpace(p); p != "" {
			out = append(out, p)
		}
	}
	return out
}
