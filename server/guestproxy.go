package server

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/proxy"
)

// The sandbox daemon's own API through the server. Everything a Cove
// client does inside a sandbox (processes and their streams, files, tar,
// port tunnels) is the daemon's API (Connect process and filesystem
// services, /files, /cove/tar, /cove/port with Upgrade: tcp), reached at
// /v1/sandboxes/{id}/guest/... with the team's API key. The proxy checks
// the key and the sandbox's state, takes the prefix off the path and the
// key out of the request, adds the daemon's access token, and passes the
// request on as it is: streams are flushed as they come and upgraded
// connections are spliced, so the client (guest.Client, or an E2B SDK
// pointed at this prefix) sees the daemon itself.
//
// The key travels in X-API-Key, or in Authorization as a Bearer token;
// an Authorization of any other kind is the daemon's (envd names the
// request's user in a Basic one) and passes through.
//
// Each request dials the daemon afresh and no connection is kept: nothing
// stale outlives a stop, a resume or a delete, and a dial on a unix
// socket costs little next to the caller's round trip.

func (s *Server) guestRoutes() {
	// Any method: the proxy passes them all on.
	s.handle("/v1/sandboxes/{id}/guest/", s.proxyGuest)
}

func (s *Server) proxyGuest(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	// The record may lag the runtime, which stops a sandbox by itself
	// at its TTL: ask the runtime too.
	info, err := sess.Info(r.Context())
	if err != nil {
		s.fail(w, r, sandbox.WrapIDf(rec.ID, err, "sandbox %s", rec.ID))
		return
	}
	if info.State != sandbox.StateRunning {
		s.fail(w, r, fmt.Errorf("sandbox %s is %s; resume it first (POST /v1/sandboxes/{id}/resume): %w", rec.ID, info.State, sandbox.ErrState))
		return
	}
	dial, token, ok := proxy.DaemonEndpoint(sess)
	if !ok {
		writeError(w, r, http.StatusNotImplemented, api.CodeInvalid,
			"this server's runtime does not reach its sandboxes' daemons directly, so it cannot proxy their API")
		return
	}
	end := s.begin(rec.ID)
	defer end()
	if r.Body != nil && r.Body != http.NoBody {
		r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)
	}
	id := rec.ID
	rp := s.proxy.Daemon(id, dial, token, func(out, in *http.Request) {
		out.URL.Path, out.URL.RawPath = guestPath(in.URL)
		out.Header.Del("X-API-Key")
		if strings.HasPrefix(out.Header.Get("Authorization"), "Bearer ") {
			out.Header.Del("Authorization")
		}
	}, func(w http.ResponseWriter, r *http.Request, err error) {
		var mbe *http.MaxBytesError
		switch {
		case errors.As(err, &mbe):
			s.fail(w, r, fmt.Errorf("the request body is over %d bytes: %w", mbe.Limit, err))
		default:
			s.fail(w, r, fmt.Errorf("the daemon of sandbox %s did not answer; retry, or stop and resume the sandbox (request id %s): %w",
				id, requestID(r), sandbox.ErrUnavailable))
		}
	})
	rp.ServeHTTP(w, r)
}

// guestPath is the daemon's path of a request to
// /v1/sandboxes/{id}/guest/...: the rest, escaped as the client sent it.
func guestPath(u *url.URL) (path, rawPath string) {
	// "", "v1", "sandboxes", id, "guest", rest
	parts := strings.SplitN(u.EscapedPath(), "/", 6)
	raw := "/"
	if len(parts) == 6 {
		raw += parts[5]
	}
	p, err := url.PathUnescape(raw)
	if err != nil {
		return raw, ""
	}
	return p, raw
}
