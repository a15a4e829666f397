package fake

import (
	"context"
	"fmt"
	"net"
	"sync"

	"github.com/cove-sandbox/cove/sandbox"
)

// Listen makes the fake sandbox listen on port, as a server inside it
// would: DialPort(port) connects to the returned listener through an
// in-memory pipe. It panics if port is out of range or already listened
// on (a bug in the test). On a stopped or deleted sandbox the listener is
// returned closed. Stop closes every listener.
func (s *Session) Listen(port int) net.Listener {
	if port < 1 || port > 65535 {
		panic(fmt.Sprintf("fake: Listen(%d): port out of range", port))
	}
	l := &pipeListener{s: s, port: port, conns: make(chan net.Conn, 64), done: make(chan struct{})}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.live() != nil {
		l.shutdown()
		return l
	}
	if _, ok := s.listeners[port]; ok {
		panic(fmt.Sprintf("fake: Listen(%d): port already in use in sandbox %s", port, s.id))
	}
	s.listeners[port] = l
	return l
}

// DialPort connects to a listener made by Listen.
func (s *Session) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if port < 1 || port > 65535 {
		return nil, fmt.Errorf("dialing port %d: port out of range: %w", port, sandbox.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("dialing port %d: %w", port, err)
	}
	l := s.listeners[port]
	s.mu.Unlock()
	if l == nil {
		return nil, fmt.Errorf("dialing port %d: nothing listens there: %w", port, sandbox.ErrUnavailable)
	}
	return l.dial(port)
}

// pipeListener is an in-memory net.Listener for one port.
type pipeListener struct {
	s     *Session
	port  int
	conns chan net.Conn // server ends waiting for Accept
	done  chan struct{} // closed by shutdown

	mu     sync.Mutex // guards closed
	closed bool
}

func (l *pipeListener) dial(port int) (net.Conn, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return nil, fmt.Errorf("dialing port %d: nothing listens there: %w", port, sandbox.ErrUnavailable)
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	default:
		client.Close()
		server.Close()
		return nil, fmt.Errorf("dialing port %d: accept backlog full: %w", port, sandbox.ErrUnavailable)
	}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, &net.OpError{Op: "accept", Net: "tcp", Addr: l.Addr(), Err: net.ErrClosed}
	}
}

// Close stops listening; connections not yet accepted are closed.
func (l *pipeListener) Close() error {
	l.shutdown()
	l.s.mu.Lock()
	if l.s.listeners[l.port] == l {
		delete(l.s.listeners, l.port)
	}
	l.s.mu.Unlock()
	return nil
}

// shutdown closes the listener without touching the session's table.
func (l *pipeListener) shutdown() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.closed {
		return
	}
	l.closed = true
	close(l.done)
	for {
		select {
		case c := <-l.conns:
			c.Close()
		default:
			return
		}
	}
}

func (l *pipeListener) Addr() net.Addr {
	return &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: l.port}
}
