package server

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/web"
)

// The web UI's sign-in. The UI posts the API key once to POST
// /v1/session and gets it back as a cookie the page's scripts cannot
// read (HttpOnly), which the browser sends only to /v1 (Path=/v1, so
// never to a sandbox's port under /p/), only from this site
// (SameSite=Strict), and only over TLS when the server has it (Secure).
// The cookie holds no key: it is the key's hash, a CSRF token and an
// expiry, sealed with the server's secret key (runs.Service.Sealer), so it needs
// no session table, survives a restart, and ends with its key (a revoked
// key's cookie opens but finds no key).
//
// A cookie is sent by the browser whoever asks, so /v1 accepts it only
// with proof that the request comes from the UI itself:
//   - the CSRF token of the same cookie in the X-Cove-CSRF header (the
//     UI keeps it in its storage; it is worth nothing without the
//     cookie). A page of another origin cannot send a custom header
//     without a CORS preflight, which this server never grants; and a
//     cookie planted by a page of a port's host name (cookies do not
//     keep to origins) does not carry the UI's token, so it is ignored.
//     A WebSocket handshake, which cannot carry headers, sends the
//     token as ?csrf= and must carry the server's own Origin;
//   - Sec-Fetch-Site, when the browser sends it, is same-origin (or
//     none); Origin, when sent, names this server.
//
// Scripts and API clients send the key itself (Authorization or
// X-API-Key), which needs none of this.

const (
	// sessionCookie is the UI's session.
	sessionCookie = web.SessionCookie
	// csrfHeader carries the session's CSRF token; csrfQuery carries it
	// on a WebSocket handshake.
	csrfHeader = web.CSRFHeader
	csrfQuery  = "csrf"
	// sessionTTL is how long a session lasts when the user asked to
	// stay signed in (the cookie's Max-Age); browserSessionTTL bounds a
	// cookie that ends with the browser, which may restore it for ever.
	sessionTTL        = 30 * 24 * time.Hour
	browserSessionTTL = 24 * time.Hour
	// sessionAD binds sealed sessions to their use.
	sessionAD = "cove-session-v1"
)

// sealedSession is what a session cookie holds, sealed.
type sealedSession struct {
	KeyHash string `json:"h"`
	CSRF    string `json:"c"`
	Expires int64  `json:"e"` // Unix seconds
}

// signIn is the body of POST /v1/session.
type signIn struct {
	Key string `json:"key"`
	// Remember keeps the session for sessionTTL, past the browser's
	// restart; otherwise the cookie ends with the browser.
	Remember bool `json:"remember,omitempty"`
}

// sessionView is the answer to a sign-in: the token the UI sends back
// in X-Cove-CSRF, and who signed in (never the key).
type sessionView struct {
	CSRF      string    `json:"csrf"`
	ExpiresAt time.Time `json:"expires_at"`
	Key       api.Key   `json:"key"`
}

// sessionRoutes are the UI's, not the API's: registered on the mux
// directly, they are not in the OpenAPI document.
func (s *Server) sessionRoutes() {
	s.mux.HandleFunc("POST /v1/session", s.createSession)
	s.mux.HandleFunc("DELETE /v1/session", s.deleteSession)
}

// createSession signs the UI in: it checks the key and sets the cookie.
func (s *Server) createSession(w http.ResponseWriter, r *http.Request) {
	if !s.fromUI(w, r, "signing in takes the "+csrfHeader+" header (the web UI sends it); scripts send their key in Authorization instead") {
		return
	}
	var req signIn
	if !s.decode(w, r, &req) {
		return
	}
	c, msg, err := s.callerOf(r, strings.TrimSpace(req.Key))
	switch {
	case err != nil:
		s.fail(w, r, err)
		return
	case c == nil:
		writeError(w, r, http.StatusUnauthorized, api.CodeUnauthorized, msg)
		return
	}
	csrf := make([]byte, 16)
	rand.Read(csrf)
	ttl := browserSessionTTL
	if req.Remember {
		ttl = sessionTTL
	}
	// Real time, not the configured clock: a cookie's Max-Age is.
	expires := time.Now().Add(ttl).Truncate(time.Second)
	sess := sealedSession{KeyHash: c.key.Hash, CSRF: hex.EncodeToString(csrf), Expires: expires.Unix()}
	value, err := s.sealSession(sess)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	ck := s.sessionCookieFor(r, value)
	if req.Remember {
		ck.MaxAge = int(ttl / time.Second)
	}
	http.SetCookie(w, ck)
	w.Header().Set("Cache-Control", "no-store")
	writeJSON(w, http.StatusOK, sessionView{CSRF: sess.CSRF, ExpiresAt: expires.UTC(), Key: keyView(c.key)})
}

// deleteSession signs the UI out: the browser forgets the cookie. It
// needs no valid session (an expired one must be clearable too), but
// the same proof of origin as a sign-in, so no other site signs a user
// out. The sealed value stays valid until it expires: revoking the key
// ends every session of it.
func (s *Server) deleteSession(w http.ResponseWriter, r *http.Request) {
	if !s.fromUI(w, r, "signing out takes the "+csrfHeader+" header (the web UI sends it)") {
		return
	}
	ck := s.sessionCookieFor(r, "")
	ck.MaxAge = -1
	http.SetCookie(w, ck)
	w.WriteHeader(http.StatusNoContent)
}

// fromUI answers 403 unless r comes from the UI's own page: the same
// origin, and the CSRF header, whose absence is answered with noHeader.
// A sign-in or sign-out needs no session yet, but no other page may
// make one.
func (s *Server) fromUI(w http.ResponseWriter, r *http.Request, noHeader string) bool {
	msg := s.sameOrigin(r)
	if msg == "" && r.Header.Get(csrfHeader) == "" {
		msg = noHeader
	}
	if msg != "" {
		writeError(w, r, http.StatusForbidden, api.CodeForbidden, msg)
		return false
	}
	return true
}

func (s *Server) sessionCookieFor(r *http.Request, value string) *http.Cookie {
	return &http.Cookie{Name: sessionCookie, Value: value, Path: "/v1", HttpOnly: true, SameSite: http.SameSiteStrictMode,
		Secure: r.TLS != nil || strings.HasPrefix(s.cfg.BaseURL, "https:")}
}

func (s *Server) sealSession(sess sealedSession) (string, error) {
	a, err := s.aead()
	if err != nil {
		return "", fmt.Errorf("sealing a session: %w", err)
	}
	plain, _ := json.Marshal(sess)
	nonce := make([]byte, a.NonceSize())
	rand.Read(nonce)
	return base64.RawURLEncoding.EncodeToString(a.Seal(nonce, nonce, plain, []byte(sessionAD))), nil
}

// openSession unseals a cookie's value; false when it does not open
// (forged, damaged, sealed under another secret key) or has expired.
func (s *Server) openSession(value string) (sealedSession, bool) {
	var sess sealedSession
	a, err := s.aead()
	if err != nil || len(value) > 1024 {
		return sess, false
	}
	raw, err := base64.RawURLEncoding.DecodeString(value)
	if err != nil || len(raw) < a.NonceSize() {
		return sess, false
	}
	plain, err := a.Open(nil, raw[:a.NonceSize()], raw[a.NonceSize():], []byte(sessionAD))
	if err != nil || json.Unmarshal(plain, &sess) != nil || sess.KeyHash == "" || sess.CSRF == "" {
		return sess, false
	}
	return sess, time.Now().Unix() < sess.Expires
}

// errCrossOrigin marks a cookie refused for want of proof of origin.
var errCrossOrigin = errors.New("cross-origin")

// sessionCaller is the caller of a request authenticated by the UI's
// session cookie. ok is false when the request carries no session
// cookie (the caller falls back to the key's message); otherwise a nil
// caller comes with the status and message of the refusal.
func (s *Server) sessionCaller(r *http.Request) (c *caller, status int, msg string, ok bool, err error) {
	cookies := r.CookiesNamed(sessionCookie)
	if len(cookies) == 0 {
		return nil, 0, "", false, nil
	}
	ws := strings.EqualFold(r.Header.Get("Upgrade"), "websocket")
	token := r.Header.Get(csrfHeader)
	if token == "" && ws {
		token = r.URL.Query().Get(csrfQuery)
	}
	if m := s.sameOrigin(r); m != "" {
		return nil, http.StatusForbidden, m, true, nil
	}
	if ws && r.Header.Get("Origin") == "" {
		return nil, http.StatusForbidden, "a WebSocket signed in by cookie must come from the web UI's page (no Origin); scripts send their key in Authorization", true, nil
	}
	if token == "" {
		return nil, http.StatusForbidden, "the session cookie is accepted only with the " + csrfHeader + " header the web UI sends; scripts send their key in Authorization", true, nil
	}
	// Several cookies of the name: one may have been planted by a page
	// of a port's host name. The one with this page's token is ours.
	for _, ck := range cookies {
		sess, valid := s.openSession(ck.Value)
		if !valid || subtle.ConstantTimeCompare([]byte(sess.CSRF), []byte(token)) != 1 {
			continue
		}
		k, err := s.keyByHash(r.Context(), sess.KeyHash)
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil, http.StatusUnauthorized, "unknown or revoked API key; sign in again", true, nil
		}
		if err != nil {
			return nil, 0, "", true, err
		}
		return &caller{key: k, team: k.TeamID}, 0, "", true, nil
	}
	return nil, http.StatusUnauthorized, "your session has ended (or was started in another tab); sign in again", true, nil
}

// sameOrigin checks what a browser says of a request's origin: "" when
// it may be the web UI's own, else why not. Sec-Fetch-Site is sent by
// current browsers on every request; Origin on every cross-origin one,
// and on same-origin ones but GET and HEAD. A client that sends neither
// is no browser, so no victim of a forged request.
func (s *Server) sameOrigin(r *http.Request) string {
	switch site := r.Header.Get("Sec-Fetch-Site"); site {
	case "", "same-origin", "none":
	default:
		return fmt.Sprintf("a %s request may not use the web UI's session (Sec-Fetch-Site: %s)", site, site)
	}
	if o := r.Header.Get("Origin"); o != "" && !s.ownOrigin(r, o) {
		return fmt.Sprintf("a request from %.100s may not use the web UI's session", o)
	}
	return ""
}

// ownOrigin reports whether an Origin header names this server: the
// host the request was sent to, or the one of --url (a reverse proxy
// may rewrite Host). Sandbox pages served under /p/ have the opaque
// origin "null"; port host names are hosts of their own.
func (s *Server) ownOrigin(r *http.Request, origin string) bool {
	u, err := url.Parse(origin)
	if err != nil || u.Host == "" || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	host := hostPort(u.Scheme, u.Host)
	if b, err := url.Parse(s.cfg.BaseURL); err == nil && b.Host != "" && strings.EqualFold(host, hostPort(b.Scheme, b.Host)) {
		return true
	}
	return strings.EqualFold(host, hostPort(u.Scheme, r.Host))
}

// hostPort is host with its scheme's default port made explicit.
func hostPort(scheme, host string) string {
	if _, _, err := net.SplitHostPort(host); err == nil {
		return host
	}
	if scheme == "https" {
		return net.JoinHostPort(strings.Trim(host, "[]"), "443")
	}
	return net.JoinHostPort(strings.Trim(host, "[]"), "80")
}
