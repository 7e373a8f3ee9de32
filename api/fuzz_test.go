package api

import (
	"bytes"
	"net/http"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

// fuzzHarness is one SQLite-backed server with a key whose quota never runs
// out, so that every outcome is decided by the input alone.
func fuzzHarness(f *testing.F) (*harness, string) {
	h := newHarness(f, testenv.OpenStore(f, store.SQLite), func(c *config.Config, _ *Deps) {
		c.DefaultDailyQuota = 1 << 30
		c.MaxRows = 200
		c.MaxUploadBytes = 1 << 20
	})
	return h, h.newKey("192.0.2.200")
}

// checkOutcome: success is 201/200, everything else a 4xx with a JSON error;
// a 5xx (a recovered panic included) fails.
func checkOutcome(t *testing.T, r resp, success int) {
	t.Helper()
	if r.Code == success {
		return
	}
	if r.Code < 400 || r.Code >= 500 {
		t.Fatalf("status %d: %s", r.Code, r.Body)
	}
	if m := r.json(t); m["error"] == "" {
		t.Fatalf("4xx without error text: %s", r.Body)
	}
}

func FuzzSubmitJSON(f *testing.F) {
	h, key := fuzzHarness(f)
	for _, s := range []string{
		`{"data":[{"Protein Sequence":"MKT","Substrate":"CCO"}],"targets":["kcat"],"methods":{"kcat":"B"}}`,
		`{"data":[{"Protein Sequence":"MKT","Substrate":"CCO"}],"predictionType":"both","kcatMethod":"E","kmMethod":"C","useExperimental":"\"True\""}`,
		`{"data":[{"Protein Sequence":null,"Substrate":1.5e3}],"targets":["kcat/Km"],"methods":{"kcat/Km":"I"},"handleLongSequences":"skip"}`,
		`{"data":[],"targets":[]}`, `[]`, `{"data":{}}`, `{"data":[1,2]}`, `null`, `{"targets":["kcat","kcat"],"methods":{"kcat":"D"},"data":[{"Protein Sequence":"M","Substrates":"C;O","Products":"CC"}]}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		r := h.do("POST", "/api/v1/submit/", "192.0.2.200", key, bytes.NewReader(body), "Content-Type", "application/json")
		checkOutcome(t, r, http.StatusCreated)
	})
}

func FuzzSubmitMultipart(f *testing.F) {
	h, key := fuzzHarness(f)
	f.Add("Protein Sequence,Substrate\nMKT,CCO\n", `["kcat"]`, `{"kcat":"B"}`, "truncate", "true", "in.csv")
	f.Add("\xEF\xBB\xBFProtein Sequence,Substrate\n\"MK\nT\",\"C,O\"\n,\n", `["Km", "kcat"]`, `{"kcat":"B","Km":"C"}`, "skip", `"False"`, "x.CSV")
	f.Add("Protein Sequence,Substrates,Products\nMK,C;O,CC\n", `["kcat"]`, `{"kcat":"D"}`, "", "1", "a.csv")
	f.Add("a,b\n1,2,3\n", `[`, `{`, "Skip", "", "a.txt")
	f.Add("Protein Sequence,Substrates,Products\nMKT;MAA,CCO; O;;X(,O;\n;,none,\n", `["kcat","Km"]`, `{"kcat":"E","Km":"B"}`, "skip", "1", "l.csv")
	f.Fuzz(func(t *testing.T, content, targets, methods, long, flag, filename string) {
		fields := []string{"targets", targets, "methods", methods, "canonicalizeSubstrates", flag, "disableGpuPrecompute", flag}
		if long != "" {
			fields = append(fields, "handleLongSequences", long)
		}
		body, ct := multipartBody(t, filename, content, fields...)
		r := h.do("POST", "/api/v1/submit/", "192.0.2.200", key, body, "Content-Type", ct)
		checkOutcome(t, r, http.StatusCreated)
	})
}

func FuzzValidate(f *testing.F) {
	h, key := fuzzHarness(f)
	f.Add([]byte("Protein Sequence,Substrate\nMKT,CCO\n!!,NOT_A_SMILES\n"), false)
	f.Add([]byte("Protein Sequence,Substrates,Products\nMK,C;O,\n"), false)
	f.Add([]byte("Protein Sequence,Substrates\nMK;M1;,C; X( ;;\n,NaT\n"), false)
	f.Add([]byte(`{"data":[{"Protein Sequence":"MK","Substrate":"InChI=1S/H2O/h1H2"}],"runSimilarity":"false"}`), true)
	f.Fuzz(func(t *testing.T, body []byte, asJSON bool) {
		var r resp
		if asJSON {
			r = h.do("POST", "/api/v1/validate/", "192.0.2.200", key, bytes.NewReader(body), "Content-Type", "application/json")
		} else {
			b, ct := multipartBody(t, "in.csv", string(body))
			r = h.do("POST", "/api/v1/validate/", "192.0.2.200", key, b, "Content-Type", ct)
		}
		checkOutcome(t, r, http.StatusOK)
	})
}

// FuzzWaitingHeaders: waitSeconds and If-None-Match never panic; a wait is
// never negative nor above its cap; a parsed If-None-Match holds at most
// maxETagEntries tags, matches what it lists and, with *, anything.
func FuzzWaitingHeaders(f *testing.F) {
	for _, s := range []string{"", "1", "1e19", "-0", "NaN", "0x1p4", "60.000001", `W/"a", "b"`, "*", ",,,", `W/"x",*`} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, v string) {
		const capWait = 60 * time.Second
		if d, err := parseWaitSeconds(v, capWait); err == nil && (d < 0 || d > capWait) {
			t.Fatalf("parseWaitSeconds(%q) = %v, outside 0..%v", v, d, capWait)
		}
		m, err := parseETags([]string{v})
		if err != nil {
			return
		}
		if len(m.tags) > maxETagEntries {
			t.Fatalf("%d tags kept", len(m.tags))
		}
		for _, tag := range m.tags {
			if !m.matches(`W/` + tag) {
				t.Fatalf("If-None-Match %q does not match its own tag %q", v, tag)
			}
		}
		if m.any && !m.matches(`W/"anything"`) {
			t.Fatalf("* does not match")
		}
	})
}
