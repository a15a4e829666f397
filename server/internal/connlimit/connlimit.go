// Package connlimit bounds what a client, authenticated or not, can
// hold of the server: connections per client and in total, and progress
// deadlines on reads and writes.
package connlimit

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/web"
)

// Limits bound what a client, authenticated or not, can hold of the
// server: every open connection costs a file descriptor (two when it is
// proxied to a sandbox), and the process has a fixed number.
//
// Timeouts end connections that do nothing, never ones that work: an
// exec stream, a run's events, a WebSocket or a port's long poll may
// wait for hours. So reads and writes have progress deadlines, not
// totals: a request body may take as long as it likes as long as it
// keeps arriving, a response as long as the client keeps reading.
// Concurrent connections are capped per client address and in total.
// Zero values mean the defaults.
type Limits struct {
	// ReadHeaderTimeout bounds the wait for a request's headers (and a
	// TLS handshake): a client that dribbles them is cut (10 s).
	ReadHeaderTimeout time.Duration
	// IdleTimeout closes a keep-alive connection that has had no request
	// for this long (90 s).
	IdleTimeout time.Duration
	// ReadTimeout is the longest a request body may stall, no byte
	// arriving, before the request ends (60 s).
	ReadTimeout time.Duration
	// WriteTimeout is the longest a write to a client may block, the
	// client reading nothing, before the connection is cut (60 s).
	WriteTimeout time.Duration
	// MaxConnsPerClient caps one client's open connections (256);
	// negative means no cap. A client is an IPv4 address, or an IPv6
	// /64 (what one host is usually given).
	MaxConnsPerClient int
	// MaxConns caps all open connections; over it a new one is closed at
	// once. Default: half of the open-file limit (RLIMIT_NOFILE), the
	// other half left for the sandboxes' connections, the store, logs.
	MaxConns int
	// TrustedProxies are reverse proxies in front of the server. Their
	// connections are not capped per client (they carry many); the
	// client of each request is then the X-Forwarded-For address the
	// proxies name, and a client's concurrent requests are capped as
	// its connections would be. Without it X-Forwarded-For is ignored:
	// any client can write one.
	TrustedProxies []netip.Prefix
}

const (
	defaultMaxConnsPerClient = 256
	// refuseSlack connections over a client's cap are answered with a
	// 429 that says why; more are closed at once.
	refuseSlack = 16
	// refusedLife bounds how long a refused connection lives.
	refusedLife = 5 * time.Second
)

// withDefaults fills in the zero values.
func (l Limits) withDefaults() Limits {
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	def(&l.ReadHeaderTimeout, 10*time.Second)
	def(&l.IdleTimeout, 90*time.Second)
	def(&l.ReadTimeout, 60*time.Second)
	def(&l.WriteTimeout, 60*time.Second)
	if l.MaxConnsPerClient == 0 {
		l.MaxConnsPerClient = defaultMaxConnsPerClient
	}
	if l.MaxConns == 0 {
		l.MaxConns = DefaultMaxConns()
	}
	return l
}

// DefaultMaxConns is half of the process's open-file limit.
func DefaultMaxConns() int {
	var rl syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &rl); err != nil || rl.Cur == 0 || rl.Cur > 1<<20 {
		return 4096
	}
	return max(int(rl.Cur/2), 64)
}

// HTTPServer returns the HTTP server for h with lim's timeouts, and l
// wrapped to count and cap connections. Serve the one on the other; wrap
// the listener in TLS after this, not before, so a refused connection
// costs no handshake.
func HTTPServer(h http.Handler, l net.Listener, lim Limits, log *slog.Logger) (*http.Server, net.Listener) {
	lim = lim.withDefaults()
	log.Info("connection limits", "max_conns", lim.MaxConns, "max_conns_per_client", lim.MaxConnsPerClient,
		"read_header_timeout", lim.ReadHeaderTimeout, "idle_timeout", lim.IdleTimeout, "read_timeout", lim.ReadTimeout,
		"write_timeout", lim.WriteTimeout, "trusted_proxies", len(lim.TrustedProxies))
	cl := &connLimiter{Listener: l, lim: lim, log: log, byClient: map[netip.Addr]int{}, requests: map[netip.Addr]int{}}
	hs := &http.Server{
		Handler:           cl.handler(h),
		ReadHeaderTimeout: lim.ReadHeaderTimeout,
		IdleTimeout:       lim.IdleTimeout,
		// No ReadTimeout or WriteTimeout: they bound a whole request
		// and would cut every long stream (and a passed read deadline
		// cancels the request's context). The handler sets progress
		// deadlines instead.
		ConnContext: func(ctx context.Context, c net.Conn) context.Context {
			// TLS, and a listener that looked at the first bytes, wrap
			// the counted connection.
			for {
				if lc, ok := c.(*limitedConn); ok {
					return context.WithValue(ctx, connKey{}, lc)
				}
				u, ok := c.(interface{ NetConn() net.Conn })
				if !ok {
					return ctx
				}
				c = u.NetConn()
			}
		},
	}
	return hs, cl
}

// connLimiter counts open connections, per client and in total.
type connLimiter struct {
	net.Listener
	lim Limits
	log *slog.Logger

	// mu guards the counts and the warning's rate limit.
	mu sync.Mutex
	// open counts every connection accepted and not yet closed;
	// byClient those of each client (not of trusted proxies), requests
	// the requests in flight of each client behind a trusted proxy.
	open     int
	byClient map[netip.Addr]int
	requests map[netip.Addr]int
	warned   time.Time
	refused  int
}

type connKey struct{}

// limitedConn is an accepted connection, counted until it closes.
type limitedConn struct {
	net.Conn
	l       *connLimiter
	client  netip.Addr // the client's key (IPv6 by /64)
	trusted bool       // a trusted proxy's: not counted per client
	over    bool       // over its client's cap: answered with a 429
	once    sync.Once
}

func (c *limitedConn) Close() error {
	c.once.Do(func() {
		c.l.mu.Lock()
		c.l.open--
		if !c.trusted {
			if c.l.byClient[c.client]--; c.l.byClient[c.client] <= 0 {
				delete(c.l.byClient, c.client)
			}
		}
		c.l.mu.Unlock()
	})
	return c.Conn.Close()
}

// Accept returns the next connection within the caps; connections over
// them are closed here (and warned of, at most every ten seconds).
func (l *connLimiter) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if lc := l.admit(c); lc != nil {
			return lc, nil
		}
	}
}

func (l *connLimiter) admit(c net.Conn) *limitedConn {
	addr := remoteAddr(c)
	lc := &limitedConn{Conn: c, l: l, client: clientKey(addr), trusted: l.trusted(addr)}
	l.mu.Lock()
	n := l.byClient[lc.client]
	var why string
	switch {
	case l.open >= l.lim.MaxConns:
		why = fmt.Sprintf("the server has %d connections open, its most (--max-conns)", l.open)
	case lc.trusted || l.lim.MaxConnsPerClient < 0 || n < l.lim.MaxConnsPerClient:
	case n < l.lim.MaxConnsPerClient+refuseSlack:
		lc.over = true
	default:
		why = fmt.Sprintf("client %s has %d connections open, over its most (--max-conns-per-client %d)", lc.client, n, l.lim.MaxConnsPerClient)
	}
	if why != "" {
		l.refused++
		warn := time.Since(l.warned) > 10*time.Second
		refused := l.refused
		if warn {
			l.warned, l.refused = time.Now(), 0
		}
		l.mu.Unlock()
		c.Close()
		if warn {
			l.log.Warn("refusing connections", "why", why, "refused_since_last_warning", refused)
		}
		return nil
	}
	l.open++
	if !lc.trusted {
		l.byClient[lc.client]++
	}
	l.mu.Unlock()
	if lc.over {
		c.SetDeadline(time.Now().Add(refusedLife))
	}
	return lc
}

func (l *connLimiter) trusted(a netip.Addr) bool {
	for _, p := range l.lim.TrustedProxies {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

// remoteAddr is a connection's peer address, IPv4 unmapped.
func remoteAddr(c net.Conn) netip.Addr {
	if ta, ok := c.RemoteAddr().(*net.TCPAddr); ok {
		return ta.AddrPort().Addr().Unmap()
	}
	ap, err := netip.ParseAddrPort(c.RemoteAddr().String())
	if err != nil {
		return netip.Addr{}
	}
	return ap.Addr().Unmap()
}

// clientKey is the address a client's connections are counted under:
// an IPv4 address, or an IPv6 address's /64.
func clientKey(a netip.Addr) netip.Addr {
	if a.Is6() {
		if p, err := a.Prefix(64); err == nil {
			return p.Addr()
		}
	}
	return a
}

// forwardedClient is the client of a request that came through trusted
// proxies: the right-most X-Forwarded-For address that is not one of
// them (addresses left of it were written by whoever sent the request,
// and may be forged). Without one, the proxy is the client.
func (l *connLimiter) forwardedClient(r *http.Request, proxy netip.Addr) netip.Addr {
	vals := r.Header.Values("X-Forwarded-For")
	for i := len(vals) - 1; i >= 0; i-- {
		parts := strings.Split(vals[i], ",")
		for j := len(parts) - 1; j >= 0; j-- {
			a, err := netip.ParseAddr(strings.TrimSpace(parts[j]))
			if err != nil {
				return proxy // garbled: trust nothing left of it
			}
			if a = a.Unmap(); !l.trusted(a) {
				return a
			}
		}
	}
	return proxy
}

// acquire counts a request of a client behind a trusted proxy; false
// when the client is at its cap.
func (l *connLimiter) acquire(client netip.Addr) (release func(), ok bool) {
	if l.lim.MaxConnsPerClient < 0 {
		return func() {}, true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.requests[client] >= l.lim.MaxConnsPerClient {
		return nil, false
	}
	l.requests[client]++
	var once sync.Once
	return func() {
		once.Do(func() {
			l.mu.Lock()
			if l.requests[client]--; l.requests[client] <= 0 {
				delete(l.requests, client)
			}
			l.mu.Unlock()
		})
	}, true
}

// handler answers requests over the caps with a 429, and gives the rest
// progress deadlines for their body and their response.
func (l *connLimiter) handler(h http.Handler) http.Handler {
	tooMany := func(w http.ResponseWriter, r *http.Request, client netip.Addr, what string) {
		w.Header().Set("Connection", "close")
		w.Header().Set("Retry-After", "5")
		web.WriteError(w, r, http.StatusTooManyRequests, api.CodeLimit, fmt.Sprintf(
			"too many %s from %s: %d are open, the most one client may have (cove serve --max-conns-per-client); close some, or reuse them, and retry",
			what, client, l.lim.MaxConnsPerClient))
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		lc, _ := r.Context().Value(connKey{}).(*limitedConn)
		switch {
		case lc != nil && lc.over:
			tooMany(w, r, lc.client, "connections")
			return
		case lc != nil && lc.trusted:
			client := clientKey(l.forwardedClient(r, remoteAddr(lc)))
			release, ok := l.acquire(client)
			if !ok {
				tooMany(w, r, client, "requests")
				return
			}
			defer release()
		}
		rc := http.NewResponseController(w)
		// A deadline left by the previous request on this connection.
		rc.SetWriteDeadline(time.Time{})
		dw := &deadlineWriter{ResponseWriter: w, rc: rc, d: l.lim.WriteTimeout}
		if r.Body != nil && r.Body != http.NoBody {
			// Armed now, so a body the handler never reads (the server
			// reads it itself to reuse the connection) cannot stall
			// for ever; each read of it sets it again.
			rc.SetReadDeadline(time.Now().Add(l.lim.ReadTimeout))
			r.Body = &deadlineBody{ReadCloser: r.Body, rc: rc, d: l.lim.ReadTimeout}
		}
		h.ServeHTTP(dw, r)
		if !dw.hijacked {
			// What the server still writes after the handler (the
			// buffered end of the response) is bounded too.
			rc.SetWriteDeadline(time.Now().Add(l.lim.WriteTimeout))
		}
	})
}

// deadlineWriter gives each write to the client WriteTimeout to finish:
// a stream may be silent for hours, but a client that stops reading is
// cut. Hijack passes through (the server clears a hijacked connection's
// deadlines).
type deadlineWriter struct {
	http.ResponseWriter
	rc       *http.ResponseController
	d        time.Duration
	hijacked bool
}

func (w *deadlineWriter) arm() { w.rc.SetWriteDeadline(time.Now().Add(w.d)) }

func (w *deadlineWriter) disarm(err error) {
	// After a failed write the connection is done: leave the deadline
	// so the server's own last writes fail at once too.
	if err == nil {
		w.rc.SetWriteDeadline(time.Time{})
	}
}

// writeChunk is how much of a write must go through within WriteTimeout:
// a big write (a proxy's 1 MiB buffer) to a slow but reading client is
// progress, not a stall.
const writeChunk = 64 << 10

func (w *deadlineWriter) Write(p []byte) (int, error) {
	var n int
	for {
		chunk := p[:min(len(p), writeChunk)]
		w.arm()
		m, err := w.ResponseWriter.Write(chunk)
		w.disarm(err)
		n += m
		if p = p[m:]; err != nil || len(p) == 0 {
			return n, err
		}
	}
}

func (w *deadlineWriter) WriteHeader(code int) {
	w.arm() // 1xx responses are written at once
	w.ResponseWriter.WriteHeader(code)
	w.disarm(nil)
}

func (w *deadlineWriter) FlushError() error {
	w.arm()
	err := w.rc.Flush()
	w.disarm(err)
	return err
}

func (w *deadlineWriter) Flush() { w.FlushError() }

func (w *deadlineWriter) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	c, brw, err := w.rc.Hijack()
	if err == nil {
		w.hijacked = true
	}
	return c, brw, err
}

func (w *deadlineWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// deadlineBody gives each read of a request body ReadTimeout: a big
// upload may take as long as it keeps moving; one that stalls ends.
type deadlineBody struct {
	io.ReadCloser
	rc *http.ResponseController
	d  time.Duration
}

// errBodyStalled is a request body that stopped arriving.
var errBodyStalled = errors.New("the request body stopped arriving")

func (b *deadlineBody) Read(p []byte) (int, error) {
	b.rc.SetReadDeadline(time.Now().Add(b.d))
	n, err := b.ReadCloser.Read(p)
	var ne net.Error
	switch {
	case err == io.EOF:
		// The server now reads the connection itself, to see the
		// client leave; that read must not time out (it would cancel
		// the request).
		b.rc.SetReadDeadline(time.Time{})
	case errors.As(err, &ne) && ne.Timeout():
		err = fmt.Errorf("%w: nothing came for %s (cove serve --read-timeout): %w", errBodyStalled, b.d, sandbox.ErrInvalid)
	}
	return n, err
}
