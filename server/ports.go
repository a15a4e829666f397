package server

import (
	"bytes"
	"cmp"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/server/e2b"
	"github.com/cove-sandbox/cove/server/internal/proxy"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

// Exposed ports: the /v1 routes that expose them, and the routes of the
// proxy to them (server/internal/proxy says who may reach what).

// The names of the port's credentials (tests use these).
const (
	portTokenHeader = web.PortTokenHeader
	portCookie      = web.PortCookie
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
func portNumber(v string) (int, error) { return proxy.PortNumber(v) }

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
	p, created, err := s.fleet.ExposePort(r.Context(), c.team, r.PathValue("id"), port, req.Public)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	status := http.StatusOK
	if created {
		status = http.StatusCreated
	}
	writeJSON(w, status, s.portView(p))
}

// listPorts lists the exposed ports of the caller's sandbox, tokens
// included: whoever holds the team's API key may reach them anyway.
func (s *Server) listPorts(w http.ResponseWriter, r *http.Request, c *caller) {
	ports, err := s.fleet.Ports(r.Context(), c.team, r.PathValue("id"))
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
	if err := s.fleet.UnexposePort(r.Context(), c.team, r.PathValue("id"), port); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// servePortByPath proxies /p/{id}/{port}/{rest...} to /{rest...}, on
// the UI's origin: sandboxed.
func (s *Server) servePortByPath(w http.ResponseWriter, r *http.Request) {
	id, portStr := r.PathValue("id"), r.PathValue("port")
	prefix := "/p/" + id + "/" + portStr
	r = proxy.OnUIOrigin(w, r, prefix)
	port, err := portNumber(portStr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if r.Header.Get("Service-Worker") != "" {
		// Belt and braces: an opaque origin cannot register one.
		writeError(w, r, http.StatusForbidden, api.CodeForbidden,
			"a service worker cannot be registered under /p/; serve the app on its own host name (cove serve --domain)")
		return
	}
	s.proxy.Port(w, r, id, port, prefix, prefix+"/")
}

// servePortByHost proxies requests for {port}-{id}.{domain}; false when
// the request is not for a port (no domain is set, or the host name is
// the domain itself or a name not of that form), so the API serves it.
func (s *Server) servePortByHost(w http.ResponseWriter, r *http.Request) bool {
	id, port, ok := s.proxy.PortHost(r.Host)
	if !ok {
		return false
	}
	// A bounded route label for metrics, as the mux sets for the rest.
	r.Pattern = "{port}-{id}." + cmp.Or(s.cfg.Domain, e2b.LocalDomain)
	// envd's port, and every port of sandboxes made through the E2B API,
	// follow E2B's rules (server/e2b); the rest Cove's.
	s.e2b.ServeByHost(w, r, id, port)
	return true
}
