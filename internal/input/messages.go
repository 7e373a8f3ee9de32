package input

import (
	"fmt"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Message levels of the /validate/ report's `messages` (kinflow's addition).
const (
	// LevelError: the row gets no prediction.
	LevelError = "error"
	// LevelWarning: the row is predicted, but not as sent (a long sequence
	// is shortened or skipped), or a requested check could not run.
	LevelWarning = "warning"
	// LevelInfo: something the user should know that is not a problem of
	// the input (a method without a similarity dataset).
	LevelInfo = "info"
)

// Message is one finding of /validate/ in plain language: the one wording
// of each finding, written by the server so that every client (web page,
// CLI, Python client) shows the same sentence. docs/api.md lists the
// formats.
type Message struct {
	// Row is the 1-based row in the cleaned table; null for a finding about
	// the whole table (a method's length limit, similarity).
	Row *int `json:"row"`
	// Column is the input column (or "similarity") the finding is about.
	Column string `json:"column"`
	Level  string `json:"level"`
	Text   string `json:"text"`
}

// RestrictTo keeps only the chosen method keys (and "Server") in the
// report's lengthViolations and lengthLimits, in the report's order. A nil
// keys leaves the report as it is (every method, as the contract has it).
func (rep *ValidateReport) RestrictTo(keys []string) {
	if keys == nil {
		return
	}
	keep := func(o OrderedInts) OrderedInts {
		out := OrderedInts{}
		for _, e := range o {
			if e.Key == "Server" || slices.Contains(keys, e.Key) {
				out = append(out, e)
			}
		}
		return out
	}
	rep.LengthViolations = keep(rep.LengthViolations)
	rep.LengthLimits = keep(rep.LengthLimits)
}

// BuildMessages writes rep's findings as Messages: first every row finding
// in row order (within a row: Protein Sequence, then the substrate
// columns), then each method's long sequences (the methods rep still lists,
// in its order), then the server's limit. Similarity notes are added by the
// caller (SimilarityMessage), which knows what the analysis answered.
func BuildMessages(rep *ValidateReport) []Message {
	type keyed struct {
		row, col int
		m        Message
	}
	var rows []keyed
	for _, p := range rep.InvalidProteins {
		rows = append(rows, keyed{p.Row, 0, proteinMessage(p)})
	}
	for _, s := range rep.InvalidSubstrates {
		rows = append(rows, keyed{s.Row, 1, substrateMessage(s)})
	}
	var jobUnits *Message
	if u := rep.PredictionUnits; u != nil {
		for _, o := range u.OverRow {
			row := o.Row
			rows = append(rows, keyed{o.Row, 2, Message{Row: &row, Column: "Substrates", Level: "error", Text: fmt.Sprintf(
				"%d predictions (%s); this server predicts at most %d per row.",
				o.Units, o.Factors(), u.Caps.PerRow)}})
		}
		for _, o := range u.OverBytes {
			row, col := o.Row, o.Column
			if col == "" {
				col = ColProteinSequence
			}
			rows = append(rows, keyed{o.Row, 2, Message{Row: &row, Column: col, Level: "error", Text: o.Text()}})
		}
		if u.OverJob {
			jobUnits = &Message{Column: "", Level: "error", Text: fmt.Sprintf(
				"%d predictions in all; this server predicts at most %d per job: submit them as several jobs.", u.Total, u.Caps.PerJob)}
		}
	}
	sort.SliceStable(rows, func(i, j int) bool {
		if rows[i].row != rows[j].row {
			return rows[i].row < rows[j].row
		}
		return rows[i].col < rows[j].col
	})
	out := make([]Message, 0, len(rows)+2)
	for _, k := range rows {
		out = append(out, k.m)
	}
	if jobUnits != nil {
		out = append(out, *jobUnits)
	}
	for _, e := range rep.LengthViolations {
		if e.Value == nil || *e.Value == 0 {
			continue
		}
		n := *e.Value
		limit, _ := rep.LengthLimits.Get(e.Key)
		if limit == nil {
			continue
		}
		text := fmt.Sprintf("Method %s: %s longer than its limit of %d residues (shortened to their first and last halves, or left out with handleLongSequences=skip).",
			e.Key, plural(n, "sequence is", "sequences are"), *limit)
		if e.Key == "Server" {
			text = fmt.Sprintf("%s longer than the server limit of %d residues (shortened to their first and last halves, or left out with handleLongSequences=skip).",
				capitalize(plural(n, "sequence is", "sequences are")), *limit)
		}
		out = append(out, Message{Column: ColProteinSequence, Level: LevelWarning, Text: text})
	}
	return out
}

// SimilarityMessage is the Message for a similarity answer that is not an
// analysis: info when the server has no dataset for the request (not a
// problem of the input), a warning when the analysis failed or timed out.
func SimilarityMessage(text string, unavailable bool) Message {
	level := LevelWarning
	if unavailable {
		level = LevelInfo
	}
	return Message{Column: "similarity", Level: level, Text: "Similarity (% identity to the training data): " + text}
}

func proteinMessage(p ProteinIssue) Message {
	row := p.Row
	col := ColProteinSequence
	if p.Position > 0 {
		col = fmt.Sprintf("%s (candidate %d)", ColProteinSequence, p.Position)
	}
	lead := fmt.Sprintf("Row %d, %s: ", row, col)
	if p.Reason == ReasonEmptySequence {
		return Message{Row: &row, Column: ColProteinSequence, Level: LevelError, Text: lead + "the sequence is empty."}
	}
	named := NameCharacters(p.Value)
	text := lead + fmt.Sprintf("%s not %s: %s. Allowed: the 20 amino acids %s, uppercase.",
		plural(len(named), "character is", "characters are"), pick(len(named) == 1, "an amino acid", "amino acids"),
		strings.Join(named, ", "), AminoAcids)
	return Message{Row: &row, Column: ColProteinSequence, Level: LevelError, Text: text}
}

// NameCharacters names each character of seq outside the alphabet once, in
// order of first appearance: the character quoted (Go syntax, so a space or
// a tab is visible) and its 1-based position, e.g. `"1" at position 3`, with
// a hint for a lowercase amino acid.
func NameCharacters(seq string) []string {
	seen := map[rune]bool{}
	var out []string
	pos := 0
	for _, r := range seq {
		pos++
		if r < utf8.RuneSelf && aaTable[r] || seen[r] {
			continue
		}
		seen[r] = true
		s := fmt.Sprintf("%s at position %d", strconv.QuoteRune(r), pos)
		switch {
		case r == ' ':
			s += " (a space)"
		case r >= 'a' && r <= 'z' && aaTable[r-'a'+'A']:
			s += fmt.Sprintf(" (lowercase; write %c)", r-'a'+'A')
		}
		out = append(out, s)
	}
	return out
}

func substrateMessage(s SubstrateIssue) Message {
	row := s.Row
	if s.InvalidSubstrateTokens != nil || s.InvalidProductTokens != nil {
		lead := fmt.Sprintf("Row %d, %s: ", row, ColSubstrates)
		var parts []string
		add := func(kind string, toks *[]TokenIssue) {
			if toks == nil {
				return
			}
			for _, t := range *toks {
				switch {
				case t.Position == nil && kind == "substrate":
					parts = append(parts, "the substrate list is empty")
				case t.Position == nil:
					parts = append(parts, "the product list is empty")
				default:
					parts = append(parts, fmt.Sprintf("%s %d %s is not a valid SMILES or InChI", kind, *t.Position, strconv.Quote(*t.Value)))
				}
			}
		}
		add("substrate", s.InvalidSubstrateTokens)
		add("product", s.InvalidProductTokens)
		if len(s.UncheckedComponents) > 0 {
			parts = append(parts, "could not be checked in time: "+quoteAll(s.UncheckedComponents))
		}
		return Message{Row: &row, Column: ColSubstrates, Level: LevelError, Text: lead + strings.Join(parts, "; ") + "."}
	}
	lead := fmt.Sprintf("Row %d, %s: ", row, ColSubstrate)
	var text string
	switch {
	case len(s.InvalidComponents) > 0:
		text = "not a valid SMILES or InChI: " + quoteAll(s.InvalidComponents)
		if len(s.UncheckedComponents) > 0 {
			text += "; could not be checked in time: " + quoteAll(s.UncheckedComponents)
		}
	case len(s.UncheckedComponents) > 0:
		text = "could not be checked in time (a job skips the row): " + quoteAll(s.UncheckedComponents)
	default:
		text = "the cell is empty"
	}
	return Message{Row: &row, Column: ColSubstrate, Level: LevelError, Text: lead + text + "."}
}

func quoteAll(xs []string) string {
	q := make([]string, len(xs))
	for i, x := range xs {
		q[i] = strconv.Quote(x)
	}
	return strings.Join(q, ", ")
}

func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

func pick(c bool, a, b string) string {
	if c {
		return a
	}
	return b
}

func capitalize(s string) string {
	if s == "" {
		return s
	}
	return strings.ToUpper(s[:1]) + s[1:]
}
