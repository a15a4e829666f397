// Package server is `cove serve`'s HTTP front doors over the sandbox
// service (package fleet): the /v1 JSON API (API keys per team,
// sandboxes, exec streams, files, snapshots, exposed ports, usage), the
// E2B API (server/e2b), the proxy to ports inside sandboxes, and the web
// UI. Handlers translate between HTTP and fleet; the domain (quotas,
// lifecycle, metering, records) is fleet's. The store is the truth: a
// restarted server picks up where it was.
package server

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/egress"
	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/fleet/lease"
	"github.com/cove-sandbox/cove/runs"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/e2b"
	"github.com/cove-sandbox/cove/server/internal/idempotency"
	"github.com/cove-sandbox/cove/server/internal/metrics"
	"github.com/cove-sandbox/cove/server/internal/proxy"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

// Config configures a Server. Zero values mean the defaults.
type Config struct {
	// Runtime, Store, DataDir, the TTLs, Retention, Prices, Now and the
	// pids limits make the sandbox service (package fleet) New builds;
	// Start and Close run and stop it.
	Runtime sandbox.Runtime
	Store   store.Store
	// DataDir holds what the store does not: snapshot tars when the
	// store keeps no blobs (SQLite; PostgreSQL keeps them itself).
	DataDir string
	// Domain, when set, makes ports reachable as {port}-{id}.{Domain}
	// (wildcard DNS to this server).
	Domain string
	// E2BNetwork is the network of a sandbox made through the E2B API
	// whose create does not say (no allow_internet_access): "internet"
	// (the default, as E2B's) or "none". Cove's own API keeps none.
	E2BNetwork string
	// BaseURL is how clients reach this server ("http://127.0.0.1:7300"),
	// for the URLs the API returns.
	BaseURL string
	Logger  *slog.Logger
	// DefaultTTL applies when a create names none (30 min); MaxTTL caps
	// any TTL (7 days).
	DefaultTTL, MaxTTL time.Duration
	// Retention deletes stopped sandboxes this long after they stopped
	// (7 days); negative keeps them.
	Retention time.Duration
	// MaxBodyBytes caps JSON request bodies (1 MiB); MaxUploadBytes caps
	// file and tar uploads (1 GiB).
	MaxBodyBytes, MaxUploadBytes int64
	// Prices turn usage into cost in GET /v1/usage.
	Prices Prices
	// CPUByAllocation bills CPU by allocation (CPU limit x running
	// seconds) rather than the CPU used (fleet.Config's).
	CPUByAllocation bool
	// Now is the clock (tests move it).
	Now func() time.Time
	// Model is the model endpoint of agent runs (POST /v1/runs), and
	// Models makes their models (nil: the server runs no agents).
	Model  ModelConfig
	Models runs.ModelFactory
	// SecretKey seals team secrets and the web UI's sessions (32 bytes;
	// ReadSecretKeyFile); nil means the key in DataDir/secret.key, made
	// on first start. Replicas with data directories of their own share
	// one, or refuse each other's sessions.
	SecretKey []byte
	// OutboundAllow lists the non-public targets the server may connect
	// to on a tenant's behalf (a run's agent.base_url, webhooks, a
	// manifest's git_repo): CIDRs, addresses or host names, an address or
	// name with an optional ":port". Loopback, private, link-local,
	// multicast and other non-public addresses are refused otherwise;
	// cloud metadata endpoints always are (package egress).
	OutboundAllow []string
	// LookupHost resolves host names for those connections; nil is the
	// system resolver (tests name their own).
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// MaxPids is the largest pids limit a create may ask for (8192);
	// AllowUnlimitedPids lets a create ask for none (pids -1).
	MaxPids            int
	AllowUnlimitedPids bool
	// Lease, when set, says several servers share Store (replicas over
	// one PostgreSQL) and elects among them: one lifecycle loop (fleet),
	// one worker per agent run (runs), locks on records; and no API key
	// is cached (a key revoked on a peer stops working at once).
	// Holder names this server in it (lease.Holder() unless set).
	Lease  store.Leaser
	Holder string
}

// Prices are USD per unit of metered use (fleet's).
type Prices = fleet.Prices

// DefaultPrices are fleet's.
var DefaultPrices = fleet.DefaultPrices

// Server is the HTTP service. Create it with New, serve Handler, call
// Start for the background loops and Close at the end.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// patterns are the registered routes (set up once in New).
	patterns []string

	// fleet is the sandbox service every front door calls; it holds the
	// limits (MaxTTL) and the clock the Config gave.
	fleet *fleet.Fleet

	// errs answers failed requests (server/internal/web).
	errs *web.Errors
	// proxy forwards requests into sandboxes (server/internal/proxy);
	// e2b is the E2B API's front door (server/e2b).
	proxy *proxy.Proxy
	e2b   *e2b.API
	// idem makes creates with an Idempotency-Key safe to retry.
	idem *idempotency.Keys

	// keyMu guards keys, recently looked-up API keys by hash (auth.go).
	keyMu sync.Mutex
	keys  map[string]cachedKey

	metrics *metrics.Metrics
	// unreadyNow is whether the last GET /ready found this server
	// unable to serve (ready.go logs the changes).
	unreadyNow atomic.Bool

	// closingCtx ends when Close begins (streams watch it).
	closingCtx  context.Context
	stopClosing context.CancelFunc

	// runs is the agent runs service (runapi.go serves it).
	runs *runs.Service
	// egress vets connections made for tenants (package egress).
	egress *egress.Policy
}

// lifecycleInterval, when set, is the lifecycle loop's period of the
// fleet New makes (tests shorten it).
var lifecycleInterval time.Duration

// New returns a server; it does nothing until served.
func New(cfg Config) (*Server, error) {
	if cfg.Runtime == nil || cfg.Store == nil {
		return nil, fmt.Errorf("server: a runtime and a store are required: %w", sandbox.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	// The TTLs and the retention get their defaults from the fleet.
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = 1 << 30
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	switch cfg.E2BNetwork {
	case "":
		cfg.E2BNetwork = e2b.NetworkInternet
	case e2b.NetworkInternet, e2b.NetworkNone:
	default:
		return nil, fmt.Errorf("server: E2B network %q: want internet or none: %w", cfg.E2BNetwork, sandbox.ErrInvalid)
	}
	out, err := egress.New(cfg.OutboundAllow, cfg.LookupHost)
	if err != nil {
		return nil, err
	}
	if cfg.Lease != nil && cfg.Holder == "" {
		cfg.Holder = lease.Holder()
	}
	fl, err := fleet.New(fleet.Config{Runtime: cfg.Runtime, Store: cfg.Store, DataDir: cfg.DataDir, Logger: cfg.Logger,
		DefaultTTL: cfg.DefaultTTL, MaxTTL: cfg.MaxTTL, Retention: cfg.Retention, Prices: cfg.Prices, CPUByAllocation: cfg.CPUByAllocation, Now: cfg.Now,
		Egress: out, MaxPids: cfg.MaxPids, AllowUnlimitedPids: cfg.AllowUnlimitedPids, LifecycleInterval: lifecycleInterval,
		Lease: cfg.Lease, Holder: cfg.Holder})
	if err != nil {
		return nil, err
	}
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), fleet: fl,
		errs:    &web.Errors{Log: cfg.Logger, DataDir: cfg.DataDir},
		metrics: metrics.New(), keys: map[string]cachedKey{},
		egress: out}
	s.proxy = &proxy.Proxy{Fleet: fl, Log: cfg.Logger, Errs: s.errs, BaseURL: cfg.BaseURL, Domain: cfg.Domain}
	s.idem = idempotency.New(cfg.Store)
	s.e2b = e2b.New(e2b.Config{Fleet: fl, Proxy: s.proxy, Errs: s.errs, Log: cfg.Logger, Domain: cfg.Domain, Network: cfg.E2BNetwork,
		Idempotency:  s.idem,
		MaxBodyBytes: cfg.MaxBodyBytes, MaxUploadBytes: cfg.MaxUploadBytes, Created: s.metrics.Created,
		Authenticate: func(r *http.Request) (string, string, error) {
			c, msg, err := s.authenticate(r)
			if c == nil {
				return "", msg, err
			}
			return c.team, "", nil
		}})
	s.closingCtx, s.stopClosing = context.WithCancel(context.Background())
	s.runs, err = runs.New(runs.Config{Store: cfg.Store, Sandboxes: fl, Models: cfg.Models, Model: cfg.Model,
		Egress: out, SecretKey: cfg.SecretKey, DataDir: cfg.DataDir, Redact: s.tenantText, Logger: cfg.Logger, Now: cfg.Now,
		Lease: cfg.Lease, Holder: cfg.Holder})
	if err != nil {
		return nil, err
	}
	s.routes()
	return s, nil
}

// routes registers every endpoint. Each group lives in its own file.
func (s *Server) routes() {
	s.route("GET /health", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) }))
	s.route("GET /ready", http.HandlerFunc(s.ready))
	s.route("GET /openapi.json", http.HandlerFunc(s.openapi))
	s.route("GET /metrics", http.HandlerFunc(s.serveMetrics))
	s.keyRoutes()
	s.sandboxRoutes()
	s.ioRoutes()
	s.snapshotRoutes()
	s.portRoutes()
	s.usageRoutes()
	s.templateRoutes()
	s.guestRoutes()
	s.e2b.Routes(s.mux)
	s.runRoutes()
	s.secretRoutes()
	s.sessionRoutes()
	s.uiRoutes()
}

// handle registers an authenticated API endpoint.
func (s *Server) handle(pattern string, h func(w http.ResponseWriter, r *http.Request, c *caller)) {
	s.route(pattern, s.authed(h))
}

// route registers an endpoint and remembers its pattern, so a test can
// hold the OpenAPI document to the routes that exist.
func (s *Server) route(pattern string, h http.Handler) {
	s.patterns = append(s.patterns, pattern)
	s.mux.Handle(pattern, h)
}

// Handler is the server's HTTP handler: request ids, access logs, panics
// turned into 500s, port proxying by host name, then the routes.
func (s *Server) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get("X-Request-Id")
		if id == "" || len(id) > 64 {
			id = newID("req-")
		}
		w.Header().Set("X-Request-Id", id)
		r = web.WithRequestID(r, id)
		start := time.Now() // durations use the real clock, never a test's
		rec := &statusWriter{ResponseWriter: w, status: 200}
		defer func() {
			if p := recover(); p != nil {
				if p == http.ErrAbortHandler {
					panic(p)
				}
				s.log.Error("panic", "request_id", id, "method", r.Method, "path", r.URL.Path, "panic", p)
				if !rec.wrote {
					writeError(rec, r, http.StatusInternalServerError, api.CodeInternal, "internal error; quote request id "+id)
				}
			}
			s.metrics.Request(r, rec.status, time.Since(start))
			s.log.Debug("request", "request_id", id, "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start))
		}()
		if s.plainRefused(rec, r) {
			return
		}
		// E2B SDKs name the sandbox in headers when E2B_SANDBOX_URL
		// points here (server/e2b).
		if s.e2b.ServeByHeader(rec, r) {
			return
		}
		if s.servePortByHost(rec, r) {
			return
		}
		// What no route serves, E2B's clients get in E2B's error body.
		if s.e2b.ServeUnrouted(rec, r, E2BKeyPrefix, s.routed) {
			return
		}
		s.mux.ServeHTTP(rec, r)
	})
}

// routed reports whether a route of the mux serves r (a 405 for a known
// path is not one).
func (s *Server) routed(r *http.Request) bool {
	_, pattern := s.mux.Handler(r)
	return pattern != ""
}

// statusWriter records the status for logs and metrics, and passes
// through Flush and Hijack (streams, WebSockets, port tunnels).
type statusWriter struct {
	http.ResponseWriter
	status int
	wrote  bool
}

func (w *statusWriter) WriteHeader(code int) {
	if !w.wrote {
		w.status, w.wrote = code, true
	}
	w.ResponseWriter.WriteHeader(code)
}

func (w *statusWriter) Write(p []byte) (int, error) {
	w.wrote = true
	return w.ResponseWriter.Write(p)
}

func (w *statusWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

func (w *statusWriter) Flush() {
	if f, ok := w.ResponseWriter.(http.Flusher); ok {
		f.Flush()
	}
}

// Start runs the background loops: the fleet's (lifecycle policies and
// metering) and the agent runs' (the ones a previous server left working
// go on). Reconcile should have run first.
func (s *Server) Start() {
	s.runs.Start()
	s.fleet.Start()
}

// Reconcile makes the store and the runtime agree after a (re)start
// (fleet's Reconcile).
func (s *Server) Reconcile(ctx context.Context) error { return s.fleet.Reconcile(ctx) }

// Close stops the background loops. Sandboxes keep running: their
// supervisors outlive the server, and a new server picks them up.
func (s *Server) Close() error {
	s.stopClosing()
	s.fleet.Close()
	s.runs.Close()
	return nil
}

// closing reports whether Close has begun.
func (s *Server) closing() bool { return s.closingCtx.Err() != nil }

// streamContext is ctx, also ended when the server closes: open exec and
// attach streams then end with an error event a client can read, instead
// of being cut when the HTTP server gives up waiting for them.
func (s *Server) streamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	// AfterFunc registers without a goroutine per stream (exec's path).
	stop := context.AfterFunc(s.closingCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// The shared helpers of the front doors (server/internal/web), by the
// names this package's handlers use.

func writeJSON(w http.ResponseWriter, status int, v any) { web.WriteJSON(w, status, v) }

func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	web.WriteError(w, r, status, code, msg)
}

func requestID(r *http.Request) string { return web.RequestID(r) }

// fail answers a request that failed with err (see failure).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) { s.errs.Fail(w, r, err) }

// failure maps an error to its status, code and message: the sandbox
// sentinels to 4xx with their message (it says what was wrong), anything
// else to a 500 whose message is only the request id (the cause goes to
// the log).
func (s *Server) failure(r *http.Request, err error) (status int, code, msg string) {
	return s.errs.Failure(r, err)
}

// tenantText is text for a tenant: itself, or a reference when it holds
// host detail.
func (s *Server) tenantText(text string) string { return s.errs.TenantText(text) }

func decodeJSON(r io.Reader, v any) error { return web.DecodeJSON(r, v) }

func jsonMessage(err error) string { return web.JSONMessage(err) }

func newID(prefix string) string { return web.NewID(prefix) }

// decode reads a JSON body strictly: unknown fields, trailing data, wrong
// types and bodies over the limit are 4xx errors that say what to fix.
func (s *Server) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes)
	err := decodeJSON(r.Body, v)
	if err == nil {
		return true
	}
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, r, http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("the request body is over %d bytes", mbe.Limit))
		return false
	}
	writeError(w, r, http.StatusBadRequest, api.CodeInvalid, jsonMessage(err))
	return false
}

// begin records an open stream or connection to a sandbox (fleet's
// Begin).
func (s *Server) begin(id string) (end func()) { return s.fleet.Begin(id) }

// countIn and countOut meter bytes through the API and the proxy.
func (s *Server) countIn(id string, n int64)  { s.fleet.CountIn(id, n) }
func (s *Server) countOut(id string, n int64) { s.fleet.CountOut(id, n) }
