package methods

import (
	"fmt"
	"math"
	"slices"
	"strconv"
)

// Output forms: how a method's program states its answer for one target.
// The descriptor declares it (outputs); kinflow converts every answer into
// the value its result column holds and fails the row of an answer that is
// not in the declared form, so no number is ever guessed into a column.
const (
	// FormLinear is a value in the column's unit times Factor (default 1).
	FormLinear = "linear"
	// FormLog10 is log10 of the value; the column holds 10^answer × Factor.
	FormLog10 = "log10"
	// FormClassIndex is the 0-based index of one of the declared Ranges:
	// the column holds that range's arithmetic mean × Factor, as the
	// reference serves its classifier's classes (a value column, not a
	// range column).
	FormClassIndex = "class_index"
	// FormClassMidpoint is the midpoint of one of the declared range
	// classes (Edges, in Unit): the column holds the class, shown as its
	// range text, and the midpoint goes in the target's midpoint column.
	FormClassMidpoint = "class_midpoint"
)

// Output is a method's declared answer form for one target.
type Output struct {
	// Form is FormLinear (the default when empty), FormLog10 or
	// FormClassMidpoint.
	Form string `json:"form" yaml:"form"`
	// Factor converts the linear value into the column's unit (e.g. 0.001
	// for an answer per M into a column per mM); 0 means 1.
	Factor float64 `json:"factor,omitempty" yaml:"factor,omitempty"`
	// Edges are the class edges of FormClassMidpoint, ascending: class i
	// runs from Edges[i] to Edges[i+1].
	Edges []float64 `json:"edges,omitempty" yaml:"edges,omitempty"`
	// Unit is the unit written in a class's range text ("s^-1", "M").
	Unit string `json:"unit,omitempty" yaml:"unit,omitempty"`
	// Ranges are the [low, high] of each class of FormClassIndex, in the
	// program's unit, by index.
	Ranges [][2]float64 `json:"ranges,omitempty" yaml:"ranges,omitempty"`
}

// IsRange reports whether the form is range classes.
func (o Output) IsRange() bool { return o.Form == FormClassMidpoint }

// validate checks o's consistency for a descriptor's target.
func (o Output) validate() error {
	if o.Form != FormClassIndex && len(o.Ranges) > 0 {
		return fmt.Errorf("ranges belong to form %s", FormClassIndex)
	}
	switch o.Form {
	case "", FormLinear, FormLog10, FormClassIndex:
		if len(o.Edges) > 0 || o.Unit != "" {
			return fmt.Errorf("edges and unit belong to form %s", FormClassMidpoint)
		}
		if o.Form != FormClassIndex {
			break
		}
		if len(o.Ranges) == 0 {
			return fmt.Errorf("form %s needs the ranges of its classes", FormClassIndex)
		}
		for i, r := range o.Ranges {
			if math.IsNaN(r[0]) || math.IsInf(r[1], 0) || math.IsNaN(r[1]) || r[0] < 0 || r[1] <= r[0] {
				return fmt.Errorf("class %d's range %v is not low < high, both finite and non-negative", i, r)
			}
		}
	case FormClassMidpoint:
		if o.Factor != 0 {
			return fmt.Errorf("form %s takes no factor: a class midpoint is served as the program states it", FormClassMidpoint)
		}
		if len(o.Edges) < 2 {
			return fmt.Errorf("form %s needs at least two edges", FormClassMidpoint)
		}
		for i, e := range o.Edges {
			if math.IsNaN(e) || math.IsInf(e, 0) || e < 0 {
				return fmt.Errorf("edge %v is not a finite, non-negative number", e)
			}
			if i > 0 && e <= o.Edges[i-1] {
				return fmt.Errorf("edges must ascend (%v after %v)", e, o.Edges[i-1])
			}
		}
		if o.Unit == "" {
			return fmt.Errorf("form %s needs the unit of its range texts", FormClassMidpoint)
		}
	default:
		return fmt.Errorf("form %q (want %s, %s, %s or %s)", o.Form, FormLinear, FormLog10, FormClassIndex, FormClassMidpoint)
	}
	if o.Factor < 0 || math.IsNaN(o.Factor) || math.IsInf(o.Factor, 0) {
		return fmt.Errorf("factor %v is not a finite, positive number", o.Factor)
	}
	return nil
}

// Classes is the number of range classes (0 for a numeric form).
func (o Output) Classes() int {
	if !o.IsRange() {
		return 0
	}
	return len(o.Edges) - 1
}

// Midpoint is class i's midpoint: the geometric mean of its edges, or the
// arithmetic mean for a class whose lower edge is 0 (as the reference's
// program computes them).
func (o Output) Midpoint(i int) float64 {
	lo, hi := o.Edges[i], o.Edges[i+1]
	if lo > 0 {
		return math.Sqrt(lo * hi)
	}
	return (lo + hi) / 2
}

// Midpoints are every class's midpoint, in class order.
func (o Output) Midpoints() []float64 {
	out := make([]float64, o.Classes())
	for i := range out {
		out[i] = o.Midpoint(i)
	}
	return out
}

// Label is class i's range text, "<low> to <high> <unit>" with each edge
// as Python's "{:g}" writes it ("0 to 1e-08 s^-1", "0.1 to 10000 M").
func (o Output) Label(i int) string {
	return formatG(o.Edges[i]) + " to " + formatG(o.Edges[i+1]) + " " + o.Unit
}

// Labels are every class's range text, in class order.
func (o Output) Labels() []string {
	out := make([]string, o.Classes())
	for i := range out {
		out[i] = o.Label(i)
	}
	return out
}

// ClassOf is the class whose midpoint v is (relative tolerance 1e-12, as
// the reference's reporting uses); false for any other value.
func (o Output) ClassOf(v float64) (int, bool) {
	for i := 0; i < o.Classes(); i++ {
		m := o.Midpoint(i)
		if math.Abs(v-m) <= 1e-12*math.Max(math.Abs(v), math.Abs(m)) {
			return i, true
		}
	}
	return -1, false
}

// Convert turns a program's answer into the value the column holds, or
// says why the answer is not in the declared form (the row's reason).
func (o Output) Convert(v float64) (float64, string) {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, ReasonNoPrediction
	}
	factor := o.Factor
	if factor == 0 {
		factor = 1
	}
	switch o.Form {
	case FormLog10:
		out := math.Pow(10, v) * factor
		if out == 0 || math.IsInf(out, 0) {
			return 0, fmt.Sprintf("the method's log10 answer %s is outside the range of a number", strconv.FormatFloat(v, 'g', -1, 64))
		}
		return out, ""
	case FormClassIndex:
		i := int(v)
		if float64(i) != v || i < 0 || i >= len(o.Ranges) {
			return 0, fmt.Sprintf("the method's answer %s is not one of its %d class indices (0 to %d)", strconv.FormatFloat(v, 'g', -1, 64), len(o.Ranges), len(o.Ranges)-1)
		}
		return (o.Ranges[i][0] + o.Ranges[i][1]) / 2 * factor, ""
	case FormClassMidpoint:
		i, ok := o.ClassOf(v)
		if !ok {
			return 0, fmt.Sprintf("the method's answer %s is not a known class midpoint; no range is reported", strconv.FormatFloat(v, 'g', -1, 64))
		}
		return o.Midpoint(i), ""
	}
	return v * factor, ""
}

// formatG is Python's format(v, "g"): six significant digits, trailing
// zeros dropped, exponent form below 1e-4 and from 1e6 (two exponent
// digits at least).
func formatG(v float64) string {
	s := strconv.FormatFloat(v, 'g', 6, 64)
	mant, exp, found := cutExp(s)
	if !found {
		return trimZeros(s)
	}
	return trimZeros(mant) + "e" + exp
}

func cutExp(s string) (string, string, bool) {
	for i := 0; i < len(s); i++ {
		if s[i] == 'e' {
			return s[:i], s[i+1:], true
		}
	}
	return s, "", false
}

func trimZeros(s string) string {
	if !slices.Contains([]byte(s), '.') {
		return s
	}
	for len(s) > 0 && s[len(s)-1] == '0' {
		s = s[:len(s)-1]
	}
	if len(s) > 0 && s[len(s)-1] == '.' {
		s = s[:len(s)-1]
	}
	return s
}

// OutputOf is d's declared answer form for target t (FormLinear when the
// descriptor declares none).
func (d *Descriptor) OutputOf(t Target) Output {
	if o, ok := d.Outputs[t]; ok {
		if o.Form == "" {
			o.Form = FormLinear
		}
		return o
	}
	return Output{Form: FormLinear}
}

// RangeColumns are the two columns a range target adds after its value,
// Source and Extra Info columns: the class midpoint in the column's unit
// and the experimental value that replaces a prediction, named as the
// reference's reporting names them.
func RangeColumns(t Target) (midpoint, experimental string) {
	switch t {
	case Km:
		return "Derived KM range midpoint (M)", "Experimental KM (source units)"
	case KcatKm:
		return "Derived kcat/Km range midpoint (1/(s*M))", "Experimental kcat/Km (source units)"
	}
	return "Derived kcat range midpoint (1/s)", "Experimental kcat (1/s)"
}
