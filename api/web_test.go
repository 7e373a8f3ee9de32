package api

import (
	"regexp"
	"strings"
	"testing"

	"github.com/kinflow/kinflow/internal/config"
)

// TestWebPage checks the page and its assets: content, security headers,
// cache rules (hashed asset URLs cached for a year, everything else
// revalidated), conditional GETs, and that nothing but the embedded files
// is served.
func TestWebPage(t *testing.T) {
	h := newHarness(t, nil)
	r := h.do("GET", "/", "192.0.2.1", "", nil)
	wantStatus(t, r, 200)
	if ct := r.Header().Get("Content-Type"); !strings.HasPrefix(ct, "text/html") {
		t.Fatalf("page Content-Type %q", ct)
	}
	for k, want := range map[string]string{
		"Content-Security-Policy": "script-src 'self'",
		"X-Content-Type-Options":  "nosniff",
		"X-Frame-Options":         "DENY",
		"Referrer-Policy":         "no-referrer",
		"Cache-Control":           "no-cache",
	} {
		if got := r.Header().Get(k); !strings.Contains(got, want) {
			t.Errorf("%s = %q, want it to contain %q", k, got, want)
		}
	}
	if csp := r.Header().Get("Content-Security-Policy"); strings.Contains(csp, "unsafe-inline") || strings.Contains(csp, "unsafe-eval") {
		t.Errorf("CSP allows inline code: %s", csp)
	}
	page := r.Body.String()
	// CSP-friendly: no inline script, no inline style or event handler.
	if regexp.MustCompile(`<script(?:\s[^>]*)?>\s*[^<\s]`).MatchString(page) || strings.Contains(page, " style=") ||
		regexp.MustCompile(`\son[a-z]+=`).MatchString(page) {
		t.Fatal("page has inline script, style or event handler")
	}
	refs := regexp.MustCompile(`/static/(app\.(?:js|css))\?v=([0-9a-f]{16})`).FindAllStringSubmatch(page, -1)
	if len(refs) != 2 {
		t.Fatalf("page links %d hashed assets, want 2: %v", len(refs), refs)
	}
	for _, m := range refs {
		a := h.do("GET", m[0], "192.0.2.1", "", nil)
		wantStatus(t, a, 200)
		if cc := a.Header().Get("Cache-Control"); !strings.Contains(cc, "immutable") {
			t.Errorf("%s Cache-Control %q", m[0], cc)
		}
		wantCT := map[string]string{"app.js": "javascript", "app.css": "text/css"}[m[1]]
		if ct := a.Header().Get("Content-Type"); !strings.Contains(ct, wantCT) {
			t.Errorf("%s Content-Type %q", m[0], ct)
		}
		if a.Header().Get("Content-Security-Policy") == "" {
			t.Errorf("%s without CSP", m[0])
		}
		// The unversioned URL is revalidated, never cached blindly.
		plain := h.do("GET", "/static/"+m[1], "192.0.2.1", "", nil)
		if cc := plain.Header().Get("Cache-Control"); cc != "no-cache" {
			t.Errorf("unversioned %s Cache-Control %q", m[1], cc)
		}
		etag := a.Header().Get("ETag")
		nm := h.do("GET", m[0], "192.0.2.1", "", nil, "If-None-Match", etag)
		if nm.Code != 304 || nm.Body.Len() != 0 {
			t.Errorf("conditional GET of %s: %d, %d bytes", m[0], nm.Code, nm.Body.Len())
		}
	}
	if !strings.Contains(h.do("GET", "/static/api.js", "192.0.2.1", "", nil).Body.String(), "Authorization") {
		t.Error("api.js does not send the key")
	}
	// The page's script is a module; the modules it imports are linked with
	// the same version, so they too are cached for a year, and served as
	// JavaScript (a browser refuses a module of another type).
	if !strings.Contains(page, `<script type="module" src="/static/app.js?v=`) {
		t.Error("app.js is not loaded as a module")
	}
	ver := refs[0][2]
	app := h.do("GET", "/static/app.js?v="+ver, "192.0.2.1", "", nil).Body.String()
	imports := regexp.MustCompile(`from "\./([a-z]+\.js)\?v=([0-9a-f]{16})"`).FindAllStringSubmatch(app, -1)
	if len(imports) < 4 {
		t.Fatalf("app.js imports %d versioned modules: %v", len(imports), imports)
	}
	for _, m := range imports {
		r := h.do("GET", "/static/"+m[1]+"?v="+m[2], "192.0.2.1", "", nil)
		wantStatus(t, r, 200)
		if m[2] != ver || !strings.Contains(r.Header().Get("Content-Type"), "javascript") || !strings.Contains(r.Header().Get("Cache-Control"), "immutable") {
			t.Errorf("module %s: version %s (page %s), %q, %q", m[1], m[2], ver, r.Header().Get("Content-Type"), r.Header().Get("Cache-Control"))
		}
	}
	head := h.do("HEAD", "/", "192.0.2.1", "", nil)
	if head.Code != 200 {
		t.Errorf("HEAD /: %d", head.Code)
	}
	for _, p := range []string{"/static/index.html", "/static/..%2fweb.go", "/static/", "/static/app.js/x", "/index.html", "/web/app.js"} {
		r := h.do("GET", p, "192.0.2.1", "", nil)
		wantStatus(t, r, 404)
	}
	if r := h.do("POST", "/", "192.0.2.1", "", nil); r.Code != 405 {
		t.Errorf("POST /: %d", r.Code)
	}
	// The API keeps its own answers (no page headers, JSON 404s).
	api := h.do("GET", "/api/v1/nope/", "192.0.2.1", "", nil)
	wantStatus(t, api, 404)
	if api.Header().Get("Content-Security-Policy") != "" {
		t.Error("API answers carry the page's CSP")
	}
}

// TestWebPageLabels checks that every form control of the page has a label
// (the browser test checks the controls built from /methods/).
func TestWebPageLabels(t *testing.T) {
	h := newHarness(t, nil)
	page := h.do("GET", "/", "192.0.2.1", "", nil).Body.String()
	ids := regexp.MustCompile(`<(?:input|textarea|select)\b[^>]*\bid="([^"]+)"`).FindAllStringSubmatch(page, -1)
	if len(ids) < 8 {
		t.Fatalf("only %d controls found", len(ids))
	}
	for _, m := range ids {
		if !strings.Contains(page, `for="`+m[1]+`"`) {
			t.Errorf("control #%s has no <label for>", m[1])
		}
	}
}

// TestMethodsSaySynthetic: /methods/ carries `synthetic: true` on a server
// whose prediction engine is the synthetic one (the web page's start page
// says so), and nothing on one with a real engine.
func TestMethodsSaySynthetic(t *testing.T) {
	for _, engine := range []string{"synthetic", "command"} {
		h := newHarness(t, nil, func(c *config.Config, _ *Deps) { c.PredictionEngine = engine })
		got, present := h.do("GET", "/api/v1/methods/", "192.0.2.1", "", nil).json(t)["synthetic"]
		if want := engine == "synthetic"; present != want || (want && got != true) {
			t.Errorf("engine %s: synthetic %v (present %v)", engine, got, present)
		}
	}
}
