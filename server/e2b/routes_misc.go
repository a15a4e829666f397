package e2b

import (
	"fmt"
	"net"
	"net/http"
	"slices"
	"strings"
)

// The network default, the domain sandboxes' hosts are under, and the
// answer to routes the E2B API does not have.

// The values of Config.Network (`cove serve --e2b-network`).
const (
	NetworkInternet = "internet"
	NetworkNone     = "none"
)

// LocalDomain is the domain of sandboxes' host names when the server has
// no --domain: {port}-{id}.localhost:PORT. Names under localhost are the
// loopback address by RFC 6761; browsers and curl resolve them without
// DNS, as glibc does with nss-myhostname (Debian: libnss-myhostname).
// The proxy routes them (proxy.PortHost) whatever port they come with.
const LocalDomain = "localhost"

// domain is the domain sandboxes' host names are under, for the SDK to
// build envd's and ports' URLs with (getHost). Never nil: without a
// configured one, LocalDomain with the port the request came to, so
// {port}-{id}.localhost:PORT reaches this server from its own machine.
func (s *API) domain(r *http.Request) *string {
	d := s.cfg.Domain
	if d == "" {
		d = localDomain(r)
	}
	return &d
}

// localDomain is LocalDomain with the port of the request's Host, or the
// scheme's when it names none: plain HTTP's is written out, as a client
// (the Agents SDK's resolve_exposed_port) takes a host with no port for
// HTTPS on 443.
func localDomain(r *http.Request) string {
	if _, port, err := net.SplitHostPort(r.Host); err == nil && port != "" {
		return LocalDomain + ":" + port
	}
	if r.TLS != nil {
		return LocalDomain
	}
	return LocalDomain + ":80"
}

// e2bPrefixes are the first segments of E2B's API paths: a request under
// one that no route serves gets E2B's error body.
var e2bPrefixes = []string{"sandboxes", "v2", "v3", "templates", "snapshots", "teams", "volumes", "secrets", "access-tokens", "api-keys", "nodes"}

// ServeUnrouted answers a request for the E2B API (a path under one of
// E2B's prefixes, or an e2b_ key in X-API-Key anywhere but under /v1, /ui
// and /p) that no route of the server serves, routed says, with E2B's
// JSON error body: E2B's SDKs cannot read the mux's plain-text 404 (the
// Python SDK fails on it). false for the rest, which keep their answers.
// routed is asked only about E2B's requests, so no other pays for it.
func (s *API) ServeUnrouted(w http.ResponseWriter, r *http.Request, keyPrefix string, routed func(*http.Request) bool) bool {
	first, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
	switch {
	case first == "v1" || first == "ui" || first == "p":
		return false
	case !slices.Contains(e2bPrefixes, first) && !strings.HasPrefix(r.Header.Get("X-API-Key"), keyPrefix):
		return false
	case routed(r):
		return false
	}
	var allowed []string
	for _, m := range []string{http.MethodGet, http.MethodPost, http.MethodPut, http.MethodPatch, http.MethodDelete} {
		probe := r.Clone(r.Context())
		probe.Method = m
		if m != r.Method && routed(probe) {
			allowed = append(allowed, m)
		}
	}
	if len(allowed) > 0 {
		w.Header().Set("Allow", strings.Join(allowed, ", "))
		writeError(w, http.StatusMethodNotAllowed, fmt.Sprintf("%s %s: this route takes %s", r.Method, r.URL.Path, strings.Join(allowed, " or ")))
		return true
	}
	writeError(w, http.StatusNotFound, fmt.Sprintf("%s %s is not a route of this server's E2B API (Cove serves E2B's sandboxes, snapshots, forks and envd; see the README's E2B section for what is supported)", r.Method, r.URL.Path))
	return true
}
