// Package mcp makes the tools of MCP (Model Context Protocol) servers
// available to Cove's agents: it starts or connects to each configured
// server, lists its tools and returns them as agent.Tools whose calls are
// routed back to the server that owns them.
//
// A server is either a local command spoken to over stdio or a remote
// endpoint spoken to over Streamable HTTP. The runner connects the servers
// of a run when it starts ([Connect]) and closes them when it ends
// ([Set.Close]); the tool list is a snapshot taken at connect time.
//
// Tool names are namespaced as mcp__<server>__<tool> so that two servers
// can't clash, and are made to fit the model APIs' tool-name rule
// ^[a-zA-Z0-9_-]{1,64}$ (see [ToolName]).
package mcp

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"runtime/debug"
	"slices"
	"sync"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"

	"github.com/cove-sandbox/cove/agent"
)

// Defaults of Server.Timeout and Server.StartTimeout. A minute per call is
// what Codex gives MCP tool calls: long enough for real work, short enough
// that a hung server doesn't hang a run. Starting gets half a minute
// because a server run with npx or uvx may first download itself.
const (
	DefaultTimeout      = 60 * time.Second
	DefaultStartTimeout = 30 * time.Second
)

var (
	// ErrInvalid is returned by Connect for a configuration that can't work
	// (no name, both or neither of Command and URL, a duplicate name).
	ErrInvalid = errors.New("invalid mcp server config")
	// ErrDisconnected is returned by a call to a server whose process
	// exited or whose connection was lost after Connect. The server is not
	// restarted: every later call to it fails the same way.
	ErrDisconnected = errors.New("mcp server disconnected")
	// ErrClosed is returned by a call made after Set.Close.
	ErrClosed = errors.New("mcp servers closed")
)

// Server configures one MCP server. Exactly one of Command and URL is set.
type Server struct {
	// Name identifies the server in tool names and errors. It must be
	// unique within a Set.
	Name string

	// Command starts a server that speaks MCP over its stdin and stdout.
	// It is looked up in PATH like exec.Command does.
	Command string
	Args    []string
	// Env is added to the server's environment. The server does not
	// inherit the harness's whole environment, which holds the model API
	// keys: only a few variables a program needs to run (PATH, HOME, USER,
	// LANG, TMPDIR, ...; see inheritedEnv) are passed on, so a token the
	// server needs is given here.
	Env map[string]string
	// Dir is the server's working directory; empty means the harness's.
	Dir string
	// Stderr, if set, receives the server's stderr (its log). The last
	// few KiB are kept in any case, to explain a server that exits.
	Stderr io.Writer

	// URL is the endpoint of a server that speaks MCP over Streamable HTTP.
	URL string
	// Headers are sent with every HTTP request (e.g. Authorization).
	Headers map[string]string

	// AllowTools, when not empty, keeps only the tools with these names
	// (the server's own names, not the namespaced ones). DenyTools drops
	// the tools with these names. A name that the server doesn't have is
	// ignored, because servers add and rename tools between versions.
	AllowTools []string
	DenyTools  []string

	// Timeout bounds each tool call. Zero means DefaultTimeout; negative
	// means no limit but the caller's context.
	Timeout time.Duration
	// StartTimeout bounds starting the server: the process or connection,
	// the handshake and listing its tools, together. Zero means
	// DefaultStartTimeout; negative means no limit but Connect's context.
	StartTimeout time.Duration
}

func (s *Server) timeout() time.Duration { return orDefault(s.Timeout, DefaultTimeout) }

func orDefault(d, def time.Duration) time.Duration {
	if d == 0 {
		return def
	}
	return d
}

// withTimeout is context.WithTimeout that takes a negative d as no limit.
func withTimeout(ctx context.Context, d time.Duration) (context.Context, context.CancelFunc) {
	if d > 0 {
		return context.WithTimeout(ctx, d)
	}
	return context.WithCancel(ctx)
}

func (s *Server) validate() error {
	switch {
	case s.Name == "":
		return fmt.Errorf("%w: a server has no name", ErrInvalid)
	case s.Command == "" && s.URL == "":
		return fmt.Errorf("%w: server %q has neither a command nor a URL", ErrInvalid, s.Name)
	case s.Command != "" && s.URL != "":
		return fmt.Errorf("%w: server %q has both a command and a URL", ErrInvalid, s.Name)
	}
	return nil
}

// allowed applies AllowTools and DenyTools.
func (s *Server) allowed(tool string) bool {
	if len(s.AllowTools) > 0 && !slices.Contains(s.AllowTools, tool) {
		return false
	}
	return !slices.Contains(s.DenyTools, tool)
}

// Set is the connected servers of a run and their tools. Its methods are
// safe for concurrent use; tools may be called concurrently.
type Set struct {
	tools []agent.Tool
	conns []*conn
}

// Connect starts or connects to each server, lists its tools (all pages)
// and returns them as a Set. Servers start concurrently. If any fails, the
// ones already started are closed and the error names the server. ctx
// bounds only the start: the servers live until Set.Close.
func Connect(ctx context.Context, servers ...Server) (*Set, error) {
	seen := map[string]bool{}
	for i := range servers {
		if err := servers[i].validate(); err != nil {
			return nil, err
		}
		if seen[servers[i].Name] {
			return nil, fmt.Errorf("%w: two servers are named %q", ErrInvalid, servers[i].Name)
		}
		seen[servers[i].Name] = true
	}

	conns := make([]*conn, len(servers))
	lists := make([][]*sdk.Tool, len(servers))
	errs := make([]error, len(servers))
	var wg sync.WaitGroup
	for i := range servers {
		wg.Go(func() {
			conns[i], lists[i], errs[i] = start(ctx, servers[i])
		})
	}
	wg.Wait()
	set := &Set{}
	for _, c := range conns {
		if c != nil {
			set.conns = append(set.conns, c)
		}
	}
	if err := errors.Join(errs...); err != nil {
		set.Close()
		return nil, err
	}

	var names namer
	for i, c := range conns {
		for _, t := range lists[i] {
			if !servers[i].allowed(t.Name) {
				continue
			}
			set.tools = append(set.tools, &Tool{
				conn: c,
				name: t.Name,
				spec: agent.ToolSpec{
					Name:        names.name(c.server.Name, t.Name),
					Description: description(t),
					Parameters:  parameters(t.InputSchema),
				},
			})
		}
	}
	return set, nil
}

// Tools returns the tools of all servers, in the order of the servers given
// to Connect and then of each server's list.
func (s *Set) Tools() []agent.Tool { return slices.Clone(s.tools) }

// Close stops every server: a stdio server's stdin is closed, and if it
// has not exited after a grace period it is sent SIGTERM and then SIGKILL,
// together with any process it started; it is always waited for. An HTTP
// session is ended with a DELETE. Calls after Close fail with ErrClosed.
// Close is idempotent; it returns the servers' errors joined.
func (s *Set) Close() error {
	errs := make([]error, len(s.conns))
	var wg sync.WaitGroup
	for i, c := range s.conns {
		wg.Go(func() { errs[i] = c.close() })
	}
	wg.Wait()
	return errors.Join(errs...)
}

// conn is one connected server.
type conn struct {
	server  Server
	session *sdk.ClientSession
	proc    *process // nil for an HTTP server

	mu     sync.Mutex // guards closed
	closed bool
}

// start connects to one server and lists its tools.
func start(ctx context.Context, srv Server) (*conn, []*sdk.Tool, error) {
	ctx, cancel := withTimeout(ctx, orDefault(srv.StartTimeout, DefaultStartTimeout))
	defer cancel()
	c := &conn{server: srv}
	var transport sdk.Transport
	if srv.Command != "" {
		p, err := startProcess(srv)
		if err != nil {
			return nil, nil, fmt.Errorf("starting mcp server %q: %w", srv.Name, err)
		}
		c.proc = p
		transport = p.transport()
	} else {
		transport = &sdk.StreamableClientTransport{
			Endpoint:   srv.URL,
			HTTPClient: &http.Client{Transport: headerTransport{srv.Headers, http.DefaultTransport}},
			// The tool list is a snapshot taken at Connect, so the
			// server-to-client stream would only carry notifications
			// nothing here acts on; without it a session is plain
			// request/response and holds no connection open.
			DisableStandaloneSSE: true,
		}
	}
	client := sdk.NewClient(&sdk.Implementation{Name: "cove", Version: version()}, &sdk.ClientOptions{
		// Advertise nothing: Cove serves no roots, sampling or elicitation.
		Capabilities: &sdk.ClientCapabilities{},
	})
	session, err := client.Connect(ctx, transport, nil)
	if err != nil {
		err = c.explain(err)
		c.close()
		return nil, nil, fmt.Errorf("connecting to mcp server %q: %w", srv.Name, err)
	}
	c.session = session
	var tools []*sdk.Tool
	for t, err := range session.Tools(ctx, nil) {
		if err != nil {
			err = c.explain(err)
			c.close()
			return nil, nil, fmt.Errorf("listing the tools of mcp server %q: %w", srv.Name, err)
		}
		tools = append(tools, t)
	}
	return c, tools, nil
}

// explain turns the error of a request into one that says why the server
// is gone, when it is: a stdio server's exit status and the end of its
// stderr say more than the SDK's "connection closed".
func (c *conn) explain(err error) error {
	if c.proc != nil {
		if exit := c.proc.exitErr(100 * time.Millisecond); exit != nil {
			return fmt.Errorf("%w: %w", ErrDisconnected, exit)
		}
	}
	if errors.Is(err, sdk.ErrConnectionClosed) {
		return fmt.Errorf("%w: %w", ErrDisconnected, err)
	}
	return err
}

func (c *conn) isClosed() bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.closed
}

func (c *conn) close() error {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return nil
	}
	c.closed = true
	c.mu.Unlock()

	if c.proc != nil {
		// The process owns the pipes the session reads: stopping it ends
		// the session too.
		err := c.proc.stop(c.session)
		if err != nil {
			return fmt.Errorf("stopping mcp server %q: %w", c.server.Name, err)
		}
		return nil
	}
	if c.session != nil {
		if err := c.session.Close(); err != nil {
			return fmt.Errorf("closing mcp server %q: %w", c.server.Name, err)
		}
	}
	return nil
}

// headerTransport adds fixed headers to every request.
type headerTransport struct {
	headers map[string]string
	next    http.RoundTripper
}

func (t headerTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if len(t.headers) == 0 {
		return t.next.RoundTrip(r)
	}
	r = r.Clone(r.Context()) // a RoundTripper must not modify the request
	for k, v := range t.headers {
		r.Header.Set(k, v)
	}
	return t.next.RoundTrip(r)
}

// version is Cove's module version, sent to servers as the client's.
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		return bi.Main.Version
	}
	return "devel"
}
