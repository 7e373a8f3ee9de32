package activities

import (
	"reflect"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/input"
	"github.com/kinflow/kinflow/internal/units"
)

func TestExpandSequences(t *testing.T) {
	long := strings.Repeat("A", 12)
	tb, err := input.ParseCSV(strings.NewReader("Protein Sequence,x\nMKT,1\n,2\nMKT; "+long+" ,3\n"+long+";"+long+",4\nMK1;MKV,5\n;,6\nMK1;M2,7\n"), 0)
	if err != nil {
		t.Fatal(err)
	}
	js := expandSequences(tb, 10, input.LongSkip)
	if !js.candidateMode {
		t.Fatal("candidate mode")
	}
	wantSkip := []string{"", units.MissingSequence, "", input.SkipTooLong, "", units.MissingSequence, input.ReasonInvalidProtein}
	if !reflect.DeepEqual(js.skip, wantSkip) {
		t.Errorf("skips %q", js.skip)
	}
	if c := js.cands[2]; len(c) != 2 || c[1].Sequence != long || c[1].Skip != units.CandidateTooLong || js.sent[2][0] != "MKT" {
		t.Errorf("row 3 %+v %q", c, js.sent[2])
	}
	if c := js.cands[4]; c[0].Skip != input.ReasonInvalidProtein || c[1].Skip != "" || js.sent[4][1] != "MKV" {
		t.Errorf("row 5 %+v", c)
	}
	// Truncate mode truncates each candidate; without lists an empty cell
	// keeps the invalid-sequence skip reason and the cell is taken as it is.
	js = expandSequences(tb, 10, input.LongTruncate)
	if js.skip[3] != "" || len(js.sent[3][0]) != 10 {
		t.Errorf("truncate: %q %q", js.skip[3], js.sent[3])
	}
	old, _ := input.ParseCSV(strings.NewReader("Protein Sequence,x\n MKT ,1\n,2\n"), 0)
	js = expandSequences(old, 10, input.LongSkip)
	if js.candidateMode || js.skip[1] != input.ReasonInvalidProtein || js.cands[0][0].Sequence != " MKT " || js.skip[0] != input.ReasonInvalidProtein {
		t.Errorf("older wire: %+v", js)
	}
}
