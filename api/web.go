package api

import (
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"regexp"
	"strings"

	"github.com/gin-gonic/gin"
)

// webFiles is the browser page: plain HTML, CSS and JavaScript (native ES
// modules, app.js importing the others), no build step, embedded in the
// binary so that the api process serves it alone.
//
//go:embed web/index.html web/*.css web/*.js
var webFiles embed.FS

// moduleImport matches a relative import of another of the page's modules
// (`from "./name.js"`), which loadWebSite versions like the page's links.
var moduleImport = regexp.MustCompile(`(from\s+")\./([a-z][a-z0-9_-]*\.js)(")`)

// webCSP is the page's Content-Security-Policy: only this origin's script,
// style and fetch targets, no inline script or style, no framing, no
// plugins. The favicon is an empty data: URL (img-src data:) so that
// browsers do not ask for /favicon.ico.
const webCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; " +
	"connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// webAsset is one embedded file, ready to serve.
type webAsset struct {
	body  []byte
	ctype string
	etag  string
}

// webSite is the page and its assets. Assets are linked from the page, and
// modules from each other, as /static/NAME?v=VERSION, VERSION being a hash
// of every asset, so a browser may keep them for a year: a new binary with
// new content links new URLs everywhere.
type webSite struct {
	index   webAsset
	assets  map[string]webAsset // by file name, e.g. "app.js"
	version string
}

func newAsset(name string, body []byte) webAsset {
	sum := sha256.Sum256(body)
	ctype := mime.TypeByExtension(path.Ext(name))
	if ctype == "" {
		ctype = "application/octet-stream"
	}
	return webAsset{body: body, ctype: ctype, etag: `"` + hex.EncodeToString(sum[:8]) + `"`}
}

// loadWebSite reads the embedded files and links the assets from the page,
// and the modules from each other, with the site's content hash.
func loadWebSite() *webSite {
	w := &webSite{assets: map[string]webAsset{}}
	index, _ := webFiles.ReadFile("web/index.html") // embedded: cannot fail
	entries, _ := fs.ReadDir(webFiles, "web")
	bodies := map[string][]byte{}
	var names []string
	sum := sha256.New()
	for _, e := range entries {
		if e.Name() == "index.html" {
			continue
		}
		b, _ := webFiles.ReadFile("web/" + e.Name())
		bodies[e.Name()] = b
		names = append(names, e.Name()) // ReadDir sorts: the hash is stable
		sum.Write([]byte(e.Name()))
		sum.Write([]byte{0})
		sum.Write(b)
	}
	w.version = hex.EncodeToString(sum.Sum(nil)[:8])
	for _, name := range names {
		b := bodies[name]
		if path.Ext(name) == ".js" {
			b = moduleImport.ReplaceAll(b, []byte(`${1}./${2}?v=`+w.version+`${3}`))
		}
		w.assets[name] = newAsset(name, b)
		index = bytes.ReplaceAll(index, []byte(`"/static/`+name+`"`), []byte(`"/static/`+name+`?v=`+w.version+`"`))
	}
	w.index = newAsset("index.html", index)
	return w
}

// pageHeaders are the security headers of the page and its assets.
func pageHeaders(c *gin.Context) {
	h := c.Writer.Header()
	h.Set("Content-Security-Policy", webCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("X-Frame-Options", "DENY")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cross-Origin-Opener-Policy", "same-origin")
	h.Set("Cross-Origin-Resource-Policy", "same-origin")
	h.Set("Permissions-Policy", "camera=(), microphone=(), geolocation=(), payment=(), usb=()")
}

// serveAsset writes a with a conditional-GET check on its ETag.
func serveAsset(c *gin.Context, a webAsset, cacheControl string) {
	pageHeaders(c)
	h := c.Writer.Header()
	h.Set("ETag", a.etag)
	h.Set("Cache-Control", cacheControl)
	if match := c.GetHeader("If-None-Match"); match != "" && strings.Contains(match, a.etag) {
		c.Status(http.StatusNotModified)
		return
	}
	c.Data(http.StatusOK, a.ctype, a.body)
}

// webIndex serves the page at /. It is revalidated on every load (no-cache
// with an ETag: a 304 costs one round trip) so that a new deployment shows
// at once.
func (w *webSite) webIndex(c *gin.Context) { serveAsset(c, w.index, "no-cache") }

// webStatic serves /static/NAME. Only the embedded names exist; anything
// else is the API's JSON 404, so no request can reach another file.
func (w *webSite) webStatic(c *gin.Context) {
	a, ok := w.assets[c.Param("name")]
	if !ok {
		abortError(c, http.StatusNotFound, "Not found.")
		return
	}
	cc := "no-cache"
	if c.Query("v") == w.version {
		cc = "public, max-age=31536000, immutable"
	}
	serveAsset(c, a, cc)
}

// registerWeb adds the page routes: GET and HEAD of / and /static/NAME.
// They sit outside /api/, so they never shadow an API path.
func registerWeb(e *gin.Engine) {
	w := loadWebSite()
	for _, m := range []string{http.MethodGet, http.MethodHead} {
		e.Handle(m, "/", w.webIndex)
		e.Handle(m, "/static/:name", w.webStatic)
	}
}
