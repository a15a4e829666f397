package server

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/api"
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
// Each proxied request dials the port afresh through the sandbox's
// daemon (Session.DialPort); no connection is pooled, so nothing stale
// outlives a stop, a resume or a delete. WebSocket and other Upgrade
// requests pass through: ReverseProxy hijacks the client's connection
// and copies both ways until either side closes.

const (
	// portTokenHeader and portTokenQuery carry a private port's token.
	portTokenHeader = "X-Cove-Port-Token"
	portTokenQuery  = "cove_token"
	// portCookie keeps the token in a browser after the first request.
	portCookie = "cove_port_token"
)

func (s *Server) portRoutes() {
	s.handle("POST /v1/sandboxes/{id}/ports/{port}", s.exposePort)
	s.handle("GET /v1/sandboxes/{id}/ports", s.listPorts)
	s.handle("DELETE /v1/sandboxes/{id}/ports/{port}", s.unexposePort)
	// Any method: the proxy passes them all on. The mux redirects
	// /p/{id}/{port} to /p/{id}/{port}/ so an app's relative links work.
	s.route("/p/{id}/{port}/{rest...}", http.HandlerFunc(s.servePortByPath))
}

// portNumber reads the {port} path value: 1 to 65535.
func portNumber(v string) (int, error) {
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > 65535 || strconv.Itoa(n) != v {
		return 0, invalid("port %q: give a TCP port number, 1 to 65535", v)
	}
	return n, nil
}

// portView is the API's description of an exposed port with its URLs.
func (s *Server) portView(p store.Port) api.Port {
	v := api.Port{Port: p.Port, Public: p.Public, Token: p.Token,
		PathURL: fmt.Sprintf("%s/p/%s/%d/", s.cfg.BaseURL, p.SandboxID, p.Port)}
	if s.cfg.Domain != "" {
		// The host form is served by this same server: same scheme, and
		// the same port unless the domain names its own.
		scheme, hostPort := "http", ""
		if u, err := url.Parse(s.cfg.BaseURL); err == nil {
			if u.Scheme != "" {
				scheme = u.Scheme
			}
			hostPort = u.Port()
		}
		host := fmt.Sprintf("%d-%s.%s", p.Port, p.SandboxID, s.cfg.Domain)
		if hostPort != "" && !strings.Contains(s.cfg.Domain, ":") {
			host = net.JoinHostPort(host, hostPort)
		}
		v.URL = scheme + "://" + host + "/"
	}
	return v
}

// exposePort exposes a port of the caller's sandbox (running or not:
// the proxy answers 409 while it is stopped). The body is optional;
// without one the port is private. Exposing an exposed port again keeps
// its token, so links already handed out go on working; making it
// public drops the token, and making it private again mints a new one.
func (s *Server) exposePort(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.ExposePort
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if len(bytes.TrimSpace(data)) > 0 {
		r.Body = io.NopCloser(bytes.NewReader(data))
		if !s.decode(w, r, &req) {
			return
		}
	}
	port, err := portNumber(r.PathValue("port"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	p := store.Port{SandboxID: rec.ID, Port: port, Public: req.Public, CreatedAt: s.cfg.Now()}
	status := http.StatusCreated
	old, err := s.cfg.Store.GetPort(r.Context(), rec.ID, port)
	switch {
	case err == nil:
		status, p.CreatedAt = http.StatusOK, old.CreatedAt
		p.Token = old.Token
	case !errors.Is(err, sandbox.ErrNotFound):
		s.fail(w, r, err)
		return
	}
	switch {
	case p.Public:
		p.Token = ""
	case p.Token == "":
		p.Token = newPortToken()
	}
	if err := s.cfg.Store.PutPort(r.Context(), p); err != nil {
		s.fail(w, r, fmt.Errorf("exposing port %d of sandbox %s: %w", port, rec.ID, err))
		return
	}
	writeJSON(w, status, s.portView(p))
}

// newPortToken returns 128 random bits, hex.
func newPortToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// listPorts lists the exposed ports of the caller's sandbox, tokens
// included: whoever holds the team's API key may reach them anyway.
func (s *Server) listPorts(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	ports, err := s.cfg.Store.ListPorts(r.Context(), rec.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := make([]api.Port, 0, len(ports))
	for _, p := range ports {
		out = append(out, s.portView(p))
	}
	writeJSON(w, http.StatusOK, map[string]any{"ports": out})
}

// unexposePort stops exposing a port. Connections already open through
// the proxy are not cut.
func (s *Server) unexposePort(w http.ResponseWriter, r *http.Request, c *caller) {
	port, err := portNumber(r.PathValue("port"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	if err := s.cfg.Store.DeletePort(r.Context(), rec.ID, port); err != nil {
		s.fail(w, r, fmt.Errorf("port %d of sandbox %s is not exposed: %w", port, rec.ID, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// servePortByPath proxies /p/{id}/{port}/{rest...} to /{rest...}.
func (s *Server) servePortByPath(w http.ResponseWriter, r *http.Request) {
	id, portStr := r.PathValue("id"), r.PathValue("port")
	port, err := portNumber(portStr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	prefix := "/p/" + id + "/" + portStr
	s.proxyPort(w, r, id, port, prefix, prefix+"/")
}

// servePortByHost proxies requests for {port}-{id}.{domain}; false when
// the request is not for a port (no domain is set, or the host name is
// the domain itself or a name not of that form), so the API serves it.
func (s *Server) servePortByHost(w http.ResponseWriter, r *http.Request) bool {
	id, port, ok := s.portHost(r.Host)
	if !ok {
		return false
	}
	// A bounded route label for metrics, as the mux sets for the rest.
	r.Pattern = "{port}-{id}." + s.cfg.Domain
	// envd's port, and every port of sandboxes made through the E2B API,
	// follow E2B's rules (e2b_envd.go).
	if s.serveE2BByHost(w, r, id, port) {
		return true
	}
	s.proxyPort(w, r, id, port, "", "/")
	return true
}

// portHost parses "{port}-{id}.{domain}[:port]".
func (s *Server) portHost(host string) (id string, port int, ok bool) {
	if s.cfg.Domain == "" {
		return "", 0, false
	}
	domain := strings.ToLower(s.cfg.Domain)
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
	p, id, ok := strings.Cut(label, "-")
	if !ok || id == "" {
		return "", 0, false
	}
	port, err := portNumber(p)
	if err != nil {
		return "", 0, false
	}
	return id, port, true
}

// proxyPort checks that the port is exposed and the caller may reach it,
// then forwards the request to it with prefix taken off the path.
// cookiePath scopes the token cookie.
func (s *Server) proxyPort(w http.ResponseWriter, r *http.Request, id string, port int, prefix, cookiePath string) {
	ctx := r.Context()
	rec, err := s.cfg.Store.GetSandbox(ctx, "", id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("sandbox %q: %w", id, err))
		return
	}
	p, err := s.cfg.Store.GetPort(ctx, id, port)
	if errors.Is(err, sandbox.ErrNotFound) {
		writeError(w, r, http.StatusNotFound, api.CodeNotFound,
			fmt.Sprintf("port %d of sandbox %s is not exposed; expose it with POST /v1/sandboxes/%s/ports/%d", port, id, id, port))
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fromCookie := false
	if !p.Public {
		var ok bool
		if ok, fromCookie = portTokenOK(r, p.Token); !ok {
			msg := fmt.Sprintf("port %d of sandbox %s is private: send its token as the %s header or the %s query parameter", port, id, portTokenHeader, portTokenQuery)
			if portTokenGiven(r) {
				msg = fmt.Sprintf("wrong token for port %d of sandbox %s; POST /v1/sandboxes/%s/ports/%d shows the right one", port, id, id, port)
			}
			writeError(w, r, http.StatusForbidden, api.CodeForbidden, msg)
			return
		}
	}
	if rec.State != store.StateRunning {
		writeError(w, r, http.StatusConflict, api.CodeState,
			fmt.Sprintf("sandbox %s is stopped; resume it first (POST /v1/sandboxes/%s/resume)", id, id))
		return
	}
	sess, err := s.runtimeSession(ctx, rec)
	if err != nil {
		s.fail(w, r, fmt.Errorf("sandbox %s: %w", id, err))
		return
	}
	if !p.Public && !fromCookie {
		http.SetCookie(w, &http.Cookie{Name: portCookie, Value: p.Token, Path: cookiePath, HttpOnly: true,
			Secure: r.TLS != nil || strings.HasPrefix(s.cfg.BaseURL, "https:"), SameSite: http.SameSiteLaxMode})
	}
	s.forwardPort(w, r, id, sess, port, prefix, func(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
		writeError(w, r, status, code, msg)
	})
}

// forwardPort proxies a request to a port inside a running sandbox,
// dialed through its session, with prefix taken off the path; the
// caller has checked that it may. Failures are answered through
// portErr with a status, a Cove error code and a message.
func (s *Server) forwardPort(w http.ResponseWriter, r *http.Request, id string, sess sandbox.Session, port int, prefix string,
	portErr func(w http.ResponseWriter, r *http.Request, status int, code, msg string)) {
	end := s.begin(id)
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
			// proxies do), and never the port's token.
			out.Host = pr.In.Host
			stripPortToken(out)
			pr.SetXForwarded()
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				c, err := sess.DialPort(ctx, port)
				if err != nil {
					dialErr.Store(&err)
					return nil, err
				}
				return &countedConn{Conn: c, s: s, id: id}, nil
			},
			DisableKeepAlives: true,
		},
		// Stream as the app writes: server-sent events, long polls.
		FlushInterval: -1,
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
					fmt.Sprintf("sandbox %s is stopped; resume it first (POST /v1/sandboxes/%s/resume)", id, id))
			case derr != nil:
				s.log.Warn("dialing a sandbox port", "request_id", requestID(r), "sandbox", id, "port", port, "err", derr)
				portErr(w, r, http.StatusBadGateway, api.CodeUpstream,
					fmt.Sprintf("could not reach port %d inside sandbox %s; quote request id %s", port, id, requestID(r)))
			default:
				s.log.Info("proxying to a sandbox port", "request_id", requestID(r), "sandbox", id, "port", port, "err", err)
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
	eq := func(v string) bool { return subtle.ConstantTimeCompare([]byte(v), []byte(token)) == 1 }
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

// stripPortToken takes the token's header, query parameter and cookie
// out of a request to an app. The query and the cookies are edited as
// text so the rest of them reach the app byte for byte.
func stripPortToken(out *http.Request) {
	out.Header.Del(portTokenHeader)
	if strings.Contains(out.URL.RawQuery, portTokenQuery) {
		out.URL.RawQuery = dropParts(out.URL.RawQuery, "&", func(part string) bool {
			k, _, _ := strings.Cut(part, "=")
			k, err := url.QueryUnescape(k)
			return err == nil && k == portTokenQuery
		})
	}
	if cs := out.Header.Values("Cookie"); len(cs) > 0 {
		out.Header.Del("Cookie")
		for _, c := range cs {
			c = dropParts(c, ";", func(part string) bool {
				name, _, _ := strings.Cut(part, "=")
				return strings.TrimSpace(name) == portCookie
			})
			if strings.TrimSpace(c) != "" {
				out.Header.Add("Cookie", strings.TrimSpace(c))
			}
		}
	}
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
	s  *Server
	id string
}

func (c *countedConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.s.countOut(c.id, int64(n))
	return n, err
}

func (c *countedConn) Write(p []byte) (int, error) {
	n, err := c.Conn.Write(p)
	c.s.countIn(c.id, int64(n))
	return n, err
}

func (c *countedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
