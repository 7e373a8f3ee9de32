package api

import (
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestValidate(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.MaxRows = 20 })
		const ip = "198.51.100.60"
		key := h.newKey(ip)
		content := "Protein Sequence,Substrate\n" + seqA + ",CCO\n!!!ABC123!!!,NOT_A_SMILES\n,\n" + strings.Repeat("A", 1200) + ",O\n"
		body, ct := multipartBody(t, "in.CSV", content, "runSimilarity", "true")
		r := h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
		wantStatus(t, r, 200)
		got := r.Body.String()
		for _, want := range []string{
			`{"rowCount":4,"invalidSubstrates":[{"row":2,"value":"NOT_A_SMILES","reason":"Invalid SMILES/InChI"`,
			`"invalidProteins":[{"row":2,"value":"!!!ABC123!!!","invalid_chars":["!","1","2","3","B"],"reason":"Invalid characters in sequence"}]`,
			`"lengthViolations":{"A-H":0,"A-L":0,"B":1,"C":1,`,
			`"Server":0},"lengthLimits":{"A-H":1500,`,
			`"Server":10000},"similarity":{"error":`,
		} {
			if !strings.Contains(got, want) {
				t.Fatalf("report lacks %s:\n%s", want, got)
			}
		}
		// JSON form; no quota used, nothing stored.
		r = h.do("POST", "/api/v1/validate", ip, key, jsonBody(t, map[string]any{
			"data": []map[string]any{{"Protein Sequence": seqA, "Substrates": "CCO;O", "Products": "CC=O"}},
		}), "Content-Type", "application/json")
		wantStatus(t, r, 200)
		if b := r.json(t); b["rowCount"] != 1.0 || b["similarity"] != nil {
			t.Fatalf("json %s", r.Body)
		}
		for _, c := range []struct {
			name, file, content, ctype, json string
			code                             int
		}{
			{name: "no file", code: 400},
			{name: "not csv", file: "a.tsv", content: "x", code: 400},
			{name: "bad csv", file: "a.csv", content: "Protein Sequence,Substrate\n1,2,3\n", code: 400},
			{name: "no substrate columns", file: "a.csv", content: "Protein Sequence,Products\nMK,O\n", code: 400},
			{name: "no sequence column", file: "a.csv", content: "Substrate\nO\n", code: 400},
			{name: "too many rows", file: "a.csv", content: csvRows(21), code: 400},
			{name: "bad JSON", json: `{"data":`, code: 400},
			{name: "JSON not object", json: `[1]`, code: 400},
			{name: "data empty", json: `{"data":[]}`, code: 400},
			{name: "data not list", json: `{"data":"x"}`, code: 400},
		} {
			var r resp
			if c.json != "" {
				r = h.do("POST", "/api/v1/validate/", ip, key, strings.NewReader(c.json), "Content-Type", "application/json")
			} else {
				body, ct := multipartBody(t, c.file, c.content)
				r = h.do("POST", "/api/v1/validate/", ip, key, body, "Content-Type", ct)
			}
			if r.Code != c.code {
				t.Errorf("%s: %d %s", c.name, r.Code, r.Body)
			} else if r.json(t)["error"] == "" {
				t.Errorf("%s: no error text", c.name)
			}
		}
		used, _ := st.QuotaUsed(t.Context(), authKeyID(t, st, ip), store.QuotaDay(t0))
		if used != 0 {
			t.Fatalf("validate used %d", used)
		}
	})
}
