// Package proxy forwards requests from the server's front doors into
// sandboxes: to an exposed port (the ports proxy: /p/{id}/{port}/ and
// {port}-{id}.{domain}, and E2B's ports) through the sandbox's session,
// and to the sandbox's daemon (the /v1 guest routes, E2B's envd). It
// checks what lets a caller in where no API key does (a port's token),
// keeps every Cove credential out of what reaches a sandbox, keeps a
// sandbox's pages served on the UI's host from acting with its origin,
// and meters the bytes through (fleet's CountIn and CountOut).
package proxy

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

// Exposed ports. A team exposes a port of its sandbox with the API; the
// port is then reached through this server, by path
// (/p/{id}/{port}/...) or, when Config.Domain is set, by host name
// ({port}-{id}.{domain}). The proxy needs no API key: a browser or a
// webhook cannot send one. A public port is open to anyone with the URL;
// a private one needs its token, sent as the header X-Cove-Port-Token or
// the query parameter cove_token. A request with a right token gets a
// cookie (HttpOnly, SameSite=Lax, scoped to the port's path or host
// name) so a browser's later requests, which carry neither, work too.
// The token, whichever way it came, is taken out of the request before
// it reaches the app, so the app cannot leak it.
//
// A sandbox's page is the tenant's code, so it never runs with the web
// UI's origin. A host name {port}-{id}.{domain} is an origin of its own
// (the recommended form). The path form /p/{id}/{port}/ is on the UI's
// host, so every response of it carries Content-Security-Policy: sandbox
// without allow-same-origin: the page runs with an opaque origin, and
// cannot read the UI's storage or cookies, call /v1 as the user, or
// read another sandbox's pages; it cannot register a service worker
// either. Headers that would act on the whole origin (Clear-Site-Data,
// Strict-Transport-Security, Alt-Svc, reporting, ...) are dropped, and
// the app's cookies are kept to its own path prefix (onUIOrigin).
//
// No Cove credential reaches an app (stripCredentials): an
// Authorization, X-API-Key or any other header, query parameter or
// cookie carrying a Cove key, the UI's session cookie, the port token,
// E2B's traffic token and envd tokens (X-Access-Token) are taken out, on
// every route, HTTP and WebSocket alike. An app's own Authorization
// (one that is not a Cove key) passes: an app behind a port may have
// its own sign-in.
//
// Each proxied request dials the port afresh through the sandbox's
// daemon (Session.DialPort); no connection is pooled, so nothing stale
// outlives a stop, a resume or a delete. WebSocket and other Upgrade
// requests pass through: ReverseProxy hijacks the client's connection
// and copies both ways until either side closes.

// Proxy forwards requests into the sandboxes of a fleet.
type Proxy struct {
	Fleet *fleet.Fleet
	Log   *slog.Logger
	Errs  *web.Errors
	// BaseURL is how clients reach the server; Domain, when set, makes
	// ports reachable as {port}-{id}.{Domain}.
	BaseURL, Domain string
}

const (
	// portTokenHeader and portTokenQuery carry a private port's token.
	portTokenHeader = web.PortTokenHeader
	portTokenQuery  = web.PortTokenQuery
	// portCookie keeps the token in a browser after the first request.
	portCookie = web.PortCookie
	// sandboxCSP makes a sandbox's page served on the UI's origin run
	// with an opaque origin (no allow-same-origin), while scripts,
	// forms, popups, downloads and dialogs still work.
	sandboxCSP = "sandbox allow-scripts allow-forms allow-popups allow-popups-to-escape-sandbox allow-downloads " +
		"allow-modals allow-pointer-lock allow-presentation allow-orientation-lock"
)

// OriginWideHeaders are response headers that act on a whole origin
// (its storage, transport, reports, service workers), not on the
// response: an app served on the UI's origin may not send them.
var OriginWideHeaders = []string{"Clear-Site-Data", "Strict-Transport-Security", "Alt-Svc", "NEL", "Report-To",
	"Reporting-Endpoints", "Service-Worker-Allowed", "Accept-CH", "Critical-CH", "Origin-Agent-Cluster", "Expect-CT",
	"Public-Key-Pins", "Public-Key-Pins-Report-Only", "Set-Login", "Supports-Loading-Mode"}

// PortNumber reads the {port} path value: 1 to 65535.
func PortNumber(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != v {
		return 0, fmt.Errorf("port %q: give a TCP port number, 1 to 65535: %w", v, sandbox.ErrInvalid)
	}
	return n, nil
}

// uiOriginKey marks a request for a sandbox served on the UI's origin;
// its value is the path prefix the app's cookies are kept to.
type uiOriginKey struct{}

// OnUIOrigin sets the headers that keep a sandbox's response, whatever
// it is (the app's, or an error), from acting with the UI's origin, and
// marks r so the proxy guards the app's own headers (guardUIOrigin).
func OnUIOrigin(w http.ResponseWriter, r *http.Request, cookiePrefix string) *http.Request {
	h := w.Header()
	h.Set("Content-Security-Policy", sandboxCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	return r.WithContext(context.WithValue(r.Context(), uiOriginKey{}, cookiePrefix))
}

// guardUIOrigin edits an app's response served on the UI's origin:
// headers that act on the whole origin go, and cookies are kept to the
// app's path prefix on this host (no Domain), so none reaches the UI
// (and none is named as Cove's own).
func guardUIOrigin(resp *http.Response, prefix string) {
	for _, h := range OriginWideHeaders {
		resp.Header.Del(h)
	}
	lines := resp.Header.Values("Set-Cookie")
	resp.Header.Del("Set-Cookie")
	for _, line := range lines {
		ck, err := http.ParseSetCookie(line)
		if err != nil || ck.Name == web.SessionCookie || ck.Name == portCookie {
			continue
		}
		ck.Domain = ""
		if prefix != "" && strings.HasPrefix(ck.Path, "/") && ck.Path != prefix && !strings.HasPrefix(ck.Path, prefix+"/") {
			ck.Path = prefix + ck.Path
		}
		if v := ck.String(); v != "" {
			resp.Header.Add("Set-Cookie", v)
		}
	}
}

// PortHost parses "{port}-{id}.{domain}[:port]"; with no Domain,
// "{port}-{id}.localhost[:port]" (names under localhost are loopback's,
// so they reach only a server on the client's own machine).
func (p *Proxy) PortHost(host string) (id string, port int, ok bool) {
	domain := strings.ToLower(p.Domain)
	if domain == "" {
		domain = "localhost"
	}
	if h, _, err := net.SplitHostPort(domain); err == nil {
		domain = h
	}
	host = strings.ToLower(host)
	if h, _, err := net.SplitHostPort(host); err == nil {
		host = h
	}
	label, ok := strings.CutSuffix(strings.TrimSuffix(host, "."), "."+domain)
	if !ok || label == "" || strings.Contains(label, ".") {
		return "", 0, false
	}
	pn, id, ok := strings.Cut(label, "-")
	if !ok || id == "" {
		return "", 0, false
	}
	port, err := PortNumber(pn)
	if err != nil {
		return "", 0, false
	}
	return id, port, true
}

// Port checks that the port is exposed and the caller may reach it,
// then forwards the request to it with prefix taken off the path.
// cookiePath scopes the token cookie.
func (px *Proxy) Port(w http.ResponseWriter, r *http.Request, id string, port int, prefix, cookiePath string) {
	rec, err := px.Fleet.Find(r.Context(), id)
	if err != nil {
		px.Errs.Fail(w, r, sandbox.WrapID(id, err))
		return
	}
	px.PortOf(w, r, rec, port, prefix, cookiePath)
}

// PortOf is Port for a sandbox whose record the caller has just read
// (one store read per proxied request, not two).
func (px *Proxy) PortOf(w http.ResponseWriter, r *http.Request, rec store.Sandbox, port int, prefix, cookiePath string) {
	ctx, id := r.Context(), rec.ID
	p, err := px.Fleet.Port(ctx, id, port)
	if errors.Is(err, sandbox.ErrNotFound) {
		web.WriteError(w, r, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("port %d of sandbox %s is not exposed; expose it with POST /v1/sandboxes/{id}/ports/%d", port, id, port))
		return
	}
	if err != nil {
		px.Errs.Fail(w, r, err)
		return
	}
	fromCookie := false
	if !p.Public {
		var ok bool
		if ok, fromCookie = portTokenOK(r, p.Token); !ok {
			msg := fmt.Sprintf("port %d of sandbox %s is private: send its token as the %s header or the %s query parameter", port, id, portTokenHeader, portTokenQuery)
			if portTokenGiven(r) {
				msg = fmt.Sprintf("wrong token for port %d of sandbox %s; POST /v1/sandboxes/{id}/ports/%d shows the right one", port, id, port)
			}
			web.WriteError(w, r, http.StatusForbidden, api.CodeForbidden, msg)
			return
		}
	}
	if rec.State != store.StateRunning {
		web.WriteError(w, r, http.StatusConflict, api.CodeState,
			fmt.Sprintf("sandbox %s is stopped; resume it first (POST /v1/sandboxes/{id}/resume)", id))
		return
	}
	sess, err := px.Fleet.LiveSession(ctx, rec)
	if err != nil {
		px.Errs.Fail(w, r, sandbox.WrapID(id, err))
		return
	}
	if !p.Public && !fromCookie {
		http.SetCookie(w, &http.Cookie{Name: portCookie, Value: p.Token, Path: cookiePath, HttpOnly: true,
			Secure: r.TLS != nil || strings.HasPrefix(px.BaseURL, "https:"), SameSite: http.SameSiteLaxMode})
	}
	px.Forward(w, r, rec, sess, port, prefix, func(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
		web.WriteError(w, r, status, code, msg)
	})
}

// Forward proxies a request to a port inside a running sandbox,
// dialed through its session, with prefix taken off the path; the
// caller has checked that it may. Failures are answered through
// portErr with a status, a Cove error code and a message.
func (px *Proxy) Forward(w http.ResponseWriter, r *http.Request, rec store.Sandbox, sess sandbox.Session, port int, prefix string,
	portErr func(w http.ResponseWriter, r *http.Request, status int, code, msg string)) {
	id := rec.ID
	end := px.Fleet.Begin(id)
	defer end()
	// dialErr keeps the cause of a failed dial: the transport's wrapping
	// does not always keep the sentinel. The dial may run on another
	// goroutine than the error handler.
	var dialErr atomic.Pointer[error]
	rp := &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host = "http", net.JoinHostPort("127.0.0.1", strconv.Itoa(port))
			if prefix != "" {
				out.URL.Path = "/" + strings.TrimPrefix(strings.TrimPrefix(pr.In.URL.Path, prefix), "/")
				out.URL.RawPath = ""
				if raw := pr.In.URL.RawPath; raw != "" {
					out.URL.RawPath = "/" + strings.TrimPrefix(strings.TrimPrefix(raw, prefix), "/")
				}
				out.Header.Set("X-Forwarded-Prefix", prefix)
			}
			// The app sees the host name the client used (as most
			// proxies do), and never a Cove credential.
			out.Host = pr.In.Host
			StripCredentials(out)
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := sess.DialPort(ctx, port)
				if err != nil {
					dialErr.Store(&err)
					return nil, err
				}
				return &countedConn{Conn: c, f: px.Fleet, id: id}, nil
			},
			DisableKeepAlives: true,
		},
		// Stream as the app writes: server-sent events, long polls.
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			if p, ok := r.Context().Value(uiOriginKey{}).(string); ok {
				guardUIOrigin(resp, p)
			}
			return nil
		},
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if errors.Is(err, context.Canceled) && r.Context().Err() != nil {
				return // the client left
			}
			var derr error
			if e := dialErr.Load(); e != nil {
				derr = *e
			}
			switch {
			case errors.Is(derr, sandbox.ErrUnavailable):
				portErr(w, r, http.StatusBadGateway, api.CodeUpstream,
					fmt.Sprintf("nothing is listening on port %d inside sandbox %s; start the server there, bound to 0.0.0.0 or 127.0.0.1", port, id))
			case errors.Is(derr, sandbox.ErrState):
				// The runtime stopped it (its own TTL) before the
				// lifecycle loop recorded so.
				portErr(w, r, http.StatusConflict, api.CodeState,
					fmt.Sprintf("sandbox %s is stopped; resume it first (POST /v1/sandboxes/{id}/resume)", id))
			case derr != nil:
				px.Log.Warn("dialing a sandbox port", "request_id", web.RequestID(r), "sandbox", id, "port", port, "err", derr)
				portErr(w, r, http.StatusBadGateway, api.CodeUpstream,
					fmt.Sprintf("could not reach port %d inside sandbox %s; quote request id %s", port, id, web.RequestID(r)))
			default:
				px.Log.Info("proxying to a sandbox port", "request_id", web.RequestID(r), "sandbox", id, "port", port, "err", err)
				portErr(w, r, http.StatusBadGateway, api.CodeUpstream,
					fmt.Sprintf("the app on port %d inside sandbox %s did not give a valid HTTP response", port, id))
			}
		},
	}
	rp.ServeHTTP(w, r)
}

// portTokenOK reports whether r carries token (header, query or one of
// its cookies), and whether it came in a cookie.
func portTokenOK(r *http.Request, token string) (ok, fromCookie bool) {
	if token == "" {
		return false, false
	}
	eq := func(v string) bool { return guest.TokenEqual(v, token) }
	if eq(r.Header.Get(portTokenHeader)) || eq(r.URL.Query().Get(portTokenQuery)) {
		return true, false
	}
	for _, c := range r.CookiesNamed(portCookie) {
		if eq(c.Value) {
			return true, true
		}
	}
	return false, false
}

func portTokenGiven(r *http.Request) bool {
	return r.Header.Get(portTokenHeader) != "" || r.URL.Query().Has(portTokenQuery) || len(r.CookiesNamed(portCookie)) > 0
}

// coveKey matches a Cove API key's secret (NewKeySecret's two forms) in
// a header or a cookie; wholeKey matches a query parameter that is one.
var (
	coveKey  = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`\b(?:cove_[0-9a-f]{48}|e2b_[0-9a-f]{40})\b`) })
	wholeKey = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^(?:cove_[0-9a-f]{48}|e2b_[0-9a-f]{40})$`) })
)

// StripCredentials takes every Cove credential out of a request to an
// app: the port's token (header, query parameter, cookie), the UI's
// session cookie and CSRF header, E2B's traffic token, an envd token
// (X-Access-Token, envd's header: apps cannot have it), and any
// header, query parameter or cookie that carries a Cove key (Basic
// credentials decoded). The query and the cookies are edited as text so
// the rest of them reach the app byte for byte; an Authorization that
// is not a Cove key is the app's and passes.
func StripCredentials(out *http.Request) {
	out.Header.Del(portTokenHeader)
	out.Header.Del(web.E2BTrafficTokenHeader)
	out.Header.Del(web.CSRFHeader)
	// envd's token header (and the daemon's): whichever sandbox's token
	// it carries, it is not the app's.
	out.Header.Del(guest.AccessTokenHeader)
	for name, vs := range out.Header {
		if name == "Cookie" {
			continue
		}
		for _, v := range vs {
			if coveKey().MatchString(v) || basicCarriesKey(v) {
				out.Header.Del(name)
				break
			}
		}
	}
	if q := out.URL.RawQuery; strings.Contains(q, portTokenQuery) || strings.Contains(q, "cove_") || strings.Contains(q, "e2b_") {
		out.URL.RawQuery = dropParts(q, "&", func(part string) bool {
			k, v, _ := strings.Cut(part, "=")
			k, err := url.QueryUnescape(k)
			if err == nil && k == portTokenQuery {
				return true
			}
			v, err = url.QueryUnescape(v)
			return err == nil && wholeKey().MatchString(v)
		})
	}
	if cs := out.Header.Values("Cookie"); len(cs) > 0 {
		out.Header.Del("Cookie")
		for _, c := range cs {
			c = dropParts(c, ";", func(part string) bool {
				name, value, _ := strings.Cut(part, "=")
				name = strings.TrimSpace(name)
				return name == portCookie || name == web.SessionCookie || coveKey().MatchString(value)
			})
			if strings.TrimSpace(c) != "" {
				out.Header.Add("Cookie", strings.TrimSpace(c))
			}
		}
	}
}

// basicCarriesKey reports whether v is Basic credentials with a Cove key
// as the user name or password.
func basicCarriesKey(v string) bool {
	scheme, cred, ok := strings.Cut(strings.TrimSpace(v), " ")
	if !ok || !strings.EqualFold(scheme, "Basic") {
		return false
	}
	b, err := base64.StdEncoding.DecodeString(strings.TrimSpace(cred))
	return err == nil && coveKey().Match(b)
}

// dropParts splits s on sep and joins again the parts drop refuses.
func dropParts(s, sep string, drop func(string) bool) string {
	parts := strings.Split(s, sep)
	kept := parts[:0]
	for _, p := range parts {
		if !drop(p) {
			kept = append(kept, p)
		}
	}
	return strings.Join(kept, sep)
}

// countedConn meters the bytes of a proxied connection: written to the
// sandbox is in, read from it is out.
type countedConn struct {
	net.Conn
	f  *fleet.Fleet
	id string
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.f.CountOut(c.id, int64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.f.CountIn(c.id, int64(n))
	return n, err
}

func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
