package units

import (
	"bytes"
	"fmt"
	"math"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Texts of the reductions, verbatim: clients match them, and they are the
// reference deployment's texts.
const (
	// NoPrediction is a unit's error when the model returned no value.
	NoPrediction = "Prediction could not be made"
	// NoSubstratePrediction is the Source of a row whose every substrate
	// failed without an error text.
	NoSubstratePrediction = "Prediction could not be made for any substrate"
	// NoSequencePrediction is the same for candidate sequences.
	NoSequencePrediction = "Prediction could not be made for any sequence"
	// MixedSources is the Source of an array cell whose children have
	// different sources.
	MixedSources = "Mixed per-substrate sources; see Extra Info"
	// PerSubstrateSuffix follows the one shared source of an array cell.
	PerSubstrateSuffix = " (per substrate)"
	// MissingSequence is the reason of a row with no candidate sequence.
	MissingSequence = "Missing protein sequence"
	// CandidateTooLong is the error of a candidate excluded in skip mode
	// (the dash is U+2014).
	CandidateTooLong = "Sequence too long — sequence candidate was excluded"
)

// Cell is one target's three result cells of one row.
type Cell struct {
	Value  string
	Source string
	Extra  string
	// Filled is true when Value is non-empty (an array cell counts): the
	// row is then not refunded for this target (a row is refunded unless
	// every target's value cell is filled).
	Filled bool
	// Selected is the candidate index whose value a scalar cell holds, -1
	// when none (or an array cell); the similarity columns use it.
	Selected int
}

// Options are the job-wide switches of a reduction.
type Options struct {
	// CandidateMode is true when some row of the job has more than one
	// candidate sequence: every row's Extra Info is then the per-candidate
	// JSON array.
	CandidateMode bool
	// LegacyExtra is the Extra Info of a predicted row in the older shape
	// (one candidate, one substrate input), e.g. the synthetic notice.
	LegacyExtra string
}

// Reduce folds one row's units (in expansion order: candidate-major, then
// substrate) and their results into the row's cells for target. results[i]
// belongs to units[i].
func Reduce(target string, row Row, units []Unit, results []Result, opts Options) Cell {
	if row.Skip != "" {
		c := Cell{Source: row.Skip, Selected: -1}
		if opts.CandidateMode && len(row.Candidates) > 0 {
			// The per-candidate array still says what became of each.
			c.Extra = reduceCandidates(target, row, nil, nil).Extra
		}
		return c
	}
	if len(units) != len(results) {
		panic(fmt.Sprintf("units: %d results for %d units", len(results), len(units)))
	}
	switch {
	case opts.CandidateMode:
		return reduceCandidates(target, row, units, results)
	case row.PerSubstrate:
		return reduceSubstrates(target, row, units, results)
	}
	// The older shape: one unit, the cells kinflow always wrote.
	c := Cell{Selected: -1}
	if len(units) == 0 {
		c.Source = NoPrediction
		return c
	}
	r := results[0]
	if v, ok := finite(r.Value); ok {
		return Cell{Value: FormatFloat(v), Source: r.Source, Extra: opts.LegacyExtra, Filled: true, Selected: units[0].Candidate}
	}
	c.Source = errorOf(r)
	return c
}

// errorOf is a failed result's error text.
func errorOf(r Result) string {
	if e := strings.TrimSpace(r.Error); e != "" {
		return e
	}
	return NoPrediction
}

func finite(v *float64) (float64, bool) {
	if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
		return 0, false
	}
	return *v, true
}

// better reports whether a beats b for target: the smallest Km, the
// largest kcat and kcat/Km (ties keep the first, so strictly better).
func better(target string, a, b float64) bool {
	if target == "Km" {
		return a < b
	}
	return a > b
}

// item is one entry of an Extra Info array, written with its keys in order.
type item struct {
	seqIndex  int // 1-based; 0: not a candidate item
	sequence  string
	subIndex  int // 1-based; 0: not a substrate item
	substrate string
	value     *float64
	source    string
	err       string
	details   string
	selected  *bool
	children  []*item // a candidate's substrate items
}

func (it *item) write(b *bytes.Buffer) {
	b.WriteByte('{')
	first := true
	key := func(k string) {
		if !first {
			b.WriteByte(',')
		}
		first = false
		b.WriteByte('"')
		b.WriteString(k)
		b.WriteString(`":`)
	}
	if it.seqIndex > 0 {
		key("sequenceIndex")
		b.WriteString(strconv.Itoa(it.seqIndex))
		key("sequence")
		writeString(b, it.sequence)
		if it.children != nil {
			key("substrates")
			writeItems(b, it.children)
			b.WriteByte('}')
			return
		}
	}
	if it.subIndex > 0 {
		key("substrateIndex")
		b.WriteString(strconv.Itoa(it.subIndex))
		key("substrate")
		writeString(b, it.substrate)
	}
	key("prediction")
	if it.value != nil {
		b.WriteString(FormatFloat(*it.value))
	} else {
		b.WriteString("null")
	}
	key("source")
	writeString(b, it.source)
	key("error")
	if it.err != "" {
		writeString(b, it.err)
	} else {
		b.WriteString("null")
	}
	if it.details != "" {
		key("details")
		writeString(b, it.details)
	}
	if it.selected != nil {
		key("selected")
		b.WriteString(strconv.FormatBool(*it.selected))
	}
	b.WriteByte('}')
}

func writeItems(b *bytes.Buffer, items []*item) {
	b.WriteByte('[')
	for i, it := range items {
		if i > 0 {
			b.WriteByte(',')
		}
		it.write(b)
	}
	b.WriteByte(']')
}

func itemsJSON(items []*item) string {
	var b bytes.Buffer
	writeItems(&b, items)
	return b.String()
}

// resultItem is the item of one unit's result.
func resultItem(r Result) *item {
	it := &item{details: r.Details}
	if v, ok := finite(r.Value); ok {
		it.value = &v
		it.source = r.Source
	} else {
		it.err = errorOf(r)
	}
	return it
}

// failureReason is the distinct child errors joined by "; ", or fallback.
func failureReason(items []*item, fallback string) string {
	var uniq []string
	seen := map[string]bool{}
	var visit func([]*item)
	visit = func(its []*item) {
		for _, it := range its {
			if it.children != nil {
				visit(it.children)
				continue
			}
			if e := strings.TrimSpace(it.err); e != "" && !seen[e] {
				seen[e] = true
				uniq = append(uniq, e)
			}
		}
	}
	visit(items)
	if len(uniq) == 0 {
		return fallback
	}
	return strings.Join(uniq, "; ")
}

// arraySource is the Source of an array cell from its selected sources.
func arraySource(sources []string) string {
	var uniq []string
	for _, s := range sources {
		if s != "" && !contains(uniq, s) {
			uniq = append(uniq, s)
		}
	}
	if len(uniq) == 1 {
		return uniq[0] + PerSubstrateSuffix
	}
	return MixedSources
}

func contains(xs []string, s string) bool {
	for _, x := range xs {
		if x == s {
			return true
		}
	}
	return false
}

// valuesJSON is a compact JSON array of values, null for a missing one.
func valuesJSON(vals []*float64) string {
	var b bytes.Buffer
	b.WriteByte('[')
	for i, v := range vals {
		if i > 0 {
			b.WriteByte(',')
		}
		if v == nil {
			b.WriteString("null")
		} else {
			b.WriteString(FormatFloat(*v))
		}
	}
	b.WriteByte(']')
	return b.String()
}

// reduceSubstrates reduces one candidate's substrate units: kcat keeps the
// largest finite value, Km and kcat/Km a JSON array in substrate order.
func reduceSubstrates(target string, row Row, units []Unit, results []Result) Cell {
	items := make([]*item, len(units))
	best := -1
	var bestV float64
	vals := make([]*float64, len(units))
	var sources []string
	for i, u := range units {
		it := resultItem(results[i])
		it.subIndex = u.Substrate + 1
		it.substrate = substrateText(u)
		items[i] = it
		if it.value != nil {
			vals[i] = it.value
			sources = append(sources, it.source)
			if best < 0 || better("kcat", *it.value, bestV) {
				best, bestV = i, *it.value
			}
		}
	}
	c := Cell{Selected: -1}
	if target == "kcat" {
		for i, it := range items {
			sel := i == best
			it.selected = &sel
		}
	}
	c.Extra = itemsJSON(items)
	switch {
	case best < 0:
		c.Source = failureReason(items, NoSubstratePrediction)
	case target == "kcat":
		c.Value, c.Source, c.Filled, c.Selected = FormatFloat(bestV), items[best].source, true, units[best].Candidate
	default:
		c.Value, c.Source, c.Filled = valuesJSON(vals), arraySource(sources), true
	}
	return c
}

func substrateText(u Unit) string {
	if len(u.Substrates) == 1 {
		return u.Substrates[0]
	}
	return strings.Join(u.Substrates, Separator)
}

// reduceCandidates reduces over candidate sequences, keeping the largest
// kcat and kcat/Km and the smallest Km (and, with
// substrate units, per substrate slot for Km and kcat/Km).
func reduceCandidates(target string, row Row, units []Unit, results []Result) Cell {
	// One item per candidate, in candidate order.
	items := make([]*item, len(row.Candidates))
	for k, cand := range row.Candidates {
		it := &item{seqIndex: k + 1, sequence: cand.Sequence}
		if cand.Skip != "" {
			it.err = cand.Skip
		} else if row.PerSubstrate {
			it.children = []*item{}
		}
		items[k] = it
	}
	unitItems := make([]*item, len(units))
	for i, u := range units {
		it := resultItem(results[i])
		if u.Candidate < 0 || u.Candidate >= len(items) {
			continue
		}
		parent := items[u.Candidate]
		if row.PerSubstrate && u.Substrate >= 0 {
			it.subIndex = u.Substrate + 1
			it.substrate = substrateText(u)
			parent.children = append(parent.children, it)
		} else {
			// The candidate's own item takes the unit's outcome.
			parent.value, parent.source, parent.err, parent.details = it.value, it.source, it.err, it.details
			it = parent
		}
		unitItems[i] = it
	}
	selected := map[int]bool{} // unit indices
	c := Cell{Selected: -1}
	if row.PerSubstrate && target != "kcat" {
		vals := make([]*float64, len(row.Substrates))
		var sources []string
		any := false
		for s := range row.Substrates {
			best := -1
			for i, u := range units {
				it := unitItems[i]
				if u.Substrate != s || it == nil || it.value == nil {
					continue
				}
				if best < 0 || better(target, *it.value, *unitItems[best].value) {
					best = i
				}
			}
			if best >= 0 {
				selected[best] = true
				vals[s] = unitItems[best].value
				sources = append(sources, unitItems[best].source)
				if !any {
					c.Selected = units[best].Candidate
				}
				any = true
			}
		}
		if any {
			c.Value, c.Source, c.Filled = valuesJSON(vals), arraySource(sources), true
		}
	} else {
		best := -1
		for i, it := range unitItems {
			if it == nil || it.value == nil {
				continue
			}
			if best < 0 || better(target, *it.value, *unitItems[best].value) {
				best = i
			}
		}
		if best >= 0 {
			selected[best] = true
			it := unitItems[best]
			c.Value, c.Source, c.Filled, c.Selected = FormatFloat(*it.value), it.source, true, units[best].Candidate
		}
	}
	// A candidate that got no unit (its row skipped for a substrate
	// reason) carries the row's reason.
	for k, it := range items {
		if it.children == nil && it.value == nil && it.err == "" {
			it.err = row.Skip
			if it.err == "" {
				it.err = NoPrediction
			}
		}
		if it.children != nil && len(it.children) == 0 && row.Candidates[k].Skip == "" && row.Skip != "" {
			it.children = nil
			it.err = row.Skip
		}
	}
	// Mark selections: every leaf item gets selected true/false.
	for _, it := range items {
		if it.children == nil {
			f := false
			it.selected = &f
		}
		for _, ch := range it.children {
			f := false
			ch.selected = &f
		}
	}
	for i := range selected {
		t := true
		unitItems[i].selected = &t
	}
	if !c.Filled {
		c.Source = failureReason(items, NoSequencePrediction)
	}
	c.Extra = itemsJSON(items)
	return c
}

// FormatFloat writes v as Python's repr (and json.dumps) does: the
// shortest round-trip digits, at least one decimal ("3.0"), exponent form
// below 1e-4 and from 1e16 ("1e-05", "1e+16").
func FormatFloat(v float64) string {
	s := strconv.FormatFloat(v, 'e', -1, 64)
	mant, expStr, _ := strings.Cut(s, "e")
	exp, _ := strconv.Atoi(expStr)
	if exp < -4 || exp >= 16 {
		sign := "+"
		if exp < 0 {
			sign, exp = "-", -exp
		}
		return fmt.Sprintf("%se%s%02d", mant, sign, exp)
	}
	f := strconv.FormatFloat(v, 'f', -1, 64)
	if !strings.Contains(f, ".") {
		f += ".0"
	}
	return f
}

// writeString writes s as a JSON string the way Python's json.dumps does by
// default (ensure_ascii): non-ASCII as \uXXXX (surrogate pairs above the
// BMP), control characters escaped, '<', '>' and '&' left as they are.
func writeString(b *bytes.Buffer, s string) {
	const hex = "0123456789abcdef"
	b.WriteByte('"')
	for _, r := range s {
		switch {
		case r == '"':
			b.WriteString(`\"`)
		case r == '\\':
			b.WriteString(`\\`)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r == '\b':
			b.WriteString(`\b`)
		case r == '\f':
			b.WriteString(`\f`)
		case r < 0x20 || (r >= 0x7f && r < utf8.RuneSelf):
			b.WriteString(`\u00`)
			b.WriteByte(hex[r>>4])
			b.WriteByte(hex[r&0xf])
		case r < utf8.RuneSelf:
			b.WriteByte(byte(r))
		default:
			if r > 0xffff {
				r -= 0x10000
				fmt.Fprintf(b, `\u%04x\u%04x`, 0xd800+(r>>10), 0xdc00+(r&0x3ff))
			} else {
				fmt.Fprintf(b, `\u%04x`, r)
			}
		}
	}
	b.WriteByte('"')
}
