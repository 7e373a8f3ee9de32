package api

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/kinflow/kinflow/internal/config"
	"github.com/kinflow/kinflow/internal/store"
	"github.com/kinflow/kinflow/internal/testenv"
)

func TestMethods(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		r := h.do("POST", "/api/v1/methods", "192.0.2.9", "", nil) // any method, no auth
		wantStatus(t, r, 200)
		var b struct {
			Methods map[string][]struct {
				ID              string   `json:"id"`
				DisplayName     string   `json:"displayName"`
				Supports        []string `json:"supports"`
				InputFormat     string   `json:"inputFormat"`
				MaxSeqLen       *int     `json:"maxSeqLen"`
				RequiredColumns []string `json:"requiredColumns"`
				SubstrateFormat string   `json:"substrateFormat"`
				ModelVersion    string   `json:"modelVersion"`
			} `json:"methods"`
			PredictionTypes     []string          `json:"predictionTypes"`
			LongSequenceOptions map[string]string `json:"longSequenceOptions"`
			Notes               map[string]string `json:"notes"`
		}
		if err := json.Unmarshal(r.Body.Bytes(), &b); err != nil {
			t.Fatal(err)
		}
		ids := func(tg string) string {
			var out []string
			for _, m := range b.Methods[tg] {
				out = append(out, m.ID)
			}
			return strings.Join(out, ",")
		}
		if ids("kcat") != "A-H,A-L,B,C,D,E,F,G,G-O2,H,K,L" || ids("Km") != "A-H,B,C,E,F,G,G-O2,H,J,K" || ids("kcat/Km") != "B,I" {
			t.Fatalf("groups %s | %s | %s", ids("kcat"), ids("Km"), ids("kcat/Km"))
		}
		d := b.Methods["kcat"][4]
		if d.ID != "D" || d.InputFormat != "multi" || *d.MaxSeqLen != 1024 || strings.Join(d.RequiredColumns, ",") != "Protein Sequence,Substrates,Products" ||
			!strings.Contains(d.SubstrateFormat, "Products") {
			t.Fatalf("D %+v", d)
		}
		for tg, ms := range b.Methods {
			for _, m := range ms {
				// Method K is the reference's second CatRange model.
				if want := map[bool]string{true: "2", false: "1"}[m.ID == "K"]; m.ModelVersion != want {
					t.Errorf("%s %s: modelVersion %q", tg, m.ID, m.ModelVersion)
				}
			}
		}
		if strings.Join(b.PredictionTypes, ",") != "kcat,Km,kcat/Km" || b.LongSequenceOptions["skip"] == "" ||
			b.Notes["targets"] == "" || b.Notes["quota"] == "" || b.Notes["experimental"] != "" {
			t.Fatalf("body %s", r.Body)
		}
		for _, want := range []string{
			`"inputFormat":"multi","acceptedCsvTypes":["full_reaction"],"acceptedCsvTypesByTarget":{"kcat":["full_reaction"]},"inputBehaviorByTarget":{"kcat":"native_full_reaction"},"maxSeqLen":1024,`,
			`"id":"E",`, `"inputFormat":"single","acceptedCsvTypes":["single","multi","full_reaction"],"acceptedCsvTypesByTarget":{"kcat":["single","multi","full_reaction"],"Km":["single","multi","full_reaction"]},"inputBehaviorByTarget":{"kcat":"native_multi","Km":"expanded_pair"},"maxSeqLen":2048,`,
			`"id":"G-O2","displayName":"Method G-O2"`,
			`"notes":{"targets":`, `,"substrateLists":"A 'Substrates' cell`, `,"quota":"Each input reaction row counts once against your daily quota.","predictionUnits":"Each substrate of a 'Substrates' list`,
		} {
			if !strings.Contains(r.Body.String(), want) {
				t.Errorf("/methods/ lacks %s", want)
			}
		}
		if !strings.HasPrefix(r.Body.String(), `{"methods":{"kcat":[{"id":"A-H","displayName":"Method A-H","authors":`) {
			t.Fatalf("order %s", r.Body.String()[:120])
		}
	})
}

func TestGPUStatus(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st) // unconfigured, no GPUStatus
		r := h.do("GET", "/api/v1/gpu/status/", "192.0.2.9", "", nil)
		wantStatus(t, r, 200)
		if r.Body.String() != `{"configured":false,"online":false,"mode":"cpu","gpuPrecompute":{"updatedAt":null,"events":[]}}` {
			t.Fatalf("unconfigured %s", r.Body)
		}
		r = h.do("POST", "/api/v1/gpu/status/", "192.0.2.9", "", nil)
		wantStatus(t, r, 405)
		if r.Header().Get("Allow") != "GET" {
			t.Fatalf("Allow %q", r.Header().Get("Allow"))
		}

		key := h.newKey("192.0.2.10")
		id := h.submitted("192.0.2.10", key)
		for i, reason := range []string{"not_configured", "done"} {
			e := store.JobEvent{JobID: id, Kind: store.EventGPUPrecompute, MethodKey: "B", Target: "kcat", Attempted: i == 1,
				UsedGPU: i == 1, Completed: i == 1, Reason: reason, CreatedAt: t0.Add(time.Duration(i) * time.Second)}
			st.DB.Create(&e)
		}
		h2 := newHarness(t, st, func(c *config.Config, d *Deps) { d.GPU = fakeGPU{configured: true, online: true} })
		r = h2.do("GET", "/api/v1/gpu/status", "192.0.2.9", "", nil)
		wantStatus(t, r, 200)
		want := `{"configured":true,"online":true,"mode":"gpu","gpuPrecompute":{"updatedAt":"2026-03-04T14:30:01.123456+00:00","events":[` +
			`{"methodKey":"B","method_key":"B","target":"kcat","attempted":false,"usedGpu":false,"used_gpu":false,"completed":false,"failed":false,"reason":"not_configured","updatedAt":"2026-03-04T14:30:00.123456+00:00"},` +
			`{"methodKey":"B","method_key":"B","target":"kcat","attempted":true,"usedGpu":true,"used_gpu":true,"completed":true,"failed":false,"reason":"done","updatedAt":"2026-03-04T14:30:01.123456+00:00"}]}}`
		if r.Body.String() != want {
			t.Fatalf("configured\n got %s\nwant %s", r.Body, want)
		}
		if strings.Contains(r.Body.String(), id) {
			t.Fatal("a job id leaked into the public GPU status")
		}
		h3 := newHarness(t, st, func(c *config.Config, d *Deps) { d.GPU = fakeGPU{configured: true, online: false} })
		if b := h3.do("GET", "/api/v1/gpu/status/", "192.0.2.9", "", nil).json(t); b["configured"] != true || b["online"] != false || b["mode"] != "cpu" {
			t.Fatalf("offline %v", b)
		}
	})
}

func TestCORS(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) { c.CORSOrigins = []string{"https://ui.example.org"} })
		r := h.do("OPTIONS", "/api/v1/submit/", "192.0.2.11", "", nil, "Origin", "https://ui.example.org", "Access-Control-Request-Method", "POST",
			"Access-Control-Request-Headers", "authorization, content-type")
		if r.Code != 204 || r.Header().Get("Access-Control-Allow-Origin") != "https://ui.example.org" ||
			r.Header().Get("Access-Control-Allow-Credentials") != "true" || !strings.Contains(r.Header().Get("Access-Control-Allow-Headers"), "authorization") {
			t.Fatalf("preflight %d %v", r.Code, r.Header())
		}
		// Preflight on a GET-only route too.
		if r := h.do("OPTIONS", "/api/api-key/", "192.0.2.11", "", nil, "Origin", "https://ui.example.org", "Access-Control-Request-Method", "GET"); r.Code != 204 {
			t.Fatalf("preflight on GET route %d", r.Code)
		}
		r = h.do("GET", "/api/v1/health/", "192.0.2.11", "", nil, "Origin", "https://evil.example.com")
		if r.Header().Get("Access-Control-Allow-Origin") != "" {
			t.Fatalf("foreign origin allowed: %v", r.Header())
		}
		r = h.do("GET", "/api/v1/quota/", "192.0.2.11", "", nil, "Origin", "https://ui.example.org")
		if r.Code != 401 || r.Header().Get("Access-Control-Allow-Origin") != "https://ui.example.org" {
			t.Fatalf("CORS on an error %d %v", r.Code, r.Header())
		}
		// The wildcard allows any origin but never with credentials: "*" is
		// sent, not the echoed origin, and no Allow-Credentials header.
		hAny := newHarness(t, st) // default "*"
		for _, m := range []string{"GET", "OPTIONS"} {
			r := hAny.do(m, "/api/v1/methods/", "192.0.2.11", "", nil, "Origin", "http://localhost:3000", "Access-Control-Request-Method", "GET")
			if r.Header().Get("Access-Control-Allow-Origin") != "*" || r.Header().Get("Access-Control-Allow-Credentials") != "" {
				t.Fatalf("* %s: %v", m, r.Header())
			}
		}
		// A list with both: the named origin keeps its credentials, any other gets "*".
		hBoth := newHarness(t, st, func(c *config.Config, _ *Deps) { c.CORSOrigins = []string{"https://ui.example.org", "*"} })
		if r := hBoth.do("GET", "/api/v1/methods/", "192.0.2.11", "", nil, "Origin", "https://ui.example.org"); r.Header().Get("Access-Control-Allow-Origin") != "https://ui.example.org" ||
			r.Header().Get("Access-Control-Allow-Credentials") != "true" {
			t.Fatalf("named beside *: %v", r.Header())
		}
		if r := hBoth.do("GET", "/api/v1/methods/", "192.0.2.11", "", nil, "Origin", "https://other.example.org"); r.Header().Get("Access-Control-Allow-Origin") != "*" ||
			r.Header().Get("Access-Control-Allow-Credentials") != "" {
			t.Fatalf("other beside *: %v", r.Header())
		}
	})
}

func TestJSONErrorsEverywhere(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st)
		for _, c := range []struct {
			method, path string
			code         int
		}{
			{"GET", "/nope", 404}, {"GET", "/api/v1/", 404}, {"GET", "/api/v1/status/", 404}, {"DELETE", "/api/v1/openapi.json", 405},
		} {
			r := h.do(c.method, c.path, "192.0.2.12", "", nil)
			wantStatus(t, r, c.code)
			if r.json(t)["error"] == "" || r.Header().Get("X-Request-ID") == "" {
				t.Fatalf("%s %s: %s", c.method, c.path, r.Body)
			}
		}
	})
}

func TestClientIP(t *testing.T) {
	trusted := []netip.Prefix{netip.MustParsePrefix("10.0.0.0/8"), netip.MustParsePrefix("::1/128")}
	cases := []struct {
		name, peer, xff, want string
	}{
		{"untrusted peer ignores XFF", "203.0.113.5:1", "1.2.3.4", "203.0.113.5"},
		{"trusted peer, one entry", "10.0.0.2:1", "198.51.100.7", "198.51.100.7"},
		{"trusted peer, spoofed first entry", "10.0.0.2:1", "1.2.3.4, 198.51.100.7", "198.51.100.7"},
		{"chain of trusted proxies", "10.0.0.2:1", "1.2.3.4, 198.51.100.7, 10.1.1.1", "198.51.100.7"},
		{"trusted peer without XFF", "10.0.0.2:1", "", "10.0.0.2"},
		{"trusted peer, garbage XFF", "10.0.0.2:1", "not-an-ip", "10.0.0.2"},
		{"IPv6 trusted peer", "[::1]:80", "2001:db8::1", "2001:db8::1"},
		{"IPv4-mapped peer", "[::ffff:203.0.113.9]:1", "", "203.0.113.9"},
	}
	for _, c := range cases {
		req := httptest.NewRequest("GET", "/", nil)
		req.RemoteAddr = c.peer
		if c.xff != "" {
			req.Header.Set("X-Forwarded-For", c.xff)
		}
		if got := clientIP(req, trusted); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

func TestTrustedProxyKeys(t *testing.T) {
	testenv.EachDialect(t, func(t *testing.T, st *store.Store) {
		h := newHarness(t, st, func(c *config.Config, _ *Deps) {
			c.TrustedProxies = []netip.Prefix{netip.MustParsePrefix("10.0.0.1/32")}
		})
		// Through the proxy, the client behind it owns the key.
		r := h.do("POST", "/api/api-key/generate/", "10.0.0.1", "", nil, "X-Forwarded-For", "6.6.6.6, 198.51.100.40")
		wantStatus(t, r, 201)
		var k store.APIKey
		st.DB.Take(&k)
		if k.IPAddress != "198.51.100.40" {
			t.Fatalf("key owner %s", k.IPAddress)
		}
		// A direct caller cannot claim that address with a header.
		r = h.do("POST", "/api/api-key/revoke/", "203.0.113.66", "", nil, "X-Forwarded-For", "198.51.100.40")
		wantStatus(t, r, 404)
		r = h.do("GET", "/api/api-key/", "198.51.100.40", "", nil)
		if r.json(t)["hasKey"] != true {
			t.Fatalf("direct %s", r.Body)
		}
		wantStatus(t, h.do("POST", "/api/api-key/revoke/", "10.0.0.1", "", nil, "X-Forwarded-For", "198.51.100.40"), http.StatusOK)
	})
}
