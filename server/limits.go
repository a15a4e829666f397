package server

import (
	"net"
	"net/http"

	"github.com/cove-sandbox/cove/server/internal/connlimit"
)

// Limits bound what a client can hold of the server: timeouts and
// connection caps (server/internal/connlimit). Zero values mean the
// defaults.
type Limits = connlimit.Limits

// DefaultMaxConns is half of the process's open-file limit.
func DefaultMaxConns() int { return connlimit.DefaultMaxConns() }

// HTTPServer returns the HTTP server for s's handler with lim's
// timeouts, and l wrapped to count and cap connections. Serve the one
// on the other; wrap the listener in TLS after this, not before, so a
// refused connection costs no handshake.
func (s *Server) HTTPServer(l net.Listener, lim Limits) (*http.Server, net.Listener) {
	return connlimit.HTTPServer(s.Handler(), l, lim, s.log)
}
