package e2b

import (
	"crypto/sha256"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/proxy"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

// Traffic to E2B sandboxes: envd (port 49983) and the apps' ports. The
// SDK addresses a sandbox by host name, {port}-{id}.{domain} (with the
// server's --domain and wildcard DNS and TLS), or, when E2B_SANDBOX_URL
// points at this server, by the E2b-Sandbox-Id and E2b-Sandbox-Port
// headers. Either way:
//
//   - envd is the sandbox's own daemon, which speaks envd's protocol. The
//     SDK proves itself with the sandbox's envd access token in
//     X-Access-Token (or, for /files, a URL signed with it); the proxy
//     checks it and swaps in the daemon's own token, which never leaves
//     the server. /health needs no token, as envd's; /init is the control
//     plane's, as E2B's proxy keeps it.
//   - Any other port of a sandbox made through the E2B API is reached
//     with no expose step, as E2B's are, and with its traffic access
//     token (e2b-traffic-access-token) when it was made with
//     network.allowPublicTraffic false. Ports of sandboxes made through
//     /v1 keep Cove's rules (server/internal/proxy).
//
// A paused sandbox made with autoResume is resumed by the first such
// request that is let in (autoresume.go); one without answers as below.
//
// Errors are E2B's proxy's: a sandbox that is unknown, gone or paused is
// a 502 (the SDK raises TimeoutError, as against E2B), a wrong token a
// 401 for envd and a 403 for ports. Connect RPC requests get Connect's
// error body, so the SDK's Connect client reads the code.

// Workdir is the home and working directory of sandboxes made through
// the E2B API, as on E2B's base template: relative paths of envd calls
// and commands run without a cwd start there.
const Workdir = "/home/user"

const (
	SandboxIDHeader    = "E2b-Sandbox-Id"
	SandboxPortHeader  = "E2b-Sandbox-Port"
	trafficTokenHeader = web.E2BTrafficTokenHeader
	// metadataHeaderPrefix starts the headers of file metadata, which
	// Cove's daemon does not keep.
	metadataHeaderPrefix = "X-Metadata-"
)

// ServeByHeader serves a request that names its sandbox in the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers; false when it names none.
func (s *API) ServeByHeader(w http.ResponseWriter, r *http.Request) bool {
	id, p := r.Header.Get(SandboxIDHeader), r.Header.Get(SandboxPortHeader)
	if id == "" && p == "" {
		return false
	}
	r.Pattern = SandboxIDHeader // a bounded route label for metrics
	// Served on the UI's host, as /p/ is: sandboxed (proxy.OnUIOrigin). A
	// browser cannot navigate with these headers, but a page's fetch
	// could be made to.
	r = proxy.OnUIOrigin(w, r, "")
	if id == "" || p == "" {
		writeProxyError(w, r, http.StatusBadRequest, id, 0, "missing header: send both E2b-Sandbox-Id and E2b-Sandbox-Port")
		return true
	}
	port, err := proxy.PortNumber(p)
	if err != nil {
		writeProxyError(w, r, http.StatusBadRequest, id, 0, fmt.Sprintf("E2b-Sandbox-Port %q: give a TCP port number, 1 to 65535", p))
		return true
	}
	s.serveTraffic(w, r, id, port)
	return true
}

// ServeByHost serves {port}-{id}.{domain}: with E2B's rules for envd's
// port and the other ports of sandboxes made through the E2B API, with
// Cove's exposed ports' (server/internal/proxy) for the rest.
func (s *API) ServeByHost(w http.ResponseWriter, r *http.Request, id string, port int) {
	rec, err := s.fleet.Find(r.Context(), id)
	if port != envdPort && (err != nil || rec.Spec.Labels[madeLabel] == "") {
		if err != nil {
			s.cfg.Errs.Fail(w, r, sandbox.WrapID(id, err))
			return
		}
		s.proxy.PortOf(w, r, rec, port, "", "/")
		return
	}
	s.serveFound(w, r, id, port, rec, err)
}

func (s *API) serveTraffic(w http.ResponseWriter, r *http.Request, id string, port int) {
	rec, err := s.fleet.Find(r.Context(), id)
	s.serveFound(w, r, id, port, rec, err)
}

// serveFound serves traffic to sandbox id, whose record (or the error
// reading it) the caller has read.
func (s *API) serveFound(w http.ResponseWriter, r *http.Request, id string, port int, rec store.Sandbox, err error) {
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		status, _, msg := s.cfg.Errs.Failure(r, sandbox.WrapIDf(id, err, "reading sandbox %s", id))
		writeProxyError(w, r, status, id, port, msg)
		return
	}
	if err != nil || s.gone(rec) {
		writeProxyError(w, r, http.StatusBadGateway, id, port, fmt.Sprintf("The sandbox %s was not found: it was killed, its timeout passed, or the id is wrong", id))
		return
	}
	switch {
	case port == envdPort:
		s.serveEnvd(w, r, rec)
	case rec.Spec.Labels[madeLabel] == "":
		// A /v1 sandbox reached by header: Cove's exposed ports.
		s.proxy.PortOf(w, r, rec, port, "", "/")
	default:
		s.servePort(w, r, rec, port)
	}
}

// paused answers a request to a paused sandbox.
func pausedError(w http.ResponseWriter, r *http.Request, rec store.Sandbox, port int) {
	writeProxyError(w, r, http.StatusBadGateway, rec.ID, port,
		fmt.Sprintf("The sandbox %s is paused; resume it with Sandbox.connect", rec.ID))
}

// serveEnvd checks a request's right to a sandbox's envd and passes it
// to the sandbox's daemon.
func (s *API) serveEnvd(w http.ResponseWriter, r *http.Request, rec store.Sandbox) {
	paused := s.paused(rec)
	if paused && !autoResumes(rec) {
		pausedError(w, r, rec, envdPort)
		return
	}
	if !envdAllowed(w, r, rec, paused) {
		return
	}
	path := r.URL.Path
	if paused {
		var ok bool
		if rec, ok = s.resumeFor(w, r, rec, envdPort); !ok {
			return
		}
	}
	sess, err := s.fleet.LiveSession(r.Context(), rec)
	if err != nil {
		s.log.Warn("getting a sandbox's session", "request_id", web.RequestID(r), "sandbox", rec.ID, "err", err)
		writeProxyError(w, r, http.StatusBadGateway, rec.ID, envdPort, fmt.Sprintf("The sandbox %s is not reachable; retry, or connect to it again", rec.ID))
		return
	}
	dial, daemonToken, ok := proxy.DaemonEndpoint(sess)
	if !ok {
		writeProxyError(w, r, http.StatusNotImplemented, rec.ID, envdPort,
			"this server's runtime does not reach its sandboxes' daemons directly, so it cannot serve envd")
		return
	}
	end := s.fleet.Begin(rec.ID) // activity while the request lasts
	defer end()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)
	}
	id := rec.ID
	made := rec.Spec.Labels[madeLabel] != ""
	rp := s.proxy.Daemon(id, dial, daemonToken, func(out, _ *http.Request) {
		out.Header.Del(SandboxIDHeader)
		out.Header.Del(SandboxPortHeader)
		out.Header.Del(trafficTokenHeader)
		out.Header.Del(guest.WorkdirHeader)
		out.Header.Del(guest.SudoHeader)
		if made {
			// E2B's default workdir: relative paths and commands without
			// a cwd are in /home/user; and user has sudo, as on E2B's
			// base template. /v1 sandboxes keep their workspace, and no
			// sudo.
			out.Header.Set(guest.WorkdirHeader, Workdir)
			out.Header.Set(guest.SudoHeader, "user")
		}
	}, func(w http.ResponseWriter, r *http.Request, err error) {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeProxyError(w, r, http.StatusRequestEntityTooLarge, id, envdPort, fmt.Sprintf("the request body is over %d bytes", mbe.Limit))
			return
		}
		writeProxyError(w, r, http.StatusBadGateway, id, envdPort,
			fmt.Sprintf("The sandbox %s did not answer: it may have stopped (its timeout) (request id %s)", id, web.RequestID(r)))
	})
	if r.Method == http.MethodGet && path == "/files" {
		// A download has no length when gzipped, so the proxy flushes
		// each read of it, a few KB: Node's HTTP/1.1 client (the SDK's
		// over E2B_SANDBOX_URL) spends milliseconds on each chunk, 37 s
		// on 50 MB. Reads are filled to 1 MiB instead: 2.4 s.
		rp.ModifyResponse = func(resp *http.Response) error {
			resp.Body = fullReads{resp.Body}
			return nil
		}
		rp.BufferPool = downloadBuffers
	}
	rp.ServeHTTP(w, r)
}

// envdAllowed answers (and returns false) a request to envd that may not
// go through: /init, a sandbox with no token yet, a missing or wrong
// token (or /files signature), file metadata, and /health of a paused
// sandbox without the token that would resume it.
func envdAllowed(w http.ResponseWriter, r *http.Request, rec store.Sandbox, paused bool) bool {
	token := rec.Spec.Labels[envdTokenLabel]
	path := r.URL.Path
	switch {
	case r.Method == http.MethodGet && path == "/health":
		// Open to anyone while running, as envd's; only the token's
		// holder resumes a paused sandbox with it (the SDK's isRunning
		// sends it, and resumes it on E2B too).
		if paused && (token == "" || !guest.HasAccessToken(r.Header, token)) {
			pausedError(w, r, rec, envdPort)
			return false
		}
	case path == "/init":
		writeProxyError(w, r, http.StatusForbidden, rec.ID, envdPort,
			"/init is the control plane's, not reachable from outside; give environment variables as envs to Sandbox.create or to each command")
		return false
	case token == "":
		writeProxyError(w, r, http.StatusUnauthorized, rec.ID, envdPort,
			"this sandbox has no envd access token yet: get one with Sandbox.connect (or GET /sandboxes/{id})")
		return false
	case path == "/files" && (r.Method == http.MethodGet || r.Method == http.MethodPost):
		if msg := filesAuth(r, token); msg != "" {
			writeProxyError(w, r, http.StatusUnauthorized, rec.ID, envdPort, msg)
			return false
		}
	case !guest.HasAccessToken(r.Header, token):
		msg := "unauthorized access: send the sandbox's envd access token in the X-Access-Token header"
		if r.Header.Get(guest.AccessTokenHeader) != "" {
			msg = "unauthorized access: wrong envd access token in the X-Access-Token header"
		}
		writeProxyError(w, r, http.StatusUnauthorized, rec.ID, envdPort, msg)
		return false
	}
	if r.Method == http.MethodPost && path == "/files" {
		for h := range r.Header {
			if strings.HasPrefix(http.CanonicalHeaderKey(h), metadataHeaderPrefix) {
				writeProxyError(w, r, http.StatusBadRequest, rec.ID, envdPort,
					"file metadata (X-Metadata-* headers) is not supported by Cove's sandboxes; write the file without metadata")
				return false
			}
		}
	}
	return true
}

// downloadBuffers are the proxy's copy buffers for /files downloads.
var downloadBuffers = &bufferPool{pool: sync.Pool{New: func() any { return make([]byte, 1<<20) }}}

type bufferPool struct{ pool sync.Pool }

func (b *bufferPool) Get() []byte  { return b.pool.Get().([]byte) }
func (b *bufferPool) Put(p []byte) { b.pool.Put(p) }

// fullReads fills each read of a body as far as the body goes.
type fullReads struct{ io.ReadCloser }

func (f fullReads) Read(p []byte) (int, error) {
	n, err := io.ReadFull(f.ReadCloser, p)
	if err == io.ErrUnexpectedEOF {
		err = io.EOF
	}
	return n, err
}

// filesAuth checks a request to /files: the access token in its header,
// else a URL signed with it as envd checks one (the SDK's downloadUrl and
// uploadUrl): signature = "v1_" + base64(sha256(path:operation:user:token
// [:expiration])), unpadded. "" means allowed; otherwise what is wrong.
func filesAuth(r *http.Request, token string) string {
	if r.Header.Get(guest.AccessTokenHeader) != "" {
		if guest.HasAccessToken(r.Header, token) {
			return ""
		}
		return "access token present in header but does not match"
	}
	q := r.URL.Query()
	sig := q.Get("signature")
	if sig == "" {
		return "unauthorized access: send the envd access token in X-Access-Token, or sign the URL (Sandbox.downloadUrl, uploadUrl)"
	}
	op := "read"
	if r.Method == http.MethodPost {
		op = "write"
	}
	raw := q.Get("path") + ":" + op + ":" + q.Get("username") + ":" + token
	exp := q.Get("signature_expiration")
	if exp != "" {
		raw += ":" + exp
	}
	sum := sha256.Sum256([]byte(raw))
	if !guest.TokenEqual(sig, "v1_"+base64.RawStdEncoding.EncodeToString(sum[:])) {
		return "invalid signature"
	}
	if exp != "" {
		n, err := strconv.ParseInt(exp, 10, 64)
		if err != nil {
			return "invalid signature_expiration: want a Unix time in seconds"
		}
		if n < time.Now().Unix() {
			return "signature is already expired"
		}
	}
	return ""
}

// servePort proxies to a port of a sandbox made through the E2B API.
func (s *API) servePort(w http.ResponseWriter, r *http.Request, rec store.Sandbox, port int) {
	if want := rec.Spec.Labels[trafficTokenLabel]; want != "" {
		got := r.Header.Get(trafficTokenHeader)
		switch {
		case got == "":
			writeProxyError(w, r, http.StatusForbidden, rec.ID, port, "Sandbox is secured with traffic access token. Token header 'e2b-traffic-access-token' is missing")
			return
		case !guest.TokenEqual(got, want):
			writeProxyError(w, r, http.StatusForbidden, rec.ID, port, "Sandbox is secured with traffic access token. Provided token in header 'e2b-traffic-access-token' is invalid")
			return
		}
	}
	if s.paused(rec) {
		if !autoResumes(rec) {
			pausedError(w, r, rec, port)
			return
		}
		var ok bool
		if rec, ok = s.resumeFor(w, r, rec, port); !ok {
			return
		}
	}
	sess, err := s.fleet.LiveSession(r.Context(), rec)
	if err != nil {
		s.log.Warn("getting a sandbox's session", "request_id", web.RequestID(r), "sandbox", rec.ID, "err", err)
		writeProxyError(w, r, http.StatusBadGateway, rec.ID, port, fmt.Sprintf("The sandbox %s is not reachable; retry, or connect to it again", rec.ID))
		return
	}
	s.proxy.Forward(w, r, rec, sess, port, "", func(w http.ResponseWriter, r *http.Request, status int, _, msg string) {
		if status == http.StatusBadGateway && strings.HasPrefix(msg, "nothing is listening") {
			msg = "The sandbox is running but port is not open: " + msg
		}
		writeProxyError(w, r, status, rec.ID, port, msg)
	})
}

// proxyBody is the error body of E2B's sandbox proxy.
type proxyBody struct {
	SandboxID string `json:"sandboxId,omitempty"`
	Message   string `json:"message"`
	Port      int    `json:"port,omitempty"`
	Code      int    `json:"code"`
}

// writeProxyError answers a request for a sandbox's traffic with an
// error: in Connect's error body for Connect RPC paths (the SDK's
// Connect client reads its code), in E2B's proxy's otherwise.
func writeProxyError(w http.ResponseWriter, r *http.Request, status int, id string, port int, msg string) {
	if isConnectPath(r.URL.Path) {
		web.WriteJSON(w, status, struct {
			Code    string `json:"code"`
			Message string `json:"message"`
		}{connectCode(status), msg})
		return
	}
	web.WriteJSON(w, status, proxyBody{SandboxID: id, Message: msg, Port: port, Code: status})
}

// isConnectPath reports whether a path is a Connect RPC of envd's
// services (/package.Service/Method).
func isConnectPath(p string) bool {
	return strings.HasPrefix(p, "/process.Process/") || strings.HasPrefix(p, "/filesystem.Filesystem/")
}

// connectCode is the Connect error code of an HTTP status, as Connect
// clients map one back.
func connectCode(status int) string {
	switch status {
	case http.StatusBadRequest:
		return "invalid_argument"
	case http.StatusUnauthorized:
		return "unauthenticated"
	case http.StatusForbidden:
		return "permission_denied"
	case http.StatusNotFound:
		return "not_found"
	case http.StatusRequestEntityTooLarge, http.StatusTooManyRequests:
		return "resource_exhausted"
	case http.StatusNotImplemented:
		return "unimplemented"
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return "unavailable"
	}
	return "internal"
}
