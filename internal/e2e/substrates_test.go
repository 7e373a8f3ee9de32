package e2e

import (
	"bytes"
	"encoding/csv"
	"encoding/json"
	"mime/multipart"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestSubstrateListsAndCandidates runs the rules of docs/api.md, "Substrate
// lists, candidate sequences and per-target results", through
// the real API, worker and synthetic engine: `Substrates` lists in CSV and
// JSON with each input behaviour (expanded_pair, method E's native_multi
// kcat, method D's full reaction), candidate sequences in skip and truncate
// mode, failures per child and per target, one quota unit per row, the
// 400 texts and /validate/'s per-token report. Values are checked against
// single-substrate jobs of the same (sequence, substrate) pairs: the
// synthetic engine is deterministic in what it is sent, so a unit's value
// must equal the row's value in the older wire.
func TestSubstrateListsAndCandidates(t *testing.T) {
	s := newStack(t, nil, nil)
	seq1 := strings.Repeat("MKTAYIAKQR", 6)
	seq2 := strings.Repeat("GHWSTPLLVE", 5)
	long := strings.Repeat("ACDEFGHIKL", 101) // 1010 > method B's 1000
	bkm := map[string]string{"kcat": "B", "Km": "B", "kcat/Km": "B"}
	// With mmseqs, method B's training set holds seq1 only: the similarity
	// columns of a candidate row show the selected candidate's identity.
	_, mmErr := exec.LookPath("mmseqs")
	if mmErr == nil {
		p := filepath.Join(s.media, "fastas", "B_sequences.fasta")
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(">t0\n"+seq1+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	all := []string{"kcat", "Km", "kcat/Km"}

	// The older wire: one pair per row, the yardstick.
	pairs := [][2]string{{seq1, "CCO"}, {seq1, "O"}, {seq1, "C1=CC=CC=C1"}, {seq2, "CCO"}, {seq2, "O"}}
	var ref strings.Builder
	ref.WriteString("Protein Sequence,Substrate\n")
	for _, p := range pairs {
		ref.WriteString(p[0] + "," + p[1] + "\n")
	}
	refID := s.submit(ref.String(), all, bkm)

	listCSV := "Protein Sequence,Substrates,Note\n" +
		seq1 + ",CCO;O;C1=CC=CC=C1,a\n" +
		seq2 + ",\"CCO; X(( ;O\",b\n" +
		seq1 + ",X((,c\n" +
		seq2 + ",,d\n"
	before := s.quotaUsed()
	listID := s.submit(listCSV, all, bkm)
	if used := s.quotaUsed(); used-before != 4 {
		t.Errorf("quota for 4 rows with 8 substrates: %d units", used-before)
	}
	jsonID := s.submitJSON(map[string]any{"targets": all, "methods": bkm, "data": []map[string]any{
		{"Protein Sequence": seq1, "Substrates": "CCO;O;C1=CC=CC=C1", "Note": "a"},
		{"Protein Sequence": seq2, "Substrates": "CCO; X(( ;O", "Note": "b"},
		{"Protein Sequence": seq1, "Substrates": "X((", "Note": "c"},
		{"Protein Sequence": seq2, "Substrates": nil, "Note": "d"},
	}})

	// Method E's kcat takes the list whole (native_multi), its Km expands;
	// method D reads Substrates + Products, method C expands.
	nativeCSV := "Protein Sequence,Substrates,Products\n" + seq1 + ",CCO;O,CC=O\n"
	eID := s.submit(nativeCSV, []string{"kcat", "Km"}, map[string]string{"kcat": "E", "Km": "E"})
	eRefID := s.submit("Protein Sequence,Substrate\n"+seq1+",CCO;O\n"+seq1+",CCO\n"+seq1+",O\n", []string{"kcat", "Km"}, map[string]string{"kcat": "E", "Km": "E"})
	dID := s.submit(nativeCSV, []string{"kcat", "Km"}, map[string]string{"kcat": "D", "Km": "C"})

	// Candidate sequences, skip and truncate.
	candCSV := "Protein Sequence,Substrate\n" +
		seq1 + ";" + seq2 + ",CCO\n" +
		seq1 + " ; " + long + ",CCO\n" +
		long + ";" + long + ",O\n" +
		seq2 + ",O\n"
	skipID := s.submitForm(candCSV, map[string]string{"targets": `["kcat","Km"]`, "methods": `{"kcat":"B","Km":"B"}`, "handleLongSequences": "skip"})
	truncID := s.submitForm(candCSV, map[string]string{"targets": `["kcat","Km"]`, "methods": `{"kcat":"B","Km":"B"}`, "handleLongSequences": "truncate"})
	slotID := s.submit("Protein Sequence,Substrates\n"+seq1+";"+seq2+",CCO;O\n", []string{"kcat", "Km"}, map[string]string{"kcat": "B", "Km": "B"})

	// Per-target failure: method C checks the whole cell (a dot-joined
	// "CC..O" fails), method B's generic rule drops the empty fragment.
	failID := s.submit("Protein Sequence,Substrate\n"+seq1+",CC..O\n"+seq1+",CCO\n", []string{"kcat", "Km"}, map[string]string{"kcat": "C", "Km": "B"})

	for _, id := range []string{refID, listID, jsonID, eID, eRefID, dID, skipID, truncID, slotID, failID} {
		if st := s.waitDone(id, 4*time.Minute); st.Status != "Completed" {
			t.Fatalf("job %s: %s %s", id, st.Status, st.Error)
		}
	}
	refRows := s.resultRows(refID)
	// value of (target column, pair index) in the yardstick.
	rv := func(col string, i int) string { return refRows[i+1][colIndex(t, refRows[0], col)] }
	num := func(v string) float64 {
		f, err := strconv.ParseFloat(v, 64)
		if err != nil {
			t.Fatalf("not a number: %q", v)
		}
		return f
	}
	maxOf := func(col string, idx ...int) string {
		best := idx[0]
		for _, i := range idx[1:] {
			if num(rv(col, i)) > num(rv(col, best)) {
				best = i
			}
		}
		return rv(col, best)
	}
	minOf := func(col string, idx ...int) string {
		best := idx[0]
		for _, i := range idx[1:] {
			if num(rv(col, i)) < num(rv(col, best)) {
				best = i
			}
		}
		return rv(col, best)
	}
	const src = "Synthetic placeholder from Method B (not a prediction)"
	const badSub = "Invalid substrate (not a valid SMILES or InChI)"

	t.Run("expanded_pair CSV", func(t *testing.T) {
		rows := s.resultRows(listID)
		h := rows[0]
		if got := strings.Join(h, "|"); got != "kcat (1/s)|Source kcat|Extra Info kcat|KM (mM)|Source Km|Extra Info Km|kcat/Km (1/(s*mM))|Source kcat/Km|Extra Info kcat/Km|Protein Sequence|Substrates|Note|mean similarity to B training data|max similarity to B training data" {
			t.Fatalf("header %s", got)
		}
		r1 := rows[1]
		if r1[0] != maxOf("kcat (1/s)", 0, 1, 2) || r1[1] != src {
			t.Errorf("kcat of row 1: %q %q", r1[0], r1[1])
		}
		if want := "[" + rv("KM (mM)", 0) + "," + rv("KM (mM)", 1) + "," + rv("KM (mM)", 2) + "]"; r1[3] != want || r1[4] != src+" (per substrate)" {
			t.Errorf("Km of row 1: %q %q, want %q", r1[3], r1[4], want)
		}
		if want := "[" + rv("kcat/Km (1/(s*mM))", 0) + "," + rv("kcat/Km (1/(s*mM))", 1) + "," + rv("kcat/Km (1/(s*mM))", 2) + "]"; r1[6] != want {
			t.Errorf("kcat/Km of row 1: %q, want %q", r1[6], want)
		}
		var items []map[string]any
		if err := json.Unmarshal([]byte(r1[2]), &items); err != nil || len(items) != 3 {
			t.Fatalf("kcat Extra Info %q: %v", r1[2], err)
		}
		selected := 0
		for k, it := range items {
			if it["substrateIndex"] != float64(k+1) || it["substrate"] != pairs[k][1] || it["source"] != src || it["error"] != nil {
				t.Errorf("item %d: %v", k, it)
			}
			if it["selected"] == true {
				selected++
				if strconv.FormatFloat(it["prediction"].(float64), 'g', -1, 64) != strconv.FormatFloat(num(r1[0]), 'g', -1, 64) {
					t.Errorf("selected item %v is not the kcat %s", it, r1[0])
				}
			}
		}
		if selected != 1 || !strings.HasPrefix(r1[2], `[{"substrateIndex":1,"substrate":"CCO","prediction":`) {
			t.Errorf("kcat Extra Info %s", r1[2])
		}
		if strings.Contains(r1[5], "selected") {
			t.Errorf("Km items carry selected: %s", r1[5])
		}
		r2 := rows[2]
		if want := "[" + rv("KM (mM)", 3) + ",null," + rv("KM (mM)", 4) + "]"; r2[3] != want {
			t.Errorf("Km of row 2: %q, want %q", r2[3], want)
		}
		if !strings.Contains(r2[5], `{"substrateIndex":2,"substrate":"X((","prediction":null,"source":"","error":"`+badSub+`"}`) {
			t.Errorf("failed child: %s", r2[5])
		}
		if r2[0] != maxOf("kcat (1/s)", 3, 4) {
			t.Errorf("kcat of row 2 %q", r2[0])
		}
		r3 := rows[3]
		for _, c := range []int{0, 3, 6} {
			if r3[c] != "" || r3[c+1] != badSub {
				t.Errorf("all children failed, col %d: %q %q", c, r3[c], r3[c+1])
			}
		}
		r4 := rows[4]
		if r4[3] != "" || r4[4] != "Prediction could not be made for any substrate" || r4[5] != "[]" || r4[11] != "d" {
			t.Errorf("empty list: %q", r4)
		}
		// JSON result: array cells are strings, kcat a number.
		var res struct {
			Data []map[string]any `json:"data"`
		}
		if code := s.do("GET", "/api/v1/result/"+listID+"/?format=json", nil, "", &res); code != 200 {
			t.Fatalf("json result %d", code)
		}
		if _, ok := res.Data[0]["KM (mM)"].(string); !ok || res.Data[3]["KM (mM)"] != nil {
			t.Errorf("JSON Km cells %v %v", res.Data[0]["KM (mM)"], res.Data[3]["KM (mM)"])
		}
		if _, ok := res.Data[0]["kcat (1/s)"].(float64); !ok {
			t.Errorf("JSON kcat %v", res.Data[0]["kcat (1/s)"])
		}
	})

	t.Run("expanded_pair JSON equals CSV", func(t *testing.T) {
		// The JSON body's columns come in key order; cells must match.
		a, b := s.resultRows(listID), s.resultRows(jsonID)
		for _, name := range a[0] {
			ca, cb := colIndex(t, a[0], name), colIndex(t, b[0], name)
			for r := 1; r < len(a); r++ {
				if a[r][ca] != b[r][cb] {
					t.Errorf("row %d %s: CSV %q, JSON %q", r, name, a[r][ca], b[r][cb])
				}
			}
		}
	})

	t.Run("native_multi and full reaction", func(t *testing.T) {
		ref := s.resultRows(eRefID)
		rows := s.resultRows(eID)
		if rows[1][0] != ref[1][0] || rows[1][2] != "synthetic backend: stand-in number, not a prediction" {
			t.Errorf("E kcat takes the list whole: %q, want %q (%q)", rows[1][0], ref[1][0], rows[1][2])
		}
		if want := "[" + ref[2][3] + "," + ref[3][3] + "]"; rows[1][3] != want {
			t.Errorf("E Km expands: %q, want %q", rows[1][3], want)
		}
		d := s.resultRows(dID)
		if _, err := strconv.ParseFloat(d[1][0], 64); err != nil || !strings.HasPrefix(d[1][3], "[") || strings.Count(d[1][3], ",") != 1 {
			t.Errorf("D kcat plain, C Km per substrate: %q", d[1])
		}
	})

	t.Run("candidates skip", func(t *testing.T) {
		rows := s.resultRows(skipID)
		one := func(sq, sub string) int {
			for i, p := range pairs {
				if p[0] == sq && p[1] == sub {
					return i
				}
			}
			t.Fatalf("no pair %s", sub)
			return 0
		}
		c1, c2 := one(seq1, "CCO"), one(seq2, "CCO")
		if rows[1][0] != maxOf("kcat (1/s)", c1, c2) || rows[1][3] != minOf("KM (mM)", c1, c2) || rows[1][1] != src {
			t.Errorf("row 1: kcat %q Km %q", rows[1][0], rows[1][3])
		}
		if !strings.HasPrefix(rows[1][2], `[{"sequenceIndex":1,"sequence":"`+seq1+`","prediction":`) {
			t.Errorf("candidate Extra Info %s", rows[1][2])
		}
		if mmErr == nil {
			mean, mx := colIndex(t, rows[0], "mean similarity to B training data"), colIndex(t, rows[0], "max similarity to B training data")
			want := "0.0"
			if rows[1][0] == rv("kcat (1/s)", c1) {
				want = "100.0" // seq1, the training sequence, was selected
			}
			if rows[1][mx] != want || rows[1][mean] != want || rows[2][mx] != "100.0" || rows[3][mx] != "" {
				t.Errorf("similarity of the selected candidate: %q %q, want %s; row 2 %q, row 3 %q", rows[1][mean], rows[1][mx], want, rows[2][mx], rows[3][mx])
			}
		}
		if rows[2][0] != rv("kcat (1/s)", c1) ||
			!strings.Contains(rows[2][2], `{"sequenceIndex":2,"sequence":"`+long+`","prediction":null,"source":"","error":"Sequence too long \u2014 sequence candidate was excluded","selected":false}`) {
			t.Errorf("row 2 %q %s", rows[2][0], rows[2][2])
		}
		for _, c := range []int{0, 3} {
			if rows[3][c] != "" || rows[3][c+1] != "Sequence too long — row was excluded" {
				t.Errorf("row 3 col %d %q %q", c, rows[3][c], rows[3][c+1])
			}
		}
		if rows[4][0] != rv("kcat (1/s)", one(seq2, "O")) || rows[4][2] != `[{"sequenceIndex":1,"sequence":"`+seq2+`","prediction":`+rows[4][0]+`,"source":"`+src+`","error":null,"selected":true}]` {
			t.Errorf("single candidate in a candidate job: %q %s", rows[4][0], rows[4][2])
		}
	})

	t.Run("candidates truncate", func(t *testing.T) {
		rows := s.resultRows(truncID)
		if rows[3][0] == "" || rows[3][1] != src || !strings.Contains(rows[2][2], `"sequenceIndex":2,"sequence":"`+long+`","prediction":`) ||
			strings.Contains(rows[2][2], "excluded") {
			t.Errorf("truncated candidates are predicted: %q / %s", rows[3][:2], rows[2][2])
		}
	})

	t.Run("candidates per substrate slot", func(t *testing.T) {
		rows := s.resultRows(slotID)
		want := "[" + minOf("KM (mM)", 0, 3) + "," + minOf("KM (mM)", 1, 4) + "]"
		if rows[1][3] != want || rows[1][0] != maxOf("kcat (1/s)", 0, 1, 3, 4) {
			t.Errorf("per slot: Km %q want %q; kcat %q", rows[1][3], want, rows[1][0])
		}
		if !strings.HasPrefix(rows[1][5], `[{"sequenceIndex":1,"sequence":"`+seq1+`","substrates":[{"substrateIndex":1,"substrate":"CCO",`) {
			t.Errorf("nested Extra Info %s", rows[1][5])
		}
	})

	t.Run("one target's failure keeps the other", func(t *testing.T) {
		rows := s.resultRows(failID)
		if rows[1][0] != "" || rows[1][1] != badSub || rows[1][3] == "" || rows[1][4] != src {
			t.Errorf("row 1: %q", rows[1][:6])
		}
		if rows[2][0] == "" || rows[2][3] == "" {
			t.Errorf("row 2: %q", rows[2][:6])
		}
	})

	t.Run("400 texts and validate", func(t *testing.T) {
		for _, c := range []struct{ csv, methods, want string }{
			{"Protein Sequence,Substrate,Products\n" + seq1 + ",CCO,O\n", `{"kcat":"B"}`, "'Products' requires a 'Substrates' column."},
			{"Protein Sequence,x\n" + seq1 + ",1\n", `{"kcat":"B"}`, "Missing required columns: Substrate or Substrates"},
			{"Protein Sequence,Substrates,Products\n" + seq1 + ",CCO,O;X((\n", `{"kcat":"B"}`,
				`Invalid Products value at row 1, product 2: "X((" is not a valid SMILES or InChI. Products must be semicolon-separated SMILES or InChI strings.`},
			{"Protein Sequence,Substrates\n" + seq1 + ",CCO\n", `{"kcat":"D"}`, "Missing required columns: Products"},
		} {
			code, msg := s.submitErr(c.csv, map[string]string{"targets": `["kcat"]`, "methods": c.methods})
			if code != 400 || msg != c.want {
				t.Errorf("%q: %d %q, want %q", c.csv, code, msg, c.want)
			}
		}
		var buf bytes.Buffer
		mw := multipart.NewWriter(&buf)
		fw, _ := mw.CreateFormFile("file", "v.csv")
		_, _ = fw.Write([]byte("Protein Sequence,Substrates,Products\n" + seq1 + ";M1K,CCO;X((,O\n" + seq2 + ",,O\n"))
		_ = mw.Close()
		var body string
		if code := s.do("POST", "/api/v1/validate/", &buf, mw.FormDataContentType(), &body); code != 200 {
			t.Fatalf("validate %d %s", code, body)
		}
		for _, want := range []string{
			`{"row":1,"value":["X(("],"reason":"Invalid substrate/product SMILES/InChI","invalid_substrates":[{"position":2,"value":"X(("}],"invalid_products":[]}`,
			`{"row":2,"value":[null],"reason":"Empty substrate list","invalid_substrates":[{"position":null,"value":null}],"invalid_products":[]}`,
			`{"row":1,"value":"M1K","position":2,"invalid_chars":["1"],"reason":"Invalid characters in sequence"}`,
		} {
			if !strings.Contains(body, want) {
				t.Errorf("validate lacks %s\n%s", want, body)
			}
		}
	})
}

func colIndex(t *testing.T, header []string, name string) int {
	t.Helper()
	for i, h := range header {
		if h == name {
			return i
		}
	}
	t.Fatalf("no column %q in %q", name, header)
	return -1
}

func (s *stack) resultRows(jobID string) [][]string {
	s.t.Helper()
	rows, err := csv.NewReader(strings.NewReader(s.resultCSV(jobID))).ReadAll()
	if err != nil {
		s.t.Fatal(err)
	}
	return rows
}

// quotaUsed is today's used quota of the stack's key.
func (s *stack) quotaUsed() int {
	s.t.Helper()
	var out struct {
		Used int `json:"used"`
	}
	if code := s.do("GET", "/api/v1/quota/", nil, "", &out); code != 200 {
		s.t.Fatalf("quota: %d", code)
	}
	return out.Used
}

// submitForm uploads csv with the given form fields and returns the job id.
func (s *stack) submitForm(csvText string, fields map[string]string) string {
	s.t.Helper()
	code, msg, id := s.postForm(csvText, fields)
	if code != 201 {
		s.t.Fatalf("submit: %d %s", code, msg)
	}
	return id
}

// submitErr uploads csv and returns the status and error text.
func (s *stack) submitErr(csvText string, fields map[string]string) (int, string) {
	s.t.Helper()
	code, msg, _ := s.postForm(csvText, fields)
	return code, msg
}

func (s *stack) postForm(csvText string, fields map[string]string) (int, string, string) {
	var buf bytes.Buffer
	mw := multipart.NewWriter(&buf)
	fw, _ := mw.CreateFormFile("file", "input.csv")
	_, _ = fw.Write([]byte(csvText))
	for k, v := range fields {
		_ = mw.WriteField(k, v)
	}
	_ = mw.Close()
	var out struct {
		JobID string `json:"jobId"`
		Error string `json:"error"`
	}
	code := s.do("POST", "/api/v1/submit/", &buf, mw.FormDataContentType(), &out)
	return code, out.Error, out.JobID
}

// submitJSON posts a JSON body and returns the job id.
func (s *stack) submitJSON(body map[string]any) string {
	s.t.Helper()
	b, _ := json.Marshal(body)
	var out struct {
		JobID string `json:"jobId"`
		Error string `json:"error"`
	}
	if code := s.do("POST", "/api/v1/submit/", bytes.NewReader(b), "application/json", &out); code != 201 {
		s.t.Fatalf("submit JSON: %d %s", code, out.Error)
	}
	return out.JobID
}

// TestGAndGO2ShareTheirEphemeralFiles runs method G for kcat and its variant
// G-O2 for Km in one job: G-O2 reads the embeddings G's stage computed (its
// plan finds them cached), and the ephemeral family is deleted once, after
// the last of the two stages: a family shared by a job's method G targets
// lives until the last of them has read it.
func TestGAndGO2ShareTheirEphemeralFiles(t *testing.T) {
	s := newStack(t, nil, nil)
	id := s.submit(csvRows(randSeed(), 3, 200), []string{"kcat", "Km"}, map[string]string{"kcat": "G", "Km": "G-O2"})
	st := s.waitDone(id, 90*time.Second)
	if st.Status != "Completed" {
		t.Fatalf("job: %s %s", st.Status, st.Error)
	}
	if len(st.Stages) != 2 || st.Stages[0].Embedding.Computed == 0 || st.Stages[1].Embedding.Need != 0 || st.Stages[1].Embedding.Cached != st.Stages[1].Embedding.Total {
		t.Errorf("G-O2 must reuse G's embeddings: %+v", st.Stages)
	}
	rows := s.resultRows(id)
	if rows[1][0] == "" || rows[1][3] == "" || rows[1][0] == rows[1][3] {
		t.Errorf("cells %q", rows[1][:6])
	}
	for p := range s.cacheFiles() {
		if strings.Contains(p, "methodg_esm2") {
			t.Errorf("ephemeral file left after the job: %s", p)
		}
	}
}
