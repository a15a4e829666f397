package server

import (
	"context"
	"crypto/tls"
	"errors"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/server/e2b"
)

// sniffTimeout bounds the wait for a new connection's first byte, which
// says whether it speaks TLS.
const sniffTimeout = 10 * time.Second

// ListenTLS serves TLS with cfg on l's connections, and plain HTTP on the
// same port to requests for a sandbox's port by host name
// ({port}-{id}.{domain}) only: a client that is given a host with a port
// may take it for plain HTTP (the OpenAI Agents SDK's E2B client does), and
// the server cannot tell it otherwise. Everything else that arrives in
// plain text (the API, envd, the web UI) is refused with 400, so keys and
// access tokens are never read off an unencrypted connection the server
// offered. A connection speaks TLS when its first byte is a handshake
// record's.
//
// hs is the http.Server that will serve the listener: its ConnContext
// (kept) learns to mark the plain connections.
func (s *Server) ListenTLS(hs *http.Server, l net.Listener, cfg *tls.Config) net.Listener {
	next := hs.ConnContext
	hs.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		if next != nil {
			ctx = next(ctx, c)
		}
		if _, ok := c.(*peekedConn); ok {
			ctx = context.WithValue(ctx, plainKey{}, true)
		}
		return ctx
	}
	sn := &sniffer{Listener: l, cfg: cfg, conns: make(chan net.Conn), errs: make(chan error), done: make(chan struct{})}
	go sn.loop()
	return sn
}

// plainRefused answers a plain-HTTP request on the TLS port that is not
// for a sandbox's port.
func (s *Server) plainRefused(w http.ResponseWriter, r *http.Request) bool {
	if plain, _ := r.Context().Value(plainKey{}).(bool); !plain {
		return false
	}
	// A request naming its sandbox in headers is served by them
	// (ServeByHeader), whatever its host says: envd's included.
	byHeader := r.Header.Get(e2b.SandboxIDHeader) != "" || r.Header.Get(e2b.SandboxPortHeader) != ""
	if _, port, ok := s.proxy.PortHost(r.Host); ok && port != e2b.EnvdPort && !byHeader {
		return false
	}
	writeError(w, r, http.StatusBadRequest, api.CodeInvalid, "this port serves HTTPS: send the request to https://"+r.Host+" (only a sandbox's ports answer plain HTTP here)")
	return true
}

// plainKey marks the context of a plain connection on the TLS port.
type plainKey struct{}

// sniffer is a listener that hands out each connection once its first
// byte has said whether it is TLS: a *tls.Conn (so net/http negotiates
// HTTP/2 and sets Request.TLS) or the plain connection. Connections are
// looked at in their own goroutines, so a silent client holds up no one;
// each is a connection the listener underneath (connlimit) counts, so
// silent clients are capped as any others. Close closes the connections
// still being looked at: their goroutines end then, not at sniffTimeout.
type sniffer struct {
	net.Listener
	cfg   *tls.Config
	conns chan net.Conn
	errs  chan error
	done  chan struct{}
	once  sync.Once

	// mu guards pending (connections whose first byte is awaited) and
	// closed.
	mu      sync.Mutex
	pending map[net.Conn]struct{}
	closed  bool
}

func (sn *sniffer) loop() {
	for {
		c, err := sn.Listener.Accept()
		if err != nil {
			select {
			case sn.errs <- err:
			case <-sn.done:
				return
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		go sn.sniff(c)
	}
}

func (sn *sniffer) sniff(c net.Conn) {
	sn.mu.Lock()
	if sn.closed {
		sn.mu.Unlock()
		c.Close()
		return
	}
	if sn.pending == nil {
		sn.pending = map[net.Conn]struct{}{}
	}
	sn.pending[c] = struct{}{}
	sn.mu.Unlock()
	c.SetReadDeadline(time.Now().Add(sniffTimeout))
	var b [1]byte
	n, err := c.Read(b[:])
	c.SetReadDeadline(time.Time{})
	sn.mu.Lock()
	delete(sn.pending, c)
	sn.mu.Unlock()
	if err != nil || n == 0 {
		c.Close()
		return
	}
	pc := &peekedConn{Conn: c, first: b[0], has: true}
	var out net.Conn = pc
	if b[0] == 0x16 { // a TLS handshake record
		out = tls.Server(pc, sn.cfg)
	}
	select {
	case sn.conns <- out:
	case <-sn.done:
		c.Close()
	}
}

// Accept returns the next connection whose first byte has been read.
func (sn *sniffer) Accept() (net.Conn, error) {
	select {
	case c := <-sn.conns:
		return c, nil
	case err := <-sn.errs:
		return nil, err
	case <-sn.done:
		return nil, net.ErrClosed
	}
}

// Close stops accepting, and closes the connections not yet handed out.
func (sn *sniffer) Close() error {
	sn.once.Do(func() {
		close(sn.done)
		sn.mu.Lock()
		sn.closed = true
		for c := range sn.pending {
			c.Close()
		}
		sn.pending = nil
		sn.mu.Unlock()
	})
	return sn.Listener.Close()
}

// peekedConn gives back the byte read to tell TLS from plain HTTP.
type peekedConn struct {
	net.Conn
	first byte
	has   bool
}

func (c *peekedConn) Read(p []byte) (int, error) {
	if c.has && len(p) > 0 {
		p[0], c.has = c.first, false
		return 1, nil
	}
	return c.Conn.Read(p)
}

// NetConn returns the connection underneath, as tls.Conn's does.
func (c *peekedConn) NetConn() net.Conn { return c.Conn }
