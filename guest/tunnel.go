package guest

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// tunnel serves GET /cove/port/{port} with "Upgrade: tcp": it connects to
// that port on the sandbox's own loopback and, once upgraded, copies bytes
// both ways. The host reaches services in the sandbox this way with no
// network between them.
func (s *Server) tunnel(w http.ResponseWriter, r *http.Request) {
	port, err := strconv.Atoi(r.PathValue("port"))
	if err != nil || port < 1 || port > 65535 {
		wire.WriteError(w, http.StatusBadRequest, fmt.Sprintf("port %q: want a number from 1 to 65535", r.PathValue("port")))
		return
	}
	if r.Header.Get("Upgrade") != "tcp" {
		wire.WriteError(w, http.StatusBadRequest, "send Connection: Upgrade and Upgrade: tcp to open a tunnel")
		return
	}
	var d net.Dialer
	ctx, cancel := context.WithTimeout(r.Context(), 5*time.Second)
	up, err := d.DialContext(ctx, "tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(port)))
	cancel()
	if err != nil {
		wire.WriteError(w, http.StatusBadGateway, fmt.Sprintf("nothing is listening on port %d in the sandbox: start a server bound to 127.0.0.1:%d or 0.0.0.0:%d", port, port, port))
		return
	}
	rc := http.NewResponseController(w)
	w.Header().Set("Connection", "Upgrade")
	w.Header().Set("Upgrade", "tcp")
	w.WriteHeader(http.StatusSwitchingProtocols)
	conn, brw, err := rc.Hijack()
	if err != nil {
		up.Close()
		return
	}
	splice(conn, brw.Reader, up)
}

// splice copies between a hijacked client connection (with any bytes
// already buffered) and the upstream, until both directions end.
func splice(client net.Conn, buffered *bufio.Reader, up net.Conn) {
	var wg sync.WaitGroup
	wg.Add(2)
	go func() {
		defer wg.Done()
		io.Copy(up, buffered)
		closeWrite(up)
	}()
	go func() {
		defer wg.Done()
		io.Copy(client, up)
		closeWrite(client)
	}()
	wg.Wait()
	client.Close()
	up.Close()
}

func closeWrite(c net.Conn) {
	if cw, ok := c.(interface{ CloseWrite() error }); ok {
		cw.CloseWrite()
		return
	}
	c.Close()
}

// DialPort opens a tunnel to a TCP port inside the sandbox. The
// handshake ends when ctx does; a refusal from a proxy in between is
// first put to CheckResponse, so its own error comes back.
func (c *Client) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("port %d: want 1 to 65535: %w", port, sandbox.ErrInvalid)
	}
	conn, err := c.dial(ctx)
	if err != nil {
		return nil, err
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.base+"/cove/port/"+strconv.Itoa(port), nil)
	req.Header.Set("Connection", "Upgrade")
	req.Header.Set("Upgrade", "tcp")
	c.setHeaders(req.Header)
	if dl, ok := ctx.Deadline(); ok {
		conn.SetDeadline(dl)
	}
	stop := context.AfterFunc(ctx, func() { conn.SetDeadline(time.Unix(1, 0)) })
	br := bufio.NewReader(conn)
	err = req.Write(conn)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() {
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, wireError(err)
	}
	if resp.StatusCode != http.StatusSwitchingProtocols {
		defer conn.Close()
		defer resp.Body.Close()
		if c.check != nil && c.proxied {
			if err := c.check(resp); err != nil {
				return nil, err
			}
		}
		return nil, fmt.Errorf("dialing port %d: %w", port, httpError(resp))
	}
	conn.SetDeadline(time.Time{})
	return &bufConn{Conn: conn, r: br}, nil
}

// bufConn is a net.Conn whose reads drain a buffered reader first.
type bufConn struct {
	net.Conn
	r *bufio.Reader
}

func (b *bufConn) Read(p []byte) (int, error) { return b.r.Read(p) }

func (b *bufConn) CloseWrite() error {
	if cw, ok := b.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}
