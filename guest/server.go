// Package guest is Cove's in-sandbox daemon (`cove guest`) and its client.
//
// The daemon is the first process of every sandbox, whatever isolates it.
// It serves the process and filesystem APIs over one HTTP listener (a unix
// socket for local sandboxes, TCP inside a pod) with Connect RPC services
// wire-compatible with E2B's envd, envd's /health and /files endpoints, and
// a few Cove extensions (workspace tar, port tunnels). The client side
// (Client, Session) turns that API into a sandbox.Session, so every runtime
// only has to start the daemon and hand over a connection to it.
//
// This package holds the daemon's assembly (Server, Main: the listener,
// the access token, the environment, port tunnels) and the client; the
// two services are guest/internal/fsys and guest/internal/procs, and what
// both sides of the wire share (header names, the sentinel errors' wire
// forms) is guest/internal/wire.
package guest

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/guest/gen/filesystem/filesystemconnect"
	"github.com/cove-sandbox/cove/guest/gen/process/processconnect"
	"github.com/cove-sandbox/cove/guest/internal/fsys"
	"github.com/cove-sandbox/cove/guest/internal/journal"
	"github.com/cove-sandbox/cove/guest/internal/procs"
	"github.com/cove-sandbox/cove/guest/internal/sudo"
	"github.com/cove-sandbox/cove/guest/internal/wire"
)

// Config configures a daemon.
type Config struct {
	// Root is the host directory that is the sandbox's "/". Inside real
	// isolation it is "/"; when the daemon runs as a plain child process
	// it is a temporary directory. Every file path is confined to it.
	Root string
	// Workdir is the sandbox path relative paths and processes without a
	// cwd start in (the workspace root).
	Workdir string
	// AccessToken, when set, must be presented in X-Access-Token on every
	// request but /health.
	AccessToken string
	// Env is added to every process's environment.
	Env map[string]string
	// KeepAlive is how often long streams get a keepalive event; 0 means
	// 30s.
	KeepAlive time.Duration
	// OutputBuffer bounds the output kept per process for a reattaching
	// client; 0 means 4 MiB.
	OutputBuffer int
	// User is the default user processes run as ("" means the daemon's own).
	User string
	// Reap makes the daemon wait for every child, as pid 1 must; only the
	// real daemon sets it, since it steals children from any other code
	// in the same process.
	Reap bool
	// OOMCounter, when set, reads the sandbox's count of OOM kills (the
	// runtime may have opened its cgroup file before hiding /sys);
	// otherwise the daemon finds its memory cgroup through /proc.
	OOMCounter func() int64
	// Spawn, when set, starts every process the daemon runs, in place of
	// cmd.Start: the runtime may want them born somewhere the daemon is
	// not (the local runtime starts them in a cgroup of their own, from a
	// thread that joined it, so they cannot take the daemon down with
	// them). It must start cmd as cmd.Start would, and return its error.
	Spawn func(cmd *exec.Cmd) error
	// SudoSocket, when set, is where the daemon serves sudo for the
	// users a request's SudoHeader names (see sudo.go); "" gives no sudo.
	// Only a daemon whose Root is "/" may set it.
	SudoSocket string
	// Logger receives the daemon's logs; nil discards them.
	Logger *slog.Logger
}

// Server is the daemon. Create it with NewServer, serve Handler.
type Server struct {
	cfg   Config
	log   *slog.Logger
	procs *procs.Manager
	fs    *fsys.Service
	// journal is the daemon's own log for the sandbox's owner (logs.go).
	journal *journal.Journal

	// envMu guards env: Config.Env plus what POST /init added.
	envMu sync.RWMutex
	env   map[string]string

	sudo *sudo.Server // nil without Config.SudoSocket
}

// NewServer prepares a daemon from cfg.
func NewServer(cfg Config) (*Server, error) {
	if cfg.Root == "" {
		cfg.Root = "/"
	}
	root, err := filepath.Abs(cfg.Root)
	if err != nil {
		return nil, fmt.Errorf("resolving root %q: %w", cfg.Root, err)
	}
	if r, err := filepath.EvalSymlinks(root); err == nil {
		root = r
	}
	cfg.Root = root
	if cfg.Workdir == "" {
		cfg.Workdir = "/"
	}
	if cfg.KeepAlive <= 0 {
		cfg.KeepAlive = 30 * time.Second
	}
	if cfg.OutputBuffer <= 0 {
		cfg.OutputBuffer = 4 << 20
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.Spawn == nil {
		cfg.Spawn = (*exec.Cmd).Start
	}
	s := &Server{cfg: cfg, log: cfg.Logger, env: map[string]string{}, journal: journal.New()}
	for k, v := range cfg.Env {
		s.env[k] = v
	}
	s.fs = fsys.New(fsys.Config{Root: cfg.Root, Workdir: cfg.Workdir, User: cfg.User, KeepAlive: cfg.KeepAlive, Logger: cfg.Logger})
	s.procs = procs.New(procs.Config{
		Workdir: cfg.Workdir, KeepAlive: cfg.KeepAlive, OutputBuffer: cfg.OutputBuffer, Reap: cfg.Reap,
		OOMCounter: cfg.OOMCounter, Spawn: cfg.Spawn, FS: s.fs, Env: s.copyEnv, Journal: s.journal,
	})
	s.sudo = s.newSudo()
	s.journal.Add("info", "sandbox daemon started", "workdir", cfg.Workdir)
	return s, nil
}

// Handler returns the daemon's HTTP handler: the Connect services, envd's
// HTTP endpoints and Cove's extensions.
func (s *Server) Handler() http.Handler {
	mux := http.NewServeMux()
	opts := connect.WithHandlerOptions(connect.WithInterceptors(s.authInterceptor()))
	procPath, procHandler := processconnect.NewProcessHandler(s.procs, opts)
	mux.Handle(procPath, procs.WithLastFlush(procHandler))
	mux.Handle(filesystemconnect.NewFilesystemHandler(s.fs, opts))
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusNoContent)
	})
	mux.Handle("POST /init", s.requireToken(http.HandlerFunc(s.initVars)))
	mux.Handle("GET /envs", s.requireToken(http.HandlerFunc(s.envVars)))
	mux.Handle("GET /files", s.requireToken(http.HandlerFunc(s.fs.Download)))
	mux.Handle("POST /files", s.requireToken(http.HandlerFunc(s.fs.Upload)))
	mux.Handle("GET /cove/tar", s.requireToken(http.HandlerFunc(s.fs.TarDownload)))
	mux.Handle("POST /cove/tar", s.requireToken(http.HandlerFunc(s.fs.TarUpload)))
	mux.Handle("POST /cove/detach", s.requireToken(http.HandlerFunc(s.procs.DetachStream)))
	mux.Handle("GET /cove/port/{port}", s.requireToken(http.HandlerFunc(s.tunnel)))
	mux.Handle("GET /cove/logs", s.requireToken(http.HandlerFunc(s.logs)))
	return fsys.WithConfine(s.withSudo(mux))
}

// Serve serves the daemon on l until ctx ends, then closes running
// processes' streams and returns.
func (s *Server) Serve(ctx context.Context, l net.Listener) error {
	return s.ServeGrace(ctx, l, 2*time.Second)
}

// ServeGrace is Serve, with grace as how long requests in flight may
// finish once ctx is done; then every connection is closed, streams
// included (their processes keep running, their output buffered for the
// next attach). A grace of 0 closes them at once: a gVisor sandbox's
// daemon drops its host connections so the sandbox can be checkpointed.
func (s *Server) ServeGrace(ctx context.Context, l net.Listener, grace time.Duration) error {
	hs := &http.Server{
		Handler:           s.Handler(),
		ReadHeaderTimeout: 30 * time.Second,
		Protocols:         new(http.Protocols),
	}
	// Unencrypted HTTP/2 lets many streams share one unix-socket
	// connection; HTTP/1.1 stays available for plain clients.
	hs.Protocols.SetHTTP1(true)
	hs.Protocols.SetUnencryptedHTTP2(true)
	tl := &trackedListener{Listener: l, conns: map[*trackedConn]struct{}{}}
	closed := make(chan struct{})
	go func() {
		defer close(closed)
		<-ctx.Done()
		shutdown, cancel := context.WithTimeout(context.WithoutCancel(ctx), grace)
		defer cancel()
		if hs.Shutdown(shutdown) != nil {
			hs.Close()
		}
		tl.closeAll() // tunnels, which the server no longer tracks once hijacked
	}()
	err := hs.Serve(tl)
	if err == http.ErrServerClosed {
		<-closed // every connection is closed
		return nil
	}
	return err
}

// Close kills every process the daemon started.
func (s *Server) Close() {
	s.procs.CloseAll()
	s.fs.CloseWatchers()
	if s.sudo != nil {
		s.sudo.Close()
	}
}

// TokenEqual reports, in constant time, whether got is the token want.
// An empty want matches nothing, not even an empty got: a caller that
// has no token to ask for decides for itself what that means.
func TokenEqual(got, want string) bool {
	return want != "" && subtle.ConstantTimeCompare([]byte(got), []byte(want)) == 1
}

// HasAccessToken reports whether h carries the access token token in
// X-Access-Token, by TokenEqual's rules. It is the one check of the
// header, for the daemon and for the proxies in front of it.
func HasAccessToken(h http.Header, token string) bool {
	return TokenEqual(h.Get(AccessTokenHeader), token)
}

// tokenOK reports whether a request with headers h may reach the daemon:
// any may when no access token is configured.
func (s *Server) tokenOK(h http.Header) bool {
	return s.cfg.AccessToken == "" || HasAccessToken(h, s.cfg.AccessToken)
}

func (s *Server) requireToken(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !s.tokenOK(r.Header) {
			wire.WriteError(w, http.StatusUnauthorized, "missing or wrong access token: send it in the X-Access-Token header")
			return
		}
		h.ServeHTTP(w, r)
	})
}

func (s *Server) authInterceptor() connect.Interceptor {
	return &authInterceptor{s: s}
}

type authInterceptor struct{ s *Server }

func (a *authInterceptor) check(h http.Header) error {
	if !a.s.tokenOK(h) {
		return connect.NewError(connect.CodeUnauthenticated, fmt.Errorf("missing or wrong access token: send it in the %s header", AccessTokenHeader))
	}
	return nil
}

func (a *authInterceptor) WrapUnary(next connect.UnaryFunc) connect.UnaryFunc {
	return func(ctx context.Context, req connect.AnyRequest) (connect.AnyResponse, error) {
		if err := a.check(req.Header()); err != nil {
			return nil, err
		}
		return next(ctx, req)
	}
}

func (a *authInterceptor) WrapStreamingClient(next connect.StreamingClientFunc) connect.StreamingClientFunc {
	return next
}

func (a *authInterceptor) WrapStreamingHandler(next connect.StreamingHandlerFunc) connect.StreamingHandlerFunc {
	return func(ctx context.Context, conn connect.StreamingHandlerConn) error {
		if err := a.check(conn.RequestHeader()); err != nil {
			return err
		}
		return next(ctx, conn)
	}
}

// initVars serves envd's POST /init: environment variables every later
// process gets (merged over the current ones). The other fields envd
// takes there (time sync, volume mounts) do not apply to Cove's
// sandboxes and are ignored.
func (s *Server) initVars(w http.ResponseWriter, r *http.Request) {
	var body struct {
		EnvVars map[string]string `json:"envVars"`
	}
	if r.ContentLength != 0 {
		if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&body); err != nil {
			wire.WriteError(w, http.StatusBadRequest, "malformed JSON body: want {\"envVars\": {\"NAME\": \"value\"}}")
			return
		}
	}
	for k := range body.EnvVars {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			wire.WriteError(w, http.StatusBadRequest, fmt.Sprintf("environment variable name %q is not valid", k))
			return
		}
	}
	s.envMu.Lock()
	for k, v := range body.EnvVars {
		s.env[k] = v
	}
	s.envMu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// copyEnv copies the variables every process gets into env.
func (s *Server) copyEnv(env map[string]string) {
	s.envMu.RLock()
	defer s.envMu.RUnlock()
	for k, v := range s.env {
		env[k] = v
	}
}

// envVars serves envd's GET /envs: the variables every process gets.
func (s *Server) envVars(w http.ResponseWriter, r *http.Request) {
	s.envMu.RLock()
	out := maps.Clone(s.env)
	s.envMu.RUnlock()
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(out)
}

// trackedListener keeps every connection it accepted until it closes, so
// that ServeGrace can close them all: http.Server forgets a connection
// it hands to a handler (a tunnel).
type trackedListener struct {
	net.Listener
	mu    sync.Mutex
	conns map[*trackedConn]struct{}
}

func (l *trackedListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	tc := &trackedConn{Conn: c, l: l}
	l.mu.Lock()
	l.conns[tc] = struct{}{}
	l.mu.Unlock()
	return tc, nil
}

func (l *trackedListener) closeAll() {
	l.mu.Lock()
	conns := make([]*trackedConn, 0, len(l.conns))
	for c := range l.conns {
		conns = append(conns, c)
	}
	l.mu.Unlock()
	for _, c := range conns {
		c.Close()
	}
}

type trackedConn struct {
	net.Conn
	l *trackedListener
}

func (c *trackedConn) Close() error {
	c.l.mu.Lock()
	delete(c.l.conns, c)
	c.l.mu.Unlock()
	return c.Conn.Close()
}

// CloseWrite half-closes the connection where it can (a tunnel's end).
func (c *trackedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return c.Conn.Close()
}
