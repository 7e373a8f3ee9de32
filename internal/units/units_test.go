package units

import (
	"bytes"
	"encoding/json"
	"reflect"
	"slices"
	"strings"
	"testing"
)

func fp(v float64) *float64 { return &v }

func TestSplit(t *testing.T) {
	cases := map[string][]string{
		"":                  nil,
		"  NaN ":            nil,
		"none":              nil,
		"<NA>":              nil,
		"NaT":               nil,
		"CCO":               {"CCO"},
		" CCO ; O ;; ":      {"CCO", "O"},
		";;":                nil,
		"CCO.O":             {"CCO.O"},
		"InChI=1S/H2O/h1H2": {"InChI=1S/H2O/h1H2"},
		"nan;CCO":           {"nan", "CCO"},
	}
	for in, want := range cases {
		if got := Split(in); !reflect.DeepEqual(got, want) {
			t.Errorf("Split(%q) = %q, want %q", in, got, want)
		}
	}
}

// subRow builds a per-substrate row with one candidate and its units.
func subRow(target string, toks ...string) (Row, []Unit) {
	row := Row{Candidates: []Candidate{{Sequence: "MKT"}}, Substrates: toks, PerSubstrate: true}
	return row, Expand(0, target, row, []string{"MKT"}, map[string]string{"smiles": "x"}, "smiles", nil, nil)
}

const src = "Prediction from Method B"

func TestReduceSubstrates(t *testing.T) {
	cases := []struct {
		name    string
		target  string
		toks    []string
		results []Result
		want    Cell
	}{
		{"kcat max, ties first", "kcat", []string{"CCO", "O", "C"},
			[]Result{{Value: fp(2), Source: src}, {Value: fp(5), Source: src}, {Value: fp(5), Source: "other"}},
			Cell{Value: "5.0", Source: src, Filled: true, Selected: 0,
				Extra: `[{"substrateIndex":1,"substrate":"CCO","prediction":2.0,"source":"Prediction from Method B","error":null,"selected":false},` +
					`{"substrateIndex":2,"substrate":"O","prediction":5.0,"source":"Prediction from Method B","error":null,"selected":true},` +
					`{"substrateIndex":3,"substrate":"C","prediction":5.0,"source":"other","error":null,"selected":false}]`}},
		{"Km array with a failed child", "Km", []string{"CCO", "X", "O"},
			[]Result{{Value: fp(0.12), Source: src}, {Error: "Invalid substrate (not a valid SMILES or InChI)"}, {Value: fp(3.4), Source: src}},
			Cell{Value: "[0.12,null,3.4]", Source: src + " (per substrate)", Filled: true, Selected: -1,
				Extra: `[{"substrateIndex":1,"substrate":"CCO","prediction":0.12,"source":"Prediction from Method B","error":null},` +
					`{"substrateIndex":2,"substrate":"X","prediction":null,"source":"","error":"Invalid substrate (not a valid SMILES or InChI)"},` +
					`{"substrateIndex":3,"substrate":"O","prediction":3.4,"source":"Prediction from Method B","error":null}]`}},
		{"one token still an array", "kcat/Km", []string{"CCO"},
			[]Result{{Value: fp(0.12), Source: src}},
			Cell{Value: "[0.12]", Source: src + " (per substrate)", Filled: true, Selected: -1,
				Extra: `[{"substrateIndex":1,"substrate":"CCO","prediction":0.12,"source":"Prediction from Method B","error":null}]`}},
		{"mixed sources", "Km", []string{"CCO", "O"},
			[]Result{{Value: fp(1e-5), Source: src}, {Value: fp(2), Source: "Experimental"}},
			Cell{Value: "[1e-05,2.0]", Source: MixedSources, Filled: true, Selected: -1,
				Extra: `[{"substrateIndex":1,"substrate":"CCO","prediction":1e-05,"source":"Prediction from Method B","error":null},` +
					`{"substrateIndex":2,"substrate":"O","prediction":2.0,"source":"Experimental","error":null}]`}},
		{"every child failed: distinct errors", "Km", []string{"X", "Y", "O"},
			[]Result{{Error: "bad"}, {Error: "bad"}, {}},
			Cell{Source: "bad; Prediction could not be made", Selected: -1,
				Extra: `[{"substrateIndex":1,"substrate":"X","prediction":null,"source":"","error":"bad"},` +
					`{"substrateIndex":2,"substrate":"Y","prediction":null,"source":"","error":"bad"},` +
					`{"substrateIndex":3,"substrate":"O","prediction":null,"source":"","error":"Prediction could not be made"}]`}},
		{"kcat all failed", "kcat", []string{"O"},
			[]Result{{Value: nil}},
			Cell{Source: NoPrediction, Selected: -1,
				Extra: `[{"substrateIndex":1,"substrate":"O","prediction":null,"source":"","error":"Prediction could not be made","selected":false}]`}},
		{"empty list", "Km", nil, nil, Cell{Source: NoSubstratePrediction, Extra: `[]`, Selected: -1}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			row, us := subRow(c.target, c.toks...)
			if len(us) != len(c.toks) {
				t.Fatalf("%d units for %d tokens", len(us), len(c.toks))
			}
			got := Reduce(c.target, row, us, c.results, Options{})
			if got != c.want {
				t.Errorf("got  %+v\nwant %+v", got, c.want)
			}
		})
	}
}

func TestReduceLegacy(t *testing.T) {
	row := Row{Candidates: []Candidate{{Sequence: "MKT"}}}
	us := Expand(3, "kcat", row, []string{"MKT"}, map[string]string{"smiles": "CCO.O"}, "smiles", []string{"CCO.O"}, nil)
	if len(us) != 1 || us[0].Substrate != -1 || us[0].Row != 3 || us[0].Kwargs["smiles"] != "CCO.O" {
		t.Fatalf("units %+v", us)
	}
	got := Reduce("kcat", row, us, []Result{{Value: fp(12.5), Source: src}}, Options{LegacyExtra: "synthetic"})
	if got != (Cell{Value: "12.5", Source: src, Extra: "synthetic", Filled: true, Selected: 0}) {
		t.Errorf("got %+v", got)
	}
	got = Reduce("kcat", row, us, []Result{{}}, Options{LegacyExtra: "synthetic"})
	if got != (Cell{Source: NoPrediction, Selected: -1}) {
		t.Errorf("no value: got %+v", got)
	}
	got = Reduce("kcat", Row{Skip: "Sequence too long — row was excluded"}, nil, nil, Options{})
	if got.Source != "Sequence too long — row was excluded" || got.Filled {
		t.Errorf("skip: got %+v", got)
	}
}

func TestReduceCandidates(t *testing.T) {
	row := Row{Candidates: []Candidate{{Sequence: "MKT"}, {Sequence: "MKTAAAA", Skip: CandidateTooLong}, {Sequence: "MAA"}}}
	us := Expand(0, "Km", row, []string{"MKT", "", "MAA"}, map[string]string{"smiles": "CCO"}, "smiles", []string{"CCO"}, nil)
	if len(us) != 2 || us[1].Candidate != 2 || us[1].Seq != "MAA" {
		t.Fatalf("units %+v", us)
	}
	res := []Result{{Value: fp(3), Source: src}, {Value: fp(2), Source: src}}
	got := Reduce("Km", row, us, res, Options{CandidateMode: true})
	want := Cell{Value: "2.0", Source: src, Filled: true, Selected: 2,
		Extra: `[{"sequenceIndex":1,"sequence":"MKT","prediction":3.0,"source":"Prediction from Method B","error":null,"selected":false},` +
			`{"sequenceIndex":2,"sequence":"MKTAAAA","prediction":null,"source":"","error":"Sequence too long \u2014 sequence candidate was excluded","selected":false},` +
			`{"sequenceIndex":3,"sequence":"MAA","prediction":2.0,"source":"Prediction from Method B","error":null,"selected":true}]`}
	if got != want {
		t.Errorf("Km min:\ngot  %+v\nwant %+v", got, want)
	}
	got = Reduce("kcat", row, us, res, Options{CandidateMode: true})
	if got.Value != "3.0" || got.Selected != 0 {
		t.Errorf("kcat max: got %+v", got)
	}
	// Single-candidate row of a candidate-mode job: the array form too.
	one := Row{Candidates: []Candidate{{Sequence: "MKT"}}}
	us1 := Expand(1, "kcat", one, []string{"MKT"}, nil, "smiles", []string{"CCO"}, nil)
	got = Reduce("kcat", one, us1, []Result{{Error: "boom"}}, Options{CandidateMode: true})
	if got.Source != "boom" || got.Extra != `[{"sequenceIndex":1,"sequence":"MKT","prediction":null,"source":"","error":"boom","selected":false}]` {
		t.Errorf("failed single: %+v", got)
	}
}

func TestReduceCandidatesPerSubstrate(t *testing.T) {
	row := Row{Candidates: []Candidate{{Sequence: "MKT"}, {Sequence: "MAA"}}, Substrates: []string{"CCO", "O"}, PerSubstrate: true}
	us := Expand(0, "Km", row, []string{"MKT", "MAA"}, map[string]string{"smiles": ""}, "smiles", nil, nil)
	if len(us) != 4 || us[2].Candidate != 1 || us[2].Substrate != 0 || us[2].Kwargs["smiles"] != "CCO" {
		t.Fatalf("units %+v", us)
	}
	res := []Result{{Value: fp(1), Source: src}, {Value: fp(4), Source: src}, {Value: fp(2), Source: src}, {Value: fp(3), Source: src}}
	got := Reduce("Km", row, us, res, Options{CandidateMode: true})
	want := Cell{Value: "[1.0,3.0]", Source: src + " (per substrate)", Filled: true, Selected: 0,
		Extra: `[{"sequenceIndex":1,"sequence":"MKT","substrates":[` +
			`{"substrateIndex":1,"substrate":"CCO","prediction":1.0,"source":"Prediction from Method B","error":null,"selected":true},` +
			`{"substrateIndex":2,"substrate":"O","prediction":4.0,"source":"Prediction from Method B","error":null,"selected":false}]},` +
			`{"sequenceIndex":2,"sequence":"MAA","substrates":[` +
			`{"substrateIndex":1,"substrate":"CCO","prediction":2.0,"source":"Prediction from Method B","error":null,"selected":false},` +
			`{"substrateIndex":2,"substrate":"O","prediction":3.0,"source":"Prediction from Method B","error":null,"selected":true}]}]`}
	if got != want {
		t.Errorf("per slot:\ngot  %+v\nwant %+v", got, want)
	}
	// kcat: the largest over every candidate and substrate.
	got = Reduce("kcat", row, us, res, Options{CandidateMode: true})
	if got.Value != "4.0" || got.Selected != 0 {
		t.Errorf("kcat: %+v", got)
	}
}

func TestFormatFloatAndStrings(t *testing.T) {
	for v, want := range map[float64]string{3: "3.0", 0.12: "0.12", 1e-5: "1e-05", 1e16: "1e+16", 123456.5: "123456.5", -2.5e-7: "-2.5e-07"} {
		if got := FormatFloat(v); got != want {
			t.Errorf("FormatFloat(%v) = %q, want %q", v, got, want)
		}
	}
	it := &item{subIndex: 1, substrate: "C<é>\"\x7f😀", err: "x"}
	if got := itemsJSON([]*item{it}); got != `[{"substrateIndex":1,"substrate":"C<\u00e9>\"\u007f\ud83d\ude00","prediction":null,"source":"","error":"x"}]` {
		t.Errorf("json: %s", got)
	}
}

func TestReduceSkippedRowInCandidateMode(t *testing.T) {
	row := Row{Candidates: []Candidate{{Sequence: "MKT", Skip: CandidateTooLong}, {Sequence: "MAA", Skip: CandidateTooLong}},
		Skip: "Sequence too long — row was excluded", SequenceSkip: true}
	got := Reduce("kcat", row, nil, nil, Options{CandidateMode: true})
	want := `[{"sequenceIndex":1,"sequence":"MKT","prediction":null,"source":"","error":"Sequence too long \u2014 sequence candidate was excluded","selected":false},` +
		`{"sequenceIndex":2,"sequence":"MAA","prediction":null,"source":"","error":"Sequence too long \u2014 sequence candidate was excluded","selected":false}]`
	if got.Source != row.Skip || got.Extra != want || got.Filled {
		t.Errorf("got %+v", got)
	}
	// A row skipped for its substrate: each candidate carries the reason.
	row = Row{Candidates: []Candidate{{Sequence: "MKT"}}, Skip: "bad substrate"}
	got = Reduce("Km", row, nil, nil, Options{CandidateMode: true})
	if got.Extra != `[{"sequenceIndex":1,"sequence":"MKT","prediction":null,"source":"","error":"bad substrate","selected":false}]` {
		t.Errorf("substrate skip: %+v", got)
	}
	// Outside candidate mode a skipped row has no Extra Info.
	if got := Reduce("Km", row, nil, nil, Options{}); got.Extra != "" || got.Source != "bad substrate" {
		t.Errorf("legacy skip: %+v", got)
	}
}

// TestCountIsLenOfSplit: Count counts what Split returns.
func TestCountIsLenOfSplit(t *testing.T) {
	for _, c := range []string{"", " ", "none", "NaN", "a", "a;b", ";a;;b; ;", " a ; b ;c", ";;;", "a;", "x;none"} {
		if got, want := Count(c), len(Split(c)); got != want {
			t.Errorf("Count(%q) = %d, Split has %d", c, got, want)
		}
	}
}

// TestShareInputsStoresListsOncePerRow: the candidates of a native row
// send the same lists; stored, they are written once per row (written per
// unit, a 1,000-candidate × 20,000-substrate row made a 1.36 GB rows.json), and
// restored every unit is what Expand made.
func TestShareInputsStoresListsOncePerRow(t *testing.T) {
	subs := make([]string, 2000)
	for i := range subs {
		subs[i] = "CCO" + strings.Repeat("C", i%7)
	}
	cands := make([]Candidate, 100)
	sent := make([]string, 100)
	for i := range cands {
		cands[i] = Candidate{Sequence: "MKTAYIAKQR"}
		sent[i] = "MKTAYIAKQR"
	}
	kw := map[string]string{"substrates": strings.Join(subs, ";")}
	us := Expand(0, "kcat", Row{Candidates: cands}, sent, kw, "", subs, nil)
	// A row of the older wire: one unit, stored as it was.
	us = append(us, Expand(1, "kcat", Row{Candidates: cands[:1]}, sent[:1], map[string]string{"smiles": "CCO"}, "", []string{"CCO"}, nil)...)
	// An expanded row: two long candidates × 50 substrates, each unit
	// its own token; the sequences are stored once per candidate.
	long := []string{strings.Repeat("MKTAYIAKQR", 500), strings.Repeat("MSTNPKPQRK", 500)}
	pair := Expand(2, "Km", Row{Candidates: []Candidate{{Sequence: long[0]}, {Sequence: long[1]}}, PerSubstrate: true, Substrates: subs[:50]},
		long, map[string]string{"smiles": ""}, "smiles", nil, nil)
	us = append(us, pair...)
	want, _ := json.Marshal(us)
	stored := slices.Clone(us)
	inputs := ShareInputs(3, stored)
	if inputs[2] == nil || len(inputs[2].Seqs) != 2 || stored[101].Seq != "" || !stored[101].SeqShared || stored[101].Shared {
		t.Fatalf("expanded row: %+v", stored[101])
	}
	b, _ := json.Marshal(struct {
		U []Unit      `json:"units"`
		I []*RowInput `json:"inputs"`
	}{stored, inputs})
	if inputs[0] == nil || inputs[1] != nil || stored[100].Shared || stored[100].SeqShared || stored[100].Kwargs["smiles"] != "CCO" {
		t.Fatalf("shared: %v %v %+v", inputs[0] != nil, inputs[1], stored[100])
	}
	if len(b) > len(want)/50 {
		t.Fatalf("stored %d bytes, per unit %d: the lists are not stored once", len(b), len(want))
	}
	var back struct {
		U []Unit      `json:"units"`
		I []*RowInput `json:"inputs"`
	}
	if err := json.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	RestoreInputs(back.I, back.U)
	got, _ := json.Marshal(back.U)
	if !bytes.Equal(got, want) {
		t.Fatal("restored units differ from Expand's")
	}
}
