package api

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/similarity"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// choiceReport is the part of a /validate/ answer these tests read.
type choiceReport struct {
	LengthViolations json.RawMessage `json:"lengthViolations"`
	LengthLimits     json.RawMessage `json:"lengthLimits"`
	Methods          []string        `json:"methods"`
	Similarity       json.RawMessage `json:"similarity"`
	Messages         []struct {
		Row    *int   `json:"row"`
		Column string `json:"column"`
		Level  string `json:"level"`
		Text   string `json:"text"`
	} `json:"messages"`
}

func decodeChoice(t *testing.T, r resp) choiceReport {
	t.Helper()
	wantStatus(t, r, 200)
	var rep choiceReport
	if err := json.Unmarshal(r.Body.Bytes(), &rep); err != nil {
		t.Fatal(err)
	}
	return rep
}

// TestValidateChosenMethods: /validate/ takes /submit/'s optional targets
// and methods (form and JSON) and then reports only the chosen methods;
// without them every method, as before; bad choices get submit's 400s.
// Its messages list the rows in order, each bad character named once with
// its position, in one wording.
func TestValidateChosenMethods(t *testing.T) {
	st := testenv.OpenStore(t, store.SQLite)
	h := newHarness(t, st)
	const ip = "198.51.100.70"
	key := h.newKey(ip)
	long := strings.Repeat("A", 1200)
	// Row 1: bad protein; row 2: bad substrate; row 3: bad protein and
	// substrate; row 4: a sequence over method B's and C's limits.
	content := "Protein Sequence,Substrate\nMK1TZ,CCO\n" + seqA + ",NOT_A_SMILES\nmk Z,XX\n" + long + ",O\n"

	body, ct := multipartBody(t, "in.csv", content)
	all := decodeChoice(t, h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct))
	if !strings.HasPrefix(string(all.LengthViolations), `{"A-H":0,"A-L":0,"B":1,"C":1,`) || all.Methods != nil {
		t.Fatalf("without a choice: every method, no methods key: %s %v", all.LengthViolations, all.Methods)
	}
	var texts []string
	for _, m := range all.Messages {
		texts = append(texts, m.Text)
	}
	joined := strings.Join(texts, "\n")
	wantRows := []string{
		`Row 1, Protein Sequence: 2 characters are not amino acids: '1' at position 3, 'Z' at position 5. Allowed: the 20 amino acids ACDEFGHIKLMNPQRSTVWY, uppercase.`,
		`Row 2, Substrate: not a valid SMILES or InChI: "NOT_A_SMILES".`,
		`Row 3, Protein Sequence: 4 characters are not amino acids: 'm' at position 1 (lowercase; write M), 'k' at position 2 (lowercase; write K), ' ' at position 3 (a space), 'Z' at position 4.`,
		`Row 3, Substrate: not a valid SMILES or InChI: "XX".`,
	}
	for i, w := range wantRows {
		if i >= len(texts) || !strings.HasPrefix(texts[i], strings.TrimSuffix(w, ".")) {
			t.Fatalf("message %d: want %q, messages:\n%s", i, w, joined)
		}
	}
	if !strings.Contains(joined, "Method B: 1 sequence is longer than its limit of 1000 residues") ||
		!strings.Contains(joined, "Method C: 1 sequence is longer") {
		t.Fatalf("length messages:\n%s", joined)
	}
	if all.Messages[0].Row == nil || *all.Messages[0].Row != 1 || all.Messages[0].Level != "error" {
		t.Fatalf("first message %+v", all.Messages[0])
	}

	// Chosen in the form: only method B (and Server).
	body, ct = multipartBody(t, "in.csv", content, "targets", `["kcat"]`, "methods", `{"kcat":"B"}`)
	b := decodeChoice(t, h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct))
	if string(b.LengthViolations) != `{"B":1,"Server":0}` || string(b.LengthLimits) != `{"B":1000,"Server":10000}` ||
		len(b.Methods) != 1 || b.Methods[0] != "B" {
		t.Fatalf("chosen B: %s %s %v", b.LengthViolations, b.LengthLimits, b.Methods)
	}
	for _, m := range b.Messages {
		if strings.Contains(m.Text, "Method C") || strings.Contains(m.Text, "Method A") {
			t.Errorf("a method not chosen is reported: %q", m.Text)
		}
	}

	// Chosen in JSON, two targets: both methods, in target order.
	r := h.do("POST", "/api/v1/validate/", ip, key, jsonBody(t, map[string]any{
		"data":    []map[string]any{{"Protein Sequence": long, "Substrate": "CCO"}},
		"targets": []string{"Km", "kcat"}, "methods": map[string]string{"kcat": "C", "Km": "B"},
	}), "Content-Type", "application/json")
	j := decodeChoice(t, r)
	if string(j.LengthViolations) != `{"B":1,"C":1,"Server":0}` || strings.Join(j.Methods, ",") != "C,B" {
		t.Fatalf("JSON choice: %s %v", j.LengthViolations, j.Methods)
	}

	// A bad choice is submit's 400.
	for name, fields := range map[string][]string{
		"unknown target":   {"targets", `["kcat","Vmax"]`, "methods", `{"kcat":"B"}`},
		"unknown method":   {"targets", `["kcat"]`, "methods", `{"kcat":"nope"}`},
		"no method":        {"targets", `["kcat"]`},
		"targets not JSON": {"targets", `kcat`},
	} {
		body, ct := multipartBody(t, "in.csv", content, fields...)
		r := h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
		wantStatus(t, r, 400)
		sub := h.submitCSV(ip, key, content, fields...)
		if r.json(t)["error"] != sub.json(t)["error"] {
			t.Errorf("%s: validate says %q, submit %q", name, r.json(t)["error"], sub.json(t)["error"])
		}
	}
}

// TestValidateSimilarityMissingIsInformation: a chosen method without an
// installed similarity dataset is an `unavailable` answer and an info
// message, not an error; so is a server with no dataset at all.
func TestValidateSimilarityMissingIsInformation(t *testing.T) {
	dir := t.TempDir()
	svc := similarity.NewService(&similarity.Searcher{Root: filepath.Join(dir, "sim")}, []similarity.Dataset{
		{Label: "B", FASTA: filepath.Join(dir, "absent.fasta"), Methods: []string{"B"}},
	}, time.Minute)
	st := testenv.OpenStore(t, store.SQLite)
	h := newHarness(t, st, func(_ *config.Config, d *Deps) { d.Similarity = svc })
	const ip = "198.51.100.71"
	key := h.newKey(ip)
	for _, c := range []struct {
		name   string
		fields []string
		want   string
	}{
		{"G has none", []string{"targets", `["kcat"]`, "methods", `{"kcat":"G"}`}, "Method G has no similarity dataset."},
		{"B's absent", []string{"targets", `["kcat"]`, "methods", `{"kcat":"B"}`}, "The similarity dataset B of method B is not installed on this server."},
		{"no choice", nil, "No similarity datasets are available on this server"},
	} {
		body, ct := multipartBody(t, "in.csv", "Protein Sequence,Substrate\n"+seqA+",CCO\n", append([]string{"runSimilarity", "true"}, c.fields...)...)
		rep := decodeChoice(t, h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct))
		var sim struct {
			Error       string `json:"error"`
			Unavailable bool   `json:"unavailable"`
		}
		if err := json.Unmarshal(rep.Similarity, &sim); err != nil || !strings.HasPrefix(sim.Error, c.want) || !sim.Unavailable {
			t.Errorf("%s: similarity %s", c.name, rep.Similarity)
		}
		last := rep.Messages[len(rep.Messages)-1]
		if last.Level != "info" || last.Column != "similarity" || !strings.Contains(last.Text, "% identity") || !strings.Contains(last.Text, c.want) {
			t.Errorf("%s: message %+v", c.name, last)
		}
	}
}
