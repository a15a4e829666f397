package proxy

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"strings"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/web"
)

// The proxy to a sandbox's own daemon: the /v1 guest routes and E2B's
// envd. Each request dials the daemon afresh and no connection is kept:
// nothing stale outlives a stop, a resume or a delete.

// DaemonEndpoint is how a session's daemon is dialed, and its token; ok
// is false when the session's runtime does not reach it directly. A
// session that dials its daemon its own way (guest.DaemonDialer: a
// socket opened without following links, a pod the runtime finds) is
// dialed that way; others at their address.
func DaemonEndpoint(sess sandbox.Session) (dial func(context.Context) (net.Conn, error), token string, ok bool) {
	var addr string
	if ep, isEP := sess.(guest.Endpointer); isEP {
		addr, token = ep.Endpoint()
	}
	network, address, ok := daemonAddr(addr)
	if !ok {
		return nil, "", false
	}
	if dd, isDD := sess.(guest.DaemonDialer); isDD {
		return dd.DialDaemon, token, true
	}
	var d net.Dialer
	return func(ctx context.Context) (net.Conn, error) { return d.DialContext(ctx, network, address) }, token, true
}

// Daemon is a reverse proxy to the daemon of sandbox id, dialed with
// dial (DaemonEndpoint's). rewrite sets the path of the outgoing request
// (and takes out what the daemon must not see); the daemon's token
// replaces whatever X-Access-Token the client sent. Streams are flushed
// as they come, upgraded connections spliced, and the bytes metered at
// the connection, so tunnels count too. fail answers a request the
// daemon did not (unless the client left); the cause goes to the log
// only, as it names host paths.
func (px *Proxy) Daemon(id string, dial func(context.Context) (net.Conn, error), token string, rewrite func(out, in *http.Request), fail func(w http.ResponseWriter, r *http.Request, err error)) *httputil.ReverseProxy {
	return &httputil.ReverseProxy{
		Rewrite: func(pr *httputil.ProxyRequest) {
			out := pr.Out
			out.URL.Scheme, out.URL.Host = "http", "guest"
			out.Host = ""
			rewrite(out, pr.In)
			// The daemon runs inside the sandbox: no Cove credential
			// (a key, the UI's session cookie) goes in (StripCredentials).
			StripCredentials(out)
			out.Header.Del(guest.AccessTokenHeader)
			if token != "" {
				out.Header.Set(guest.AccessTokenHeader, token)
			}
		},
		Transport: &http.Transport{
			DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
				conn, err := dial(ctx)
				if err != nil {
					return nil, err
				}
				return &countedConn{Conn: conn, f: px.Fleet, id: id}, nil
			},
			DisableKeepAlives:  true,
			DisableCompression: true,
		},
		// Process output and watch events go out as they come.
		FlushInterval: -1,
		// A stream cut by a stopping sandbox is routine: debug, not stderr.
		ErrorLog: slog.NewLogLogger(px.Log.Handler(), slog.LevelDebug),
		ErrorHandler: func(w http.ResponseWriter, r *http.Request, err error) {
			if r.Context().Err() != nil {
				return // the client left
			}
			var mbe *http.MaxBytesError
			if !errors.As(err, &mbe) {
				px.Log.Warn("proxying to a sandbox's daemon", "request_id", web.RequestID(r), "sandbox", id, "err", err)
			}
			fail(w, r, err)
		},
	}
}

// daemonAddr splits a daemon address (guest.NewClient's form) into what
// to dial; only a daemon reached directly (a unix socket, or TCP with no
// path) can be proxied.
func daemonAddr(addr string) (network, address string, ok bool) {
	if p, ok := strings.CutPrefix(addr, "unix://"); ok && p != "" {
		return "unix", p, true
	}
	u, err := url.Parse(addr)
	if err != nil || u.Scheme != "http" || u.Host == "" || strings.Trim(u.Path, "/") != "" {
		return "", "", false
	}
	return "tcp", u.Host, true
}
