package input

import (
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/methods"
)

func catalogue(t testing.TB) *methods.Catalogue {
	t.Helper()
	return methods.Default()
}

func mustCSV(t *testing.T, s string) *Table {
	t.Helper()
	tb, err := ParseCSV(strings.NewReader(s), DefaultMaxRows)
	if err != nil {
		t.Fatalf("ParseCSV: %v", err)
	}
	return tb
}

func TestParseCSV(t *testing.T) {
	tb := mustCSV(t, "\xEF\xBB\xBFProtein Sequence,Substrate,X,X,\n\nMKV,CCO\n,,,,\n\"A,C\",\"O\"\"\",1,2,3\n")
	if want := []string{"Protein Sequence", "Substrate", "X", "X.1", "Unnamed: 4"}; !reflect.DeepEqual(tb.Columns, want) {
		t.Fatalf("columns %q, want %q", tb.Columns, want)
	}
	if tb.RawRowCount != 3 || len(tb.Rows) != 2 {
		t.Fatalf("raw %d rows %d, want 3 and 2", tb.RawRowCount, len(tb.Rows))
	}
	if tb.Rows[1].Index != 2 || tb.Rows[1].Cells[0] != "A,C" || tb.Rows[1].Cells[1] != `O"` {
		t.Fatalf("row 2 = %+v", tb.Rows[1])
	}
	if tb.Rows[0].Cells[4] != "" { // short row padded
		t.Fatalf("padding: %q", tb.Rows[0].Cells)
	}

	for name, in := range map[string]string{
		"empty":    "",
		"toolong":  "a,b\n1,2,3\n",
		"badutf8":  "a,b\n\xff,1\n",
		"onlyblnk": "\n\n",
	} {
		_, err := ParseCSV(strings.NewReader(in), 10)
		e, ok := AsError(err)
		if !ok || e.Status() != 400 || !strings.HasPrefix(e.Msg, "Could not parse CSV: ") || CSVDetail(err) == "" {
			t.Errorf("%s: err %v, want a 400 CSV error", name, err)
		}
	}
	_, err := ParseCSV(strings.NewReader("a\n1\n2\n3\n"), 2)
	if e, ok := AsError(err); !ok || e.Kind != KindTooManyRows {
		t.Fatalf("row limit: %v", err)
	}
	if _, err := ParseCSV(strings.NewReader("a\n1\n2\n"), 2); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
}

func TestParseCSVBodyLimitIs413(t *testing.T) {
	req := httptest.NewRequest("POST", "/", strings.NewReader("a,b\n"+strings.Repeat("1,2\n", 1000)))
	body := http.MaxBytesReader(httptest.NewRecorder(), req.Body, 100)
	_, err := ParseCSV(body, 0)
	if e, ok := AsError(err); !ok || e.Status() != 413 {
		t.Fatalf("err %v, want 413", err)
	}
}

func TestWriteCSVRoundTrip(t *testing.T) {
	tb := mustCSV(t, "a,b\n\"x,y\",\"q\"\"\"\n,\n z,\n")
	var sb strings.Builder
	if err := WriteCSV(&sb, tb); err != nil {
		t.Fatal(err)
	}
	if got, want := sb.String(), "a,b\n\"x,y\",\"q\"\"\"\n z,\n"; got != want {
		t.Fatalf("got %q want %q", got, want)
	}
}

func TestParseJSONBody(t *testing.T) {
	body := `{"targets": ["kcat"], "data": [{"Protein Sequence": "MKV", "Substrate": "CCO"},
		{"Substrate": null, "n": 1.50, "i": 12345678901234567890, "b": true, "o": {"a": [1, 2]}},
		{"Protein Sequence": null}, {"e": 1e-05, "k": 1e3, "s": "a\u00e9\"b"}], "methods": {"kcat": "B"}}`
	jb, err := ParseJSONBody(strings.NewReader(body), 100)
	if err != nil || jb.DataErr != nil {
		t.Fatalf("err %v dataErr %v", err, jb.DataErr)
	}
	tb := jb.Data
	if want := []string{"Protein Sequence", "Substrate", "n", "i", "b", "o", "e", "k", "s"}; !reflect.DeepEqual(tb.Columns, want) {
		t.Fatalf("columns %q", tb.Columns)
	}
	if tb.RawRowCount != 4 || len(tb.Rows) != 3 || tb.Rows[2].Index != 3 {
		t.Fatalf("raw %d rows %d", tb.RawRowCount, len(tb.Rows))
	}
	r1 := tb.Rows[1].Cells
	if r1[1] != "" || r1[2] != "1.5" || r1[3] != "12345678901234567890" || r1[4] != "true" || r1[5] != `{"a":[1,2]}` {
		t.Fatalf("row 1 cells %q", r1)
	}
	r3 := tb.Rows[2].Cells
	if r3[6] != "1e-05" || r3[7] != "1000" || r3[8] != "aé\"b" || len(r3) != 9 {
		t.Fatalf("row 3 cells %q", r3)
	}
	if string(jb.Fields["targets"]) != `["kcat"]` || jb.Fields["data"] != nil {
		t.Fatalf("fields %v", jb.Fields)
	}

	for name, in := range map[string]string{
		"nodata": `{"a":1}`, "empty": `{"data": []}`, "notlist": `{"data": {"x": [1]}}`,
		"notobj": `{"data": [1, {"a": 1}]}`, "nocols": `{"data": [{}]}`,
	} {
		jb, err := ParseJSONBody(strings.NewReader(in), 100)
		if err != nil || jb.DataErr == nil || jb.DataErr.Status() != 400 {
			t.Errorf("%s: err %v dataErr %v", name, err, jb)
		}
	}
	jb, err = ParseJSONBody(strings.NewReader(`{"data": [{"a":1},{"a":2},{"a":3}], "x": 1}`), 2)
	if err != nil || jb.DataErr == nil || jb.DataErr.Kind != KindTooManyRows || string(jb.Fields["x"]) != "1" {
		t.Fatalf("row limit: %v %+v", err, jb)
	}
	for _, in := range []string{``, `[1]`, `{"data": [}`, `{"a":1} x`, `"s"`} {
		if _, err := ParseJSONBody(strings.NewReader(in), 10); err == nil {
			t.Errorf("%q: no error", in)
		} else if e, ok := AsError(err); !ok || e.Status() != 400 {
			t.Errorf("%q: %v", in, err)
		}
	}
}

func TestCoerceBool(t *testing.T) {
	cases := []struct {
		v    any
		def  bool
		want bool
	}{
		{nil, true, true}, {nil, false, false}, {true, false, true}, {false, true, false},
		{"1", false, true}, {" TRUE ", false, true}, {"Yes", false, true}, {"on", false, true},
		{"", true, false}, {"false", true, false}, {"0", true, false}, {"nope", true, false},
		{`"True"`, false, true}, {` "yes" `, false, true}, {`"false"`, true, false},
		{json.Number("0"), true, false}, {json.Number("2.5"), false, true}, {json.Number("-0.0"), true, false},
		{[]any{}, true, true}, {map[string]any{}, false, false},
	}
	for _, c := range cases {
		if got := CoerceBool(c.v, c.def); got != c.want {
			t.Errorf("CoerceBool(%#v, %v) = %v", c.v, c.def, got)
		}
	}
	if !RunSimilarityForm(map[string][]string{"runSimilarity": {"TRUE"}}) || RunSimilarityForm(map[string][]string{"runSimilarity": {"1"}}) ||
		RunSimilarityForm(map[string][]string{"runSimilarity": {" true"}}) || RunSimilarityForm(nil) {
		t.Error("multipart runSimilarity rule")
	}
	for raw, want := range map[string]bool{`"false"`: true, `false`: false, `0`: false, `1`: true, `""`: false, `[]`: false, `[0]`: true, `null`: false, `{}`: false} {
		if got := RunSimilarityJSON(map[string]json.RawMessage{"runSimilarity": json.RawMessage(raw)}); got != want {
			t.Errorf("JSON runSimilarity %s = %v", raw, got)
		}
	}
}

func formOpts(t *testing.T, kv ...string) RawOptions {
	t.Helper()
	v := map[string][]string{}
	for i := 0; i < len(kv); i += 2 {
		v[kv[i]] = append(v[kv[i]], kv[i+1])
	}
	r, err := OptionsFromForm(v)
	if err != nil {
		t.Fatalf("OptionsFromForm: %v", err)
	}
	return r
}

func jsonOpts(t *testing.T, body string) RawOptions {
	t.Helper()
	var f map[string]json.RawMessage
	if err := json.Unmarshal([]byte(body), &f); err != nil {
		t.Fatal(err)
	}
	r, err := OptionsFromJSON(f)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func TestValidateOptions(t *testing.T) {
	cat := catalogue(t)
	o, err := ValidateOptions(cat, formOpts(t, "targets", ` [ "Km" ,"kcat","kcat" ] `, "methods", `{"kcat":"D", "Km" : "C", "kcat/Km": 7}`,
		"handleLongSequences", "skip", "useExperimental", `"True"`, "includeSimilarityColumns", "", "disableGpuPrecompute", "on"))
	if err != nil {
		t.Fatal(err)
	}
	want := Options{Targets: []string{"kcat", "Km"}, Methods: map[string]string{"kcat": "D", "Km": "C", "kcat/Km": "7"},
		HandleLongSequences: "skip", UseExperimental: true, IncludeSimilarityColumns: false, CanonicalizeSubstrates: true, DisableGPUPrecompute: true,
		UsePredictionCache: true, Priority: "auto"}
	if !reflect.DeepEqual(o, want) {
		t.Fatalf("got %+v\nwant %+v", o, want)
	}
	// priority: auto unless "bulk" (any case); anything else is refused
	// with a message naming the field, and nothing asks to be served ahead.
	for _, tc := range []struct {
		raw  RawOptions
		want string
	}{
		{formOpts(t, "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "priority", " Bulk "), "bulk"},
		{jsonOpts(t, `{"targets":["kcat"],"methods":{"kcat":"B"},"priority":"bulk"}`), "bulk"},
		{jsonOpts(t, `{"targets":["kcat"],"methods":{"kcat":"B"},"priority":null}`), "auto"},
		{formOpts(t, "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "priority", ""), "auto"},
	} {
		o, err := ValidateOptions(cat, tc.raw)
		if err != nil || o.Priority != tc.want {
			t.Fatalf("priority: %+v %v, want %v", o, err, tc.want)
		}
	}
	for _, bad := range []string{`"high"`, `1`, `["bulk"]`} {
		_, err := ValidateOptions(cat, jsonOpts(t, `{"targets":["kcat"],"methods":{"kcat":"B"},"priority":`+bad+`}`))
		if err == nil || !strings.Contains(err.Error(), "Invalid priority") {
			t.Fatalf("priority %s: %v, want a refusal naming priority", bad, err)
		}
	}
	// usePredictionCache: default true, any false spelling turns it off.
	for _, tc := range []struct {
		raw  RawOptions
		want bool
	}{
		{formOpts(t, "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "usePredictionCache", "false"), false},
		{jsonOpts(t, `{"targets":["kcat"],"methods":{"kcat":"B"},"usePredictionCache":false}`), false},
		{jsonOpts(t, `{"targets":["kcat"],"methods":{"kcat":"B"},"usePredictionCache":true}`), true},
	} {
		o, err := ValidateOptions(cat, tc.raw)
		if err != nil || o.UsePredictionCache != tc.want {
			t.Fatalf("usePredictionCache: %+v %v, want %v", o, err, tc.want)
		}
	}
	// Legacy fields predictionType, kcatMethod, kmMethod.
	o, err = ValidateOptions(cat, jsonOpts(t, `{"predictionType": "both", "kcatMethod": "B", "kmMethod": "J"}`))
	if err != nil || !reflect.DeepEqual(o.Targets, []string{"kcat", "Km"}) || o.Methods["Km"] != "J" || o.HandleLongSequences != "truncate" {
		t.Fatalf("legacy: %+v %v", o, err)
	}
	o, err = ValidateOptions(cat, formOpts(t, "predictionType", "kcat", "kcatMethod", "A-L", "targets", ""))
	if err != nil || o.Methods["kcat"] != "A-L" {
		t.Fatalf("legacy form: %+v %v", o, err)
	}

	fails := []struct {
		name string
		raw  RawOptions
		msg  string
	}{
		{"no targets", jsonOpts(t, `{}`), "Invalid targets"},
		{"targets not list", jsonOpts(t, `{"targets": "kcat"}`), "Invalid targets"},
		{"methods not object", jsonOpts(t, `{"targets": ["kcat"], "methods": ["D"]}`), "Invalid methods payload"},
		{"bad target", jsonOpts(t, `{"targets": ["kcat", "KM", 3], "methods": "x"}`), "Invalid methods payload"},
		{"bad target 2", jsonOpts(t, `{"targets": ["kcat", "KM", 3], "methods": {}}`), "Invalid targets: KM, 3."},
		{"bad methods key", jsonOpts(t, `{"targets": ["kcat"], "methods": {"kcat": "D", "km": "C"}}`), "Invalid methods keys: km."},
		{"missing method", jsonOpts(t, `{"targets": ["Km", "kcat"], "methods": {"Km": " "}}`), "Missing method selection for target 'kcat'."},
		{"unsupported", jsonOpts(t, `{"targets": ["Km"], "methods": {"Km": "D"}}`), "Invalid method 'D' for target 'Km'. Valid methods: A-H, B, C, E, F, G, G-O2, H, J, K."},
		{"case", jsonOpts(t, `{"targets": ["kcat/Km"], "methods": {"kcat/Km": "b"}}`), "Invalid method 'b' for target 'kcat/Km'. Valid methods: B, I."},
		{"hls empty", formOpts(t, "targets", `["kcat"]`, "methods", `{"kcat":"B"}`, "handleLongSequences", ""), "handleLongSeq"},
		{"hls null", jsonOpts(t, `{"targets": ["kcat"], "methods": {"kcat": "B"}, "handleLongSequences": null}`), "handleLongSeq"},
		{"hls case", jsonOpts(t, `{"targets": ["kcat"], "methods": {"kcat": "B"}, "handleLongSequences": "Skip"}`), "handleLongSeq"},
	}
	for _, f := range fails {
		_, err := ValidateOptions(cat, f.raw)
		e, ok := AsError(err)
		if !ok || e.Status() != 400 || !strings.Contains(e.Msg, f.msg) {
			t.Errorf("%s: err %v, want one containing %q", f.name, err, f.msg)
		}
	}
	if _, err := OptionsFromForm(map[string][]string{"targets": {"kcat"}}); err == nil || !strings.Contains(err.Error(), "'targets'") {
		t.Errorf("non-JSON targets: %v", err)
	}
	if _, err := OptionsFromForm(map[string][]string{"methods": {"{kcat: D}"}}); err == nil || !strings.Contains(err.Error(), "'methods'") {
		t.Errorf("non-JSON methods: %v", err)
	}
}

func TestValidateSubmitPipeline(t *testing.T) {
	cat := catalogue(t)
	raw := jsonOpts(t, `{"targets": ["kcat", "Km"], "methods": {"kcat": "D", "Km": "C"}}`)
	load := func(s string) func() (*Table, error) {
		return func() (*Table, error) { return ParseCSV(strings.NewReader(s), 100) }
	}
	_, err := ValidateSubmit(cat, raw, load("Seq\nMKV\n"))
	if err == nil || err.(*Error).Msg != "Missing required columns: Protein Sequence, Products, Substrates" {
		t.Fatalf("columns: %v", err)
	}
	_, err = ValidateSubmit(cat, raw, load("a,b\n1,2,3\n"))
	if err == nil || !strings.HasPrefix(err.(*Error).Msg, "Could not read CSV file: ") {
		t.Fatalf("csv: %v", err)
	}
	called := false
	_, err = ValidateSubmit(cat, jsonOpts(t, `{"targets": []}`), func() (*Table, error) { called = true; return nil, nil })
	if err == nil || called {
		t.Fatalf("options must fail before the table is read")
	}
	// Both substrate columns: the older wire's reading, not a 400.
	if _, err = ValidateSubmit(cat, raw, load("Protein Sequence,Substrate,Substrates,Products\nMKV,CCO,C,O\n")); err != nil {
		t.Fatalf("both: %v", err)
	}
	_, err = ValidateSubmit(cat, raw, load("Protein Sequence,Substrate,Products\nMKV,CCO,O\n"))
	if err == nil || err.(*Error).Msg != "'Products' requires a 'Substrates' column." {
		t.Fatalf("orphan products: %v", err)
	}
	s, err := ValidateSubmit(cat, raw, load("Protein Sequence,Substrates,Products\nMKV,CCO;O,C\n"))
	if err != nil || len(s.Table.Rows) != 1 {
		t.Fatalf("D and C from one Substrates list: %v", err)
	}
	onlyC := jsonOpts(t, `{"targets": ["Km"], "methods": {"Km": "C"}}`)
	_, err = ValidateSubmit(cat, onlyC, load("Protein Sequence,x\nMKV,1\n"))
	if err == nil || err.(*Error).Msg != "Missing required columns: Substrate or Substrates" {
		t.Fatalf("either substrate column: %v", err)
	}
	hdr := "Protein Sequence,Substrate\n"
	s, err = ValidateSubmit(cat, onlyC, load(hdr+"MKV,CCO\n,\nMKV,\n"+strings.Repeat("MKV,CCO\n", 8)))
	if err != nil || len(s.Table.Rows) != 10 {
		t.Fatalf("10%% empty passes: %v", err)
	}
	_, err = ValidateSubmit(cat, onlyC, load(hdr+"MKV,CCO\n,\nMKV,\n MKV,  \n"))
	if err == nil || err.(*Error).Msg != "Rows 4, 5 have no Substrate value" {
		t.Fatalf("rows message: %v", err)
	}
}

func TestCheckEmptiness(t *testing.T) {
	mk := func(n, e int) *Table {
		var sb strings.Builder
		sb.WriteString("Protein Sequence,x\n")
		for i := 0; i < n; i++ {
			if i < e {
				sb.WriteString(" ,1\n")
			} else {
				sb.WriteString("MKV,1\n")
			}
		}
		return mustCSV(t, sb.String())
	}
	cases := []struct {
		n, e int
		want string
	}{
		{10, 1, ""}, {10, 2, "Rows 2, 3 have no Protein Sequence value"}, {10, 9, "Rows 2, 3, 4, 5, 6, 7, 8, 9, 10 have no Protein Sequence value"},
		{10, 10, "Protein Sequence column is empty"}, {100, 10, ""}, {100, 11, "11 rows (11.0%) have no Protein Sequence value"},
		{200, 180, "180 rows (90.0%) have no Protein Sequence value"}, {200, 181, "Protein Sequence column is empty"},
		{3, 1, "Rows 2 have no Protein Sequence value"}, {7, 3, "Rows 2, 3, 4 have no Protein Sequence value"},
	}
	for _, c := range cases {
		err := CheckEmptiness(mk(c.n, c.e), ColProteinSequence)
		got := ""
		if err != nil {
			got = err.(*Error).Msg
		}
		if got != c.want {
			t.Errorf("n=%d e=%d: %q, want %q", c.n, c.e, got, c.want)
		}
	}
	if err := CheckEmptiness(&Table{}, "x"); err != nil {
		t.Error(err)
	}
}

func TestLongSequences(t *testing.T) {
	cat := catalogue(t)
	e, _ := methodInfo(cat, "E")
	j, _ := methodInfo(cat, "J")
	if l := EffectiveLimit(e.MaxSeqLen, j.MaxSeqLen); l != 500 {
		t.Fatalf("limit %d", l)
	}
	if EffectiveLimit() != 10000 || EffectiveLimit(0, 20000) != 10000 || EffectiveLimit(1023, 0) != 1023 {
		t.Fatal("EffectiveLimit")
	}
	seq := "ABCDEFGHIJ"
	if got := Truncate(seq, 5); got != "ABIJ" {
		t.Fatalf("odd limit: %q", got)
	}
	if got := Truncate(seq, 6); got != "ABCHIJ" {
		t.Fatalf("even: %q", got)
	}
	if Truncate(seq, 10) != seq || TooLong(seq, 10) || !TooLong(seq, 9) {
		t.Fatal("strict >")
	}
	if got := Truncate("ééabcéé", 4); got != "éééé" {
		t.Fatalf("runes: %q", got)
	}
	if out, why := LongSequence(seq, 4, LongSkip); out != seq || why != "Sequence too long \u2014 row was excluded" {
		t.Fatalf("skip: %q %q", out, why)
	}
	if out, why := LongSequence(seq, 4, LongTruncate); out != "ABIJ" || why != "" {
		t.Fatalf("truncate: %q %q", out, why)
	}
}

func TestResidues(t *testing.T) {
	if !ValidResidues("ACDEFGHIKLMNPQRSTVWY") || ValidResidues("ACX") || ValidResidues("acd") || ValidResidues(" AC") {
		t.Fatal("alphabet")
	}
	if got := InvalidResidues("!!!ABC123!!!é"); !reflect.DeepEqual(got, []string{"!", "1", "2", "3", "B", "é"}) {
		t.Fatalf("invalid chars %q", got)
	}
}

func TestValidateReportShape(t *testing.T) {
	cat := catalogue(t)
	chem := NewChemistry(nil, nil)
	tb := mustCSV(t, "Protein Sequence,Substrate\n MKV ,CCO\n!!!ABC123!!!,NOT_A_SMILES\n,\n,C..C(\n"+
		strings.Repeat("A", 1100)+",CCO.InChI=1S/H2O/h1H2\n  ,NOT_A_SMILES\nMK,\n")
	rep, err := Validate(context.Background(), cat, chem, tb, true)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	got := string(b)
	for _, want := range []string{
		`{"rowCount":7,"invalidSubstrates":[{"row":2,"value":"NOT_A_SMILES","reason":"Invalid SMILES/InChI","invalid_components":["NOT_A_SMILES"]}`,
		`{"row":3,"value":"C..C(","reason":"Invalid SMILES/InChI","invalid_components":["C("]},{"row":5,`,
		`{"row":5,"value":"NOT_A_SMILES","reason":"Invalid SMILES/InChI","invalid_components":["NOT_A_SMILES"]}`,
		`{"row":6,"value":"NaN","reason":"Invalid SMILES/InChI"}`,
		`"invalidProteins":[{"row":2,"value":"!!!ABC123!!!","invalid_chars":["!","1","2","3","B"],"reason":"Invalid characters in sequence"},{"row":3,"value":"NaN","reason":"Empty sequence"},{"row":5,"value":"  ","reason":"Empty sequence"}]`,
		`"lengthViolations":{"A-H":0,"A-L":0,"B":1,"C":1,"D":1,"E":0,"F":1,"G":1,"G-O2":1,"H":1,"I":1,"J":1,"K":1,"L":0,"Server":0}`,
		`"lengthLimits":{"A-H":1500,"A-L":1500,"B":1000,"C":1000,"D":1024,"E":2048,"F":1024,"G":1000,"G-O2":1000,"H":1022,"I":1000,"J":500,"K":1024,"L":null,"Server":10000}`,
		`"similarity":{"error":"Similarity analysis is not available on this server.","unavailable":true},"messages":[{"row":2,`,
	} {
		if !strings.Contains(got, want) {
			t.Errorf("report lacks %s\nreport: %s", want, got)
		}
	}
	rep, _ = Validate(context.Background(), cat, chem, mustCSV(t, "Protein Sequence,Substrates,Products\nMKV,CCO;,\nMKV,;;,O;X(\n"), false)
	b, _ = json.Marshal(rep)
	if !strings.Contains(string(b), `"invalidSubstrates":[{"row":1,"value":[null],"reason":"Invalid substrate/product SMILES/InChI","invalid_substrates":[],"invalid_products":[{"position":null,"value":null}]},`+
		`{"row":2,"value":[";;","X("],"reason":"Invalid substrate/product SMILES/InChI","invalid_substrates":[{"position":null,"value":";;"}],"invalid_products":[{"position":2,"value":"X("}]}]`) ||
		!strings.HasSuffix(string(b), `"similarity":null,"messages":[{"row":1,"column":"Substrates","level":"error","text":"Row 1, Substrates: the product list is empty."},`+
			`{"row":2,"column":"Substrates","level":"error","text":"Row 2, Substrates: the substrate list is empty; product 2 \"X(\" is not a valid SMILES or InChI."}]}`) {
		t.Errorf("reaction report: %s", b)
	}
	for _, in := range []string{"Protein Sequence,Products\nA,C\n", "Substrate\nC\n", "Protein Sequence,Substrate,Products\nA,C,C\n", "Protein Sequence\nA\n"} {
		if _, err := Validate(context.Background(), cat, chem, mustCSV(t, in), false); err == nil {
			t.Errorf("structure %q accepted", in)
		}
	}
}

func TestValidateRows(t *testing.T) {
	cat := catalogue(t)
	chem := NewChemistry(nil, nil)
	info := func(k string) MethodInfo { m, _ := methodInfo(cat, k); return m }
	tb := mustCSV(t, "Protein Sequence,Substrate,Substrates,Products\n"+
		"MKV,CCO,CCO;O,O\n"+ // ok everywhere
		",CCO,C,O\n"+ // empty sequence (skipped, never a failed job)
		"mkv,CCO,C,O\n"+ // lowercase
		"MKV,C1CC,C1CC,O\n"+ // bad substrate
		"MKV,CC..O,C,X(\n"+ // whole-cell bad; generic drops empty piece; D product bad
		"MKV,,;;,;\n"+ // empty substrate; D separators only pass
		"MKV,CCO;,C,\n") // generic ok; D blank products → nan
	seqs := tb.Column(ColProteinSequence)
	want := map[string][]string{
		"B": {"", ReasonInvalidProtein, ReasonInvalidProtein, ReasonInvalidSubstrate, "", ReasonInvalidSubstrate, ""},
		"C": {"", ReasonInvalidProtein, ReasonInvalidProtein, ReasonInvalidSubstrate, ReasonInvalidSubstrate, ReasonInvalidSubstrate, ReasonInvalidSubstrate},
		"D": {"", ReasonInvalidProtein, ReasonInvalidProtein, ReasonInvalidSubstrate, ReasonInvalidProduct, "", ReasonInvalidProduct},
	}
	for k, w := range want {
		got, err := ValidateRows(context.Background(), chem, info(k), tb, seqs)
		if err != nil || !reflect.DeepEqual(got, w) {
			t.Errorf("%s: %q, want %q (%v)", k, got, w, err)
		}
	}
}

func TestCheckUploadName(t *testing.T) {
	if CheckUploadName("in.CSV") != nil || CheckUploadName("in.csv.txt") == nil || CheckUploadName("") == nil {
		t.Fatal("upload name rule")
	}
	var e *Error
	if !errors.As(CheckUploadName("x.tsv"), &e) || e.Status() != 400 {
		t.Fatal("status")
	}
}

func methodsDefault() *methods.Catalogue { return methods.Default() }

type methodsDescriptor = methods.Descriptor

func TestSubstrateListsReport(t *testing.T) {
	cat := catalogue(t)
	chem := NewChemistry(nil, nil)
	tb := mustCSV(t, "Protein Sequence,Substrates\nMKV,CCO;X(;O\nMKV,\nMKV; MA1A ;;MKVV,none\n;,CCO\n")
	rep, err := Validate(context.Background(), cat, chem, tb, false)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(rep)
	for _, want := range []string{
		`"invalidSubstrates":[{"row":1,"value":["X("],"reason":"Invalid substrate/product SMILES/InChI","invalid_substrates":[{"position":2,"value":"X("}],"invalid_products":[]},` +
			`{"row":2,"value":[null],"reason":"Empty substrate list","invalid_substrates":[{"position":null,"value":null}],"invalid_products":[]},` +
			`{"row":3,"value":["none"],"reason":"Empty substrate list","invalid_substrates":[{"position":null,"value":"none"}],"invalid_products":[]}]`,
		`"invalidProteins":[{"row":3,"value":"MA1A","position":2,"invalid_chars":["1"],"reason":"Invalid characters in sequence"},{"row":4,"value":";","reason":"Empty sequence"}]`,
	} {
		if !strings.Contains(string(b), want) {
			t.Errorf("report lacks %s\nreport: %s", want, b)
		}
	}
	// Length violations are counted per candidate.
	long := strings.Repeat("A", 1001)
	rep, _ = Validate(context.Background(), cat, chem, mustCSV(t, "Protein Sequence,Substrate\n"+long+";"+long+";MKV,CCO\n"), false)
	if v, _ := rep.LengthViolations.Get("B"); *v != 2 {
		t.Errorf("per-candidate length count %d", *v)
	}
}

func TestCheckProducts(t *testing.T) {
	chem := NewChemistry(nil, nil)
	cases := map[string]string{
		"Protein Sequence,Substrates,Products\nMKV,CCO,O;CC=O\n":       "",
		"Protein Sequence,Substrates\nMKV,CCO\n":                       "",
		"Protein Sequence,Substrates,Products\nMKV,CCO,O\nMKV,O,\n":    "Invalid Products value at row 2: the product list is empty. Products must be semicolon-separated SMILES or InChI strings.",
		"Protein Sequence,Substrates,Products\nMKV,CCO,O;X(\n":         `Invalid Products value at row 1, product 2: "X(" is not a valid SMILES or InChI. Products must be semicolon-separated SMILES or InChI strings.`,
		"Protein Sequence,Substrates,Products\nMKV,CCO, NaN \nM,C,O\n": "Invalid Products value at row 1: the product list is empty. Products must be semicolon-separated SMILES or InChI strings.",
	}
	for in, want := range cases {
		err := CheckProducts(context.Background(), chem, mustCSV(t, in))
		got := ""
		if err != nil {
			got = err.Error()
		}
		if got != want {
			t.Errorf("%q: %q, want %q", in, got, want)
		}
	}
}

func TestValidateTokensAndNativeMulti(t *testing.T) {
	cat := catalogue(t)
	chem := NewChemistry(nil, nil)
	b, _ := methodInfo(cat, "B")
	c, _ := methodInfo(cat, "C")
	got, err := ValidateTokens(context.Background(), chem, b, []string{"CCO", "X(", "CC..O"})
	if err != nil || !reflect.DeepEqual(got, []string{"", ReasonInvalidSubstrate, ""}) {
		t.Errorf("generic tokens %q %v", got, err)
	}
	got, _ = ValidateTokens(context.Background(), chem, c, []string{"CCO", "CC..O"})
	if !reflect.DeepEqual(got, []string{"", ReasonInvalidSubstrate}) {
		t.Errorf("whole-cell tokens %q", got)
	}
	// Method E's kcat reads a `Substrates` list whole through its
	// `Substrate` mapping.
	e, _ := methodInfo(cat, "E")
	tb := mustCSV(t, "Protein Sequence,Substrates\nMKV,CCO;O\nMKV,CCO;X(\n")
	got, _ = ValidateRows(context.Background(), chem, e, tb, tb.Column(ColProteinSequence))
	if !reflect.DeepEqual(got, []string{"", ReasonInvalidSubstrate}) {
		t.Errorf("native multi %q", got)
	}
}
