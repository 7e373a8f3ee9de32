package input

import (
	"bytes"
	"context"
	"encoding/csv"
	"encoding/json"
	"io"
	"strings"
	"testing"
)

// typedOrNil fails when err is non-nil but not an *Error with a 4xx status.
func typedOrNil(t *testing.T, err error) {
	t.Helper()
	if err == nil {
		return
	}
	e, ok := AsError(err)
	if !ok || e.Status() < 400 || e.Status() > 499 || e.Msg == "" {
		t.Fatalf("error %T %v is not a typed 4xx input error", err, err)
	}
}

func FuzzParseCSV(f *testing.F) {
	for _, s := range []string{"Protein Sequence,Substrate\nMKV,CCO\n", "\xEF\xBB\xBFa,b\n,\n\"x\"\"\",y\n", "a\n\"unterminated\n", "a,b\n1,2,3\n", "", "\n\n"} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		tb, err := ParseCSV(bytes.NewReader(b), 50)
		typedOrNil(t, err)
		if err != nil {
			return
		}
		if len(tb.Rows) > tb.RawRowCount || tb.RawRowCount > 50 || len(tb.Columns) > MaxColumns {
			t.Fatalf("rows %d raw %d", len(tb.Rows), tb.RawRowCount)
		}
		for _, r := range tb.Rows {
			if len(r.Cells) != len(tb.Columns) || allEmpty(r.Cells) {
				t.Fatalf("row %+v for %d columns", r, len(tb.Columns))
			}
		}
		var sb strings.Builder
		if err := WriteCSV(&sb, tb); err != nil {
			t.Fatal(err)
		}
	})
}

func FuzzParseJSONBody(f *testing.F) {
	for _, s := range []string{`{"data":[{"Protein Sequence":"MKV","Substrate":"CCO"}],"targets":["kcat"]}`, `{"data":[{},{"a":null}]}`,
		`{"data":{"a":[1,{"b":2}]}}`, `{"data":[1,2]}`, `[]`, `{"data":[{"a":1e400,"b":-0.0,"c":"\u00e9"}]}`, `{"data":[{"a":1}],"data":5}`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		jb, err := ParseJSONBody(bytes.NewReader(b), 20)
		typedOrNil(t, err)
		if err != nil {
			return
		}
		if jb.DataErr != nil {
			typedOrNil(t, jb.DataErr)
			return
		}
		if jb.Data == nil || jb.Data.RawRowCount == 0 || jb.Data.RawRowCount > 20 || len(jb.Data.Columns) > MaxColumns {
			t.Fatalf("data %+v", jb.Data)
		}
		for _, r := range jb.Data.Rows {
			if len(r.Cells) != len(jb.Data.Columns) {
				t.Fatalf("row %+v for %q", r, jb.Data.Columns)
			}
		}
		if _, err := OptionsFromJSON(jb.Fields); err != nil {
			typedOrNil(t, err)
		}
	})
}

func FuzzOptions(f *testing.F) {
	f.Add(`["kcat","Km"]`, `{"kcat":"D","Km":"C"}`, "skip", `"True"`, "both", "B")
	f.Add(``, ``, ``, `1`, `kcat`, ``)
	f.Add(`{"a":1}`, `[1]`, `truncate`, `yes`, `Km`, `J`)
	cat := methodsDefault()
	f.Fuzz(func(t *testing.T, targets, methodsS, hls, boolS, pt, km string) {
		form := map[string][]string{"targets": {targets}, "methods": {methodsS}, "handleLongSequences": {hls},
			"useExperimental": {boolS}, "predictionType": {pt}, "kcatMethod": {km}, "kmMethod": {km}}
		raw, err := OptionsFromForm(form)
		typedOrNil(t, err)
		if err == nil {
			o, err := ValidateOptions(cat, raw)
			typedOrNil(t, err)
			if err == nil && (len(o.Targets) == 0 || (o.HandleLongSequences != LongSkip && o.HandleLongSequences != LongTruncate)) {
				t.Fatalf("accepted options %+v", o)
			}
		}
		body, _ := json.Marshal(map[string]any{"targets": json.RawMessage(orNull(targets)), "methods": json.RawMessage(orNull(methodsS)),
			"handleLongSequences": hls, "canonicalizeSubstrates": boolS})
		jb, err := ParseJSONBody(bytes.NewReader(body), 10)
		if err != nil {
			return // targets/methods were not JSON values; that body is rejected as a whole
		}
		raw, err = OptionsFromJSON(jb.Fields)
		typedOrNil(t, err)
		if err == nil {
			_, err = ValidateOptions(cat, raw)
			typedOrNil(t, err)
		}
		_ = CoerceBool(boolS, true)
		_ = RunSimilarityJSON(jb.Fields)
	})
}

func orNull(s string) string {
	if json.Valid([]byte(s)) {
		return s
	}
	return "null"
}

func FuzzCheckSMILES(f *testing.F) {
	for s := range smilesCorpus {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		err := CheckSMILES(s)
		if err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("%T", err)
			}
		}
		if err := CheckInChI(s); err != nil {
			if _, ok := err.(*SyntaxError); !ok {
				t.Fatalf("%T", err)
			}
		}
		_ = GoValid(s)
		_ = substrateComponents(s)
		_ = genericTokens(s)
	})
}

// FuzzSubstrateLists feeds /validate/ and the submit checks tables with
// `Substrates`/`Products` lists and `;`-separated candidate sequences: no
// panic, typed errors, and every list finding carries both token arrays.
func FuzzSubstrateLists(f *testing.F) {
	for _, s := range []string{"CCO;O", " ; ;", "nan", "NaT", "C1CC;CCO;;O", "InChI=1S/H2O/h1H2;X(", "\"a;b\""} {
		f.Add(s, "CC=O;O", "MKV;MAA")
	}
	f.Add("", "", "")
	f.Add("CCO", ";", ";;")
	cat := catalogue(f)
	chem := NewChemistry(nil, nil)
	f.Fuzz(func(t *testing.T, subs, prods, seqs string) {
		var buf bytes.Buffer
		w := csvWriter(&buf)
		_ = w.Write([]string{ColProteinSequence, ColSubstrates, ColProducts})
		_ = w.Write([]string{seqs, subs, prods})
		w.Flush()
		tb, err := ParseCSV(&buf, 10)
		if err != nil {
			typedOrNil(t, err)
			return
		}
		rep, err := Validate(context.Background(), cat, chem, tb, false)
		typedOrNil(t, err)
		if err == nil {
			for _, is := range rep.InvalidSubstrates {
				if is.InvalidSubstrateTokens == nil || is.InvalidProductTokens == nil {
					t.Fatalf("list finding without token arrays: %+v", is)
				}
			}
			if _, err := json.Marshal(rep); err != nil {
				t.Fatal(err)
			}
		}
		typedOrNil(t, CheckProducts(context.Background(), chem, tb))
	})
}

func csvWriter(w io.Writer) *csv.Writer { return csv.NewWriter(w) }
