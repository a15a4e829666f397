// Package ui is the web UI of `cove serve`: a single-page app in plain
// HTML, CSS and JavaScript modules, embedded in the binary and served as
// written. There is no build step and nothing is fetched from elsewhere,
// so the UI works on a machine with no internet and `go build` needs no
// Node. The app talks only to the server's /v1 API, in the session the
// user signs in to with an API key (an HttpOnly cookie: no script, the
// app's own included, ever holds the key after the sign-in).
package ui

import (
	"crypto/sha256"
	"embed"
	"encoding/hex"
	"io"
	"io/fs"
	"net/http"
	"strings"
	"time"
)

//go:embed index.html *.js *.css favicon.svg
var files embed.FS

// csp allows the page only its own scripts and styles, the API on the
// same origin (and its WebSocket), and blob: URLs for files shown from
// a sandbox (images, PDFs): an injected script or a file's content
// cannot run or load anything else.
const csp = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' blob: data:; " +
	"connect-src 'self' ws: wss:; frame-src blob:; object-src blob:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// Handler serves index.html at "/", the assets under "/ui/" and the icon
// at "/favicon.ico". Each
// file has an ETag of its content, and browsers revalidate it on every
// load (no-cache): an upgraded binary's files show at once, and an
// unchanged one costs a 304.
func Handler() http.Handler {
	etags := map[string]string{}
	fs.WalkDir(files, ".", func(name string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			data, _ := fs.ReadFile(files, name)
			sum := sha256.Sum256(data)
			etags[name] = `"` + hex.EncodeToString(sum[:8]) + `"`
		}
		return nil
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		name := strings.TrimPrefix(r.URL.Path, "/ui/")
		switch {
		case r.URL.Path == "/" || name == "":
			name = "index.html"
		case r.URL.Path == "/favicon.ico":
			// Browsers ask for it whatever the page links; an SVG
			// with its own type is shown as the icon.
			name = "favicon.svg"
		}
		etag, ok := etags[name]
		if !ok {
			http.NotFound(w, r)
			return
		}
		f, err := files.Open(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		defer f.Close()
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "no-referrer")
		// A window a sandbox's page opens on the UI gets no handle on
		// it, nor it on the sandbox's page.
		h.Set("Cross-Origin-Opener-Policy", "same-origin")
		h.Set("Cache-Control", "no-cache")
		h.Set("ETag", etag)
		http.ServeContent(w, r, name, time.Time{}, f.(io.ReadSeeker))
	})
}
