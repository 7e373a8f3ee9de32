package methods

import (
	"math"
	"reflect"
	"strings"
	"testing"
)

// TestRangeClassesOfMethodK: method K's classes, their texts and midpoints
// are those of the reference's reporting (texts as Python's "{:g}" writes
// the edges; geometric midpoints, arithmetic for the zero-lower class).
func TestRangeClassesOfMethodK(t *testing.T) {
	k, ok := Default().Get("K")
	if !ok {
		t.Fatal("no method K")
	}
	kcat, km := k.OutputOf(Kcat), k.OutputOf(Km)
	if !kcat.IsRange() || !km.IsRange() {
		t.Fatalf("K's outputs are not range classes: %+v %+v", kcat, km)
	}
	wantKcat := []string{"0 to 1e-08 s^-1", "1e-08 to 0.01 s^-1", "0.01 to 0.1 s^-1", "0.1 to 1 s^-1", "1 to 10 s^-1",
		"10 to 100 s^-1", "100 to 1000 s^-1", "1000 to 1e+08 s^-1"}
	if got := kcat.Labels(); !reflect.DeepEqual(got, wantKcat) {
		t.Errorf("kcat classes %q", got)
	}
	wantKm := []string{"1e-14 to 1e-05 M", "1e-05 to 0.0001 M", "0.0001 to 0.001 M", "0.001 to 0.01 M", "0.01 to 0.1 M", "0.1 to 10000 M"}
	if got := km.Labels(); !reflect.DeepEqual(got, wantKm) {
		t.Errorf("Km classes %q", got)
	}
	// Python's math.sqrt(low*high) and (low+high)/2, printed with repr.
	wantMid := []float64{5e-09, 1e-05, 0.03162277660168379, 0.31622776601683794, 3.1622776601683795,
		31.622776601683793, 316.22776601683796, 316227.7660168379}
	if got := kcat.Midpoints(); !reflect.DeepEqual(got, wantMid) {
		t.Errorf("kcat midpoints %v", got)
	}
	if got := km.Midpoints()[0]; got != 3.1622776601683795e-10 {
		t.Errorf("first Km midpoint %v", got)
	}
	if k.OutputOf(KcatKm).IsRange() || (&Descriptor{}).OutputOf(Kcat).Form != FormLinear {
		t.Error("a target without a declared form is linear")
	}
}

// TestOutputConvert: each declared form converts the program's answer or
// names why it is not in that form; nothing outside the form is served.
func TestOutputConvert(t *testing.T) {
	k, _ := Default().Get("K")
	kcat := k.OutputOf(Kcat)
	for i, m := range kcat.Midpoints() {
		v, bad := kcat.Convert(m)
		if bad != "" || v != m {
			t.Errorf("midpoint %d: %v %q", i, v, bad)
		}
		// Within the reference's relative tolerance: still that class.
		if v, bad := kcat.Convert(m * (1 + 1e-13)); bad != "" || v != m {
			t.Errorf("midpoint %d within 1e-12: %v %q", i, v, bad)
		}
	}
	for _, v := range []float64{3, 1, 10, 0, 1e-6, 3.1622776601683795 * (1 + 1e-9)} {
		if _, bad := kcat.Convert(v); !strings.Contains(bad, "not a known class midpoint") {
			t.Errorf("%v served as a class: %q", v, bad)
		}
	}
	if _, bad := kcat.Convert(math.NaN()); bad != ReasonNoPrediction {
		t.Errorf("NaN: %q", bad)
	}
	log10 := Output{Form: FormLog10, Factor: 0.001}
	if v, bad := log10.Convert(5); bad != "" || math.Abs(v-100) > 1e-9 {
		t.Errorf("log10 5 per M = %v per mM (%q), want 100", v, bad)
	}
	if _, bad := log10.Convert(400); bad == "" {
		t.Error("10^400 served")
	}
	if v, _ := (Output{}).Convert(2.5); v != 2.5 {
		t.Errorf("linear %v", v)
	}
	if v, _ := (Output{Form: FormLinear, Factor: 1000}).Convert(0.002); v != 2 {
		t.Errorf("linear with factor %v", v)
	}
}

// TestOutputValidation: an operator's declared form is checked when the
// catalogue loads.
func TestOutputValidation(t *testing.T) {
	bad := map[string]string{
		"unknown form":        `{"methods": [{"key": "B", "outputs": {"kcat": {"form": "cube"}}}]}`,
		"unsupported":         `{"methods": [{"key": "J", "outputs": {"kcat": {"form": "log10"}}}]}`,
		"edges not ascending": `{"methods": [{"key": "B", "outputs": {"kcat": {"form": "class_midpoint", "unit": "s^-1", "edges": [1, 0.1]}}}]}`,
		"one edge":            `{"methods": [{"key": "B", "outputs": {"kcat": {"form": "class_midpoint", "unit": "s^-1", "edges": [1]}}}]}`,
		"no unit":             `{"methods": [{"key": "B", "outputs": {"kcat": {"form": "class_midpoint", "edges": [1, 2]}}}]}`,
		"edges on log10":      `{"methods": [{"key": "B", "outputs": {"kcat": {"form": "log10", "edges": [1, 2]}}}]}`,
		"negative factor":     `{"methods": [{"key": "B", "outputs": {"kcat": {"form": "linear", "factor": -1}}}]}`,
		"range uncertainty":   `{"methods": [{"key": "E", "outputs": {"kcat": {"form": "class_midpoint", "unit": "s^-1", "edges": [1, 2]}}}]}`,
	}
	for name, body := range bad {
		if _, err := Parse([]byte(body)); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
	c, err := Parse([]byte(`{"methods": [{"key": "B", "outputs": {"kcat/Km": {"form": "log10", "factor": 0.001}}}]}`))
	if err != nil {
		t.Fatal(err)
	}
	b, _ := c.Get("B")
	if o := b.OutputOf(KcatKm); o.Form != FormLog10 || o.Factor != 0.001 {
		t.Errorf("B's declared form %+v", o)
	}
	if d, _ := Default().Get("B"); d.OutputOf(KcatKm).Form != FormLinear {
		t.Error("the operator file changed the built-in catalogue")
	}
	if _, err := Parse([]byte(`{"methods": [{"key": "B", "outputs": {"kcat": {"form": "class_index", "ranges": [[2, 1]]}}}]}`)); err == nil {
		t.Error("a class range with low > high accepted")
	}
	if _, err := Parse([]byte(`{"methods": [{"key": "B", "outputs": {"kcat": {"form": "class_index"}}}]}`)); err == nil {
		t.Error("class_index without ranges accepted")
	}
}

// TestBuiltinOutputForms: method H's programs answer class indices (Km
// classes in M, its column in mM) and I's log10 of kcat/Km per (s·M) (its
// column per (s·mM)); each is served converted, never as the raw answer.
func TestBuiltinOutputForms(t *testing.T) {
	h, _ := Default().Get("H")
	if v, bad := h.OutputOf(Kcat).Convert(3); bad != "" || v != (1.01e-1+1)/2 {
		t.Errorf("H kcat class 3 = %v (%q), want the mean of 0.101 and 1 s^-1", v, bad)
	}
	if v, bad := h.OutputOf(Km).Convert(0); bad != "" || math.Abs(v-(1e-10+1e-5)/2*1000) > 1e-15 {
		t.Errorf("H Km class 0 = %v mM (%q)", v, bad)
	}
	for _, v := range []float64{8, -1, 2.5} {
		if _, bad := h.OutputOf(Kcat).Convert(v); !strings.Contains(bad, "not one of its 8 class indices") {
			t.Errorf("H kcat answer %v: %q", v, bad)
		}
	}
	i, _ := Default().Get("I")
	if v, bad := i.OutputOf(KcatKm).Convert(4); bad != "" || math.Abs(v-10) > 1e-12 {
		t.Errorf("I log10 4 per (s·M) = %v per (s·mM) (%q), want 10", v, bad)
	}
}
