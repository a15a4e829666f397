package guest

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strings"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest/gen/filesystem/filesystemconnect"
	"github.com/cove-sandbox/cove/guest/gen/process/processconnect"
	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// Client talks to one daemon, directly (a unix socket, or TCP to the
// daemon's own listener) or through an HTTP(S) proxy in front of it (the
// Cove server's /v1/sandboxes/{id}/guest). Directly, it dials a fresh
// connection whenever the old one is gone, retrying a refused dial for a
// short while, so a daemon that restarts (or a sandbox that resumes) is
// reconnected without the caller noticing. Safe for concurrent use.
type Client struct {
	// Process and FS are the Connect clients for the two services.
	Process processconnect.ProcessClient
	FS      filesystemconnect.FilesystemClient

	addr   string
	base   string // scheme://host plus the proxy's path prefix, if any
	token  string
	user   string
	header http.Header
	check  func(*http.Response) error
	// proxied: the daemon is behind an HTTP(S) proxy (see NewClient).
	proxied bool
	// ownHTTP: rpc and bulk are the Client's own, for Close to clean up.
	ownHTTP bool
	// rpc multiplexes the filesystem service (and its watch streams) over
	// HTTP/2; bulk serves the process service, files and tunnels over plain
	// HTTP/1.1 connections, which take fewer goroutine hand-offs per
	// request (measured: about 0.2 ms off an exec round trip) and move
	// large bodies faster. Through a proxy both are the same client.
	rpc  *http.Client
	bulk *http.Client
	// dial opens a connection for a tunnel (and, directly, for every
	// request): to the daemon, or to the proxy with TLS for https.
	dial func(ctx context.Context) (net.Conn, error)
}

// ClientOptions configures a Client.
type ClientOptions struct {
	// AccessToken is sent in X-Access-Token when set.
	AccessToken string
	// User names the sandbox user requests run as ("" means the daemon's
	// default).
	User string
	// DialRetry is how long a refused connection is retried; 0 means 3s.
	// Only for a daemon reached directly.
	DialRetry time.Duration
	// NoFollow dials a unix socket only if its path's last component is
	// the socket itself, not a symlink: for a socket in a directory the
	// sandbox can write (a gVisor sandbox's daemon makes its socket
	// there), which could otherwise lead the client to any socket of
	// the host's.
	NoFollow bool
	// Dial, when set, opens each connection to a daemon reached directly
	// (http://host:port or unix:///path) instead of dialing the address:
	// for a daemon whose address moves (a pod gets a new one each time it
	// starts; a socket only a supervisor's mount namespace holds), found
	// anew at every dial. A refused connection, or a socket not there
	// yet, is retried as a dial of the address would be; NoFollow is
	// Dial's to honour (DialUnixNoFollow).
	Dial func(ctx context.Context) (net.Conn, error)

	// Header is added to every request: a proxy's credentials (the Cove
	// server takes its API key in X-API-Key; Authorization is envd's, it
	// names the request's user).
	Header http.Header
	// HTTPClient sends the requests to a proxied daemon; nil means a
	// client of the Client's own. Its Timeout must be 0: process streams
	// and tunnels last as long as the process or connection. Tunnels
	// (DialPort) dial their own connection, with the Transport's
	// DialContext and TLSClientConfig when it is an *http.Transport.
	HTTPClient *http.Client
	// CheckResponse, when set, sees every response from a proxied daemon
	// before the Client does and may turn it into an error: a proxy
	// answers some requests itself (an unknown key, a stopped sandbox) in
	// its own error format, which only its caller knows how to map to the
	// sandbox sentinels. The error is returned as is; the response's body
	// is the callee's to restore when it returns nil after reading it.
	CheckResponse func(*http.Response) error
}

// NewClient returns a client for the daemon at addr: "unix:///path/to.sock"
// or "http://host:port" for the daemon itself, or the URL of a proxy in
// front of a daemon, "https://host[:port]/prefix" or
// "http://host:port/prefix" (e.g.
// "https://cove.example.com/v1/sandboxes/sb-1/guest"), whose path
// prefixes every daemon path. A proxied daemon is spoken to over
// HTTP/1.1, or HTTP/2 when TLS negotiates it: a proxy need not pass h2c
// through. A tunnel to a proxied daemon is an HTTP/1.1 Upgrade request on
// a fresh connection to the proxy.
func NewClient(addr string, opts ClientOptions) (*Client, error) {
	if opts.DialRetry <= 0 {
		opts.DialRetry = 3 * time.Second
	}
	c := &Client{addr: addr, token: opts.AccessToken, user: opts.User, header: opts.Header.Clone(), check: opts.CheckResponse}
	var network, address string
	switch {
	case strings.HasPrefix(addr, "unix://"):
		network, address, c.base = "unix", strings.TrimPrefix(addr, "unix://"), "http://guest"
	case strings.HasPrefix(addr, "http://"), strings.HasPrefix(addr, "https://"):
		u, err := url.Parse(addr)
		if err != nil || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return nil, fmt.Errorf("guest address %q: want http(s)://host[:port][/prefix], no user, query or fragment: %w", addr, sandbox.ErrInvalid)
		}
		prefix := strings.TrimSuffix(u.EscapedPath(), "/")
		c.base = u.Scheme + "://" + u.Host + prefix
		c.proxied = u.Scheme == "https" || prefix != "" || opts.HTTPClient != nil
		network, address = "tcp", u.Host
		if u.Port() == "" {
			address = net.JoinHostPort(u.Hostname(), map[string]string{"http": "80", "https": "443"}[u.Scheme])
		}
		if c.proxied {
			c.proxy(u, address, opts.HTTPClient)
			return c, nil
		}
	default:
		return nil, fmt.Errorf("guest address %q: want unix:///path, http://host:port or the URL of a proxy: %w", addr, sandbox.ErrInvalid)
	}
	var d net.Dialer
	dial := func(ctx context.Context) (net.Conn, error) {
		return dialSocket(ctx, &d, network, address, opts.NoFollow)
	}
	if opts.Dial != nil {
		dial = opts.Dial
	}
	c.dial = func(ctx context.Context) (net.Conn, error) {
		deadline := time.Now().Add(opts.DialRetry)
		backoff := 5 * time.Millisecond
		for {
			conn, err := dial(ctx)
			if err == nil {
				return conn, nil
			}
			retryable := errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT)
			if !retryable || time.Now().After(deadline) {
				// The socket's path is the host's: it stays out of an
				// error that may reach a tenant (a run's tool result,
				// an API error); the errno says what happened.
				return nil, fmt.Errorf("connecting to the sandbox daemon: %w: %w", sandbox.ErrUnavailable, bareErrno(err))
			}
			select {
			case <-ctx.Done():
				return nil, ctx.Err()
			case <-time.After(backoff):
			}
			backoff = min(backoff*2, 200*time.Millisecond)
		}
	}
	dialCtx := func(ctx context.Context, _, _ string) (net.Conn, error) { return c.dial(ctx) }
	h2 := &http.Transport{DialContext: dialCtx, Protocols: new(http.Protocols), MaxIdleConnsPerHost: 4}
	h2.Protocols.SetUnencryptedHTTP2(true)
	h1 := &http.Transport{DialContext: dialCtx, MaxIdleConnsPerHost: 64, DisableCompression: true,
		WriteBufferSize: 256 << 10, ReadBufferSize: 256 << 10}
	c.rpc = &http.Client{Transport: h2}
	c.bulk = &http.Client{Transport: h1}
	c.ownHTTP = true
	c.connectClients()
	return c, nil
}

// proxy sets c up for a daemon behind the proxy at u (address is its
// host:port): one HTTP client for everything, which sees CheckResponse
// first, and a dialer for tunnels.
func (c *Client) proxy(u *url.URL, address string, hc *http.Client) {
	if hc == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		tr.MaxIdleConnsPerHost = 16
		hc = &http.Client{Transport: tr}
		c.ownHTTP = true
	}
	base := hc.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	dialTCP := (&net.Dialer{}).DialContext
	var tlsConf *tls.Config
	if tr, ok := base.(*http.Transport); ok {
		if tr.DialContext != nil {
			dialTCP = tr.DialContext
		}
		tlsConf = tr.TLSClientConfig
	}
	if c.check != nil {
		hcc := *hc
		hcc.Transport = checkTransport{base: base, check: c.check}
		hc = &hcc
	}
	c.rpc, c.bulk = hc, hc
	https := u.Scheme == "https"
	c.dial = func(ctx context.Context) (net.Conn, error) {
		conn, err := dialTCP(ctx, "tcp", address)
		if err != nil {
			return nil, fmt.Errorf("connecting to %s: %w: %w", address, sandbox.ErrUnavailable, err)
		}
		if !https {
			return conn, nil
		}
		conf := &tls.Config{}
		if tlsConf != nil {
			conf = tlsConf.Clone()
		}
		if conf.ServerName == "" {
			conf.ServerName = u.Hostname()
		}
		// An Upgrade needs HTTP/1.1.
		conf.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, conf)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, fmt.Errorf("TLS handshake with %s: %w", address, err)
		}
		return tc, nil
	}
	c.connectClients()
}

func (c *Client) connectClients() {
	copts := connect.WithInterceptors(headerInterceptor{c})
	c.Process = processconnect.NewProcessClient(c.bulk, c.base, copts)
	c.FS = filesystemconnect.NewFilesystemClient(c.rpc, c.base, copts)
}

// checkTransport hands every response to a ClientOptions.CheckResponse.
type checkTransport struct {
	base  http.RoundTripper
	check func(*http.Response) error
}

func (t checkTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if err := t.check(resp); err != nil {
		resp.Body.Close()
		return nil, &checkedError{err}
	}
	return resp, nil
}

func (t checkTransport) CloseIdleConnections() {
	if ci, ok := t.base.(interface{ CloseIdleConnections() }); ok {
		ci.CloseIdleConnections()
	}
}

// checkedError is CheckResponse's verdict on a response. However deep the
// HTTP and Connect clients wrap it, wireError returns it as it was.
type checkedError struct{ err error }

func (e *checkedError) Error() string { return e.err.Error() }
func (e *checkedError) Unwrap() error { return e.err }

// Endpointer is a session whose daemon the host can reach itself: the
// Cove server proxies the daemon's API to its callers with it.
type Endpointer interface {
	// Endpoint returns the daemon's address, as NewClient takes it, and
	// its access token; "" when the daemon is behind a proxy (its
	// credentials are not the daemon's).
	Endpoint() (addr, token string)
}

// DaemonDialer is an Endpointer that dials its daemon its own way: a
// socket opened without following links (the gVisor tier), a pod found
// by its runtime (ClientOptions.Dial). A proxy to the daemon must dial
// with it, not the address.
type DaemonDialer interface {
	DialDaemon(ctx context.Context) (net.Conn, error)
}

// DialDaemon implements DaemonDialer: a connection made as the client
// makes its own (a refused dial retried for DialRetry).
func (c *Client) DialDaemon(ctx context.Context) (net.Conn, error) {
	if c.proxied {
		return nil, fmt.Errorf("the daemon is behind a proxy: %w", sandbox.ErrUnavailable)
	}
	return c.dial(ctx)
}

// Endpoint implements Endpointer.
func (c *Client) Endpoint() (addr, token string) {
	if c.proxied {
		return "", ""
	}
	return c.addr, c.token
}

// Close drops idle connections (not those of a ClientOptions.HTTPClient,
// which may serve others).
func (c *Client) Close() error {
	if !c.ownHTTP {
		return nil
	}
	c.rpc.CloseIdleConnections()
	if c.bulk != c.rpc {
		c.bulk.CloseIdleConnections()
	}
	return nil
}

func (c *Client) setHeaders(h http.Header) {
	for k, v := range c.header {
		h[k] = v
	}
	if c.token != "" {
		h.Set(AccessTokenHeader, c.token)
	}
	if c.user != "" {
		h.Set("Authorization", "Basic "+wire.BasicUser(c.user))
	}
}

// Health checks that the daemon answers.
func (c *Client) Health(ctx context.Context) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/health", nil)
	if err != nil {
		return err
	}
	resp, err := c.bulk.Do(req)
	if err != nil {
		return wireError(err)
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("sandbox daemon health: HTTP %d: %w", resp.StatusCode, sandbox.ErrUnavailable)
	}
	return nil
}

// do sends a plain HTTP request to the daemon over the bulk transport and
// turns an error response into a sentinel error.
func (c *Client) do(ctx context.Context, method, path string, q url.Values, body io.Reader, header http.Header) (*http.Response, error) {
	u := c.base + path
	if len(q) > 0 {
		u += "?" + q.Encode()
	}
	req, err := http.NewRequestWithContext(ctx, method, u, body)
	if err != nil {
		return nil, err
	}
	for k, v := range header {
		req.Header[k] = v
	}
	c.setHeaders(req.Header)
	resp, err := c.bulk.Do(req)
	if err != nil {
		return nil, wireError(err)
	}
	if resp.StatusCode >= 300 && resp.StatusCode != http.StatusSwitchingProtocols {
		defer resp.Body.Close()
		return nil, httpError(resp)
	}
	return resp, nil
}

type headerInterceptor struct{ c *Client }

func (h headerInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		h.c.setHeaders(req.Header())
		return next(ctx, req)
	}
}

func (h headerInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return func(ctx context.Context, spec connect.Spec) connect.StreamingClientConn {
		conn := next(ctx, spec)
		h.c.setHeaders(conn.RequestHeader())
		return conn
	}
}

func (h headerInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return next
}

// wireError maps an error from the wire (a Connect error or a transport
// failure) to one that wraps the matching sandbox sentinel.
func wireError(err error) error {
	if err == nil {
		return nil
	}
	var checked *checkedError
	if errors.As(err, &checked) {
		return checked.err
	}
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var ce *connect.Error
	if errors.As(err, &ce) {
		if s := wire.SentinelFor(ce.Code()); s != nil && !errors.Is(err, s) {
			return wire.WithSentinel(ce.Message(), s)
		}
		if ce.Code() == connect.CodeUnknown && isConnErr(err) {
			return fmt.Errorf("%s: %w", ce.Message(), sandbox.ErrUnavailable)
		}
		return err
	}
	if isConnErr(err) && !errors.Is(err, sandbox.ErrUnavailable) {
		return fmt.Errorf("the sandbox daemon is unreachable: %w: %w", sandbox.ErrUnavailable, err)
	}
	return err
}

// bareErrno is err's errno when it has one (a dial's *net.OpError names
// the address dialled), else err.
func bareErrno(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	return err
}

func isConnErr(err error) bool {
	var ne net.Error
	return errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ECONNRESET) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, sandbox.ErrUnavailable) ||
		errors.As(err, &ne)
}

// SetEnv merges variables into the environment every later process in
// the sandbox gets (envd's POST /init).
func (c *Client) SetEnv(ctx context.Context, env map[string]string) error {
	body, err := json.Marshal(map[string]any{"envVars": env})
	if err != nil {
		return err
	}
	resp, err := c.do(ctx, http.MethodPost, "/init", nil, bytes.NewReader(body), http.Header{"Content-Type": {"application/json"}})
	if err != nil {
		return fmt.Errorf("setting the sandbox's environment: %w", err)
	}
	resp.Body.Close()
	return nil
}

// dialSocket dials address; with noFollow, a unix socket's path is opened
// first without following a final symlink (DialUnixNoFollow).
func dialSocket(ctx context.Context, d *net.Dialer, network, address string, noFollow bool) (net.Conn, error) {
	if !noFollow || network != "unix" {
		return d.DialContext(ctx, network, address)
	}
	return DialUnixNoFollow(ctx, address)
}

// DialUnixNoFollow connects to the unix socket at path only if path's
// last component is the socket itself: it is opened without following a
// final symlink, checked to be a socket, and connected to through that
// open file (so a path longer than a socket address may hold works too).
// For a socket in a directory the sandbox can write, where a link planted
// in its place could otherwise lead to any socket of the host's.
func DialUnixNoFollow(ctx context.Context, path string) (net.Conn, error) {
	fd, err := unix.Open(path, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFSOCK {
		// A symlink (O_PATH|O_NOFOLLOW opens the link itself) or a file
		// planted in the socket's place.
		return nil, &net.OpError{Op: "dial", Net: "unix", Err: syscall.ECONNREFUSED}
	}
	var d net.Dialer
	return d.DialContext(ctx, "unix", fmt.Sprintf("/proc/self/fd/%d", fd))
}
