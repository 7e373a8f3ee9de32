package result

import (
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
)

// TestRangeText: a range cell names the class of its midpoint, a list cell
// the class of each (null kept, order kept); a value that is no midpoint
// gives no text, so it is never shown as a class.
func TestRangeText(t *testing.T) {
	k, _ := methods.Default().Get("K")
	km := k.OutputOf(methods.Km)
	for value, want := range map[string]string{
		"0.0031622776601683794":                            "0.001 to 0.01 M",
		"3.1622776601683795e-10":                           "1e-14 to 1e-05 M",
		"[3.1622776601683795e-05,null,31.622776601683793]": `["1e-05 to 0.0001 M",null,"0.1 to 10000 M"]`,
		"[]": "[]",
	} {
		if got, ok := rangeText(km, value); !ok || got != want {
			t.Errorf("%s: %q %v, want %q", value, got, ok, want)
		}
	}
	for _, value := range []string{"0.003", "[0.003]", "x", "[1e-05,", "NaN"} {
		if got, ok := rangeText(km, value); ok {
			t.Errorf("%s named a class: %q", value, got)
		}
	}
}
