// Package server is `cove serve`: a multi-tenant sandbox service over one
// sandbox.Runtime and one store.Store. It serves the /v1 JSON API (API
// keys per team, sandboxes, exec streams, files, snapshots, exposed ports,
// usage), proxies HTTP and WebSocket traffic to ports inside sandboxes,
// enforces lifecycle policies (TTL, idle timeout, retention) and meters
// use. The store is the truth: a restarted server picks up where it was.
package server

import (
	"context"
	"crypto/cipher"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
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
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Config configures a Server. Zero values mean the defaults.
type Config struct {
	Runtime sandbox.Runtime
	Store   store.Store
	// DataDir holds what the store does not: snapshot tars.
	DataDir string
	// Domain, when set, makes ports reachable as {port}-{id}.{Domain}
	// (wildcard DNS to this server).
	Domain string
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
	// Now is the clock (tests move it).
	Now func() time.Time
	// Model is the model endpoint of agent runs (POST /v1/runs).
	Model ModelConfig
	// SecretKey seals team secrets (32 bytes); nil means the key in
	// DataDir/secret.key, made on first start.
	SecretKey []byte
	// OutboundAllow lists the non-public targets the server may connect
	// to on a tenant's behalf (a run's agent.base_url, webhooks, a
	// manifest's git_repo): CIDRs, addresses or host names, an address or
	// name with an optional ":port". Loopback, private, link-local,
	// multicast and other non-public addresses are refused otherwise;
	// cloud metadata endpoints always are (egress.go).
	OutboundAllow []string
	// LookupHost resolves host names for those connections; nil is the
	// system resolver (tests name their own).
	LookupHost func(ctx context.Context, host string) ([]netip.Addr, error)
	// MaxPids is the largest pids limit a create may ask for (8192);
	// AllowUnlimitedPids lets a create ask for none (pids -1).
	MaxPids            int
	AllowUnlimitedPids bool
}

// Prices are USD per unit of metered use.
type Prices struct {
	CPUSecond    float64 `json:"cpu_second"`
	MemoryGiBSec float64 `json:"memory_gib_second"`
	DiskGiBHour  float64 `json:"disk_gib_hour"`
	EgressGiB    float64 `json:"egress_gib"`
}

// DefaultPrices are in the range of hosted sandbox providers' list prices
// (per vCPU-second and GiB-second), for a self-hoster to replace with
// their own costs.
var DefaultPrices = Prices{CPUSecond: 0.000014, MemoryGiBSec: 0.0000045, DiskGiBHour: 0.0001, EgressGiB: 0.05}

// Server is the HTTP service. Create it with New, serve Handler, call
// Start for the background loops and Close at the end.
type Server struct {
	cfg Config
	log *slog.Logger
	mux *http.ServeMux
	// patterns are the registered routes (set up once in New).
	patterns []string

	// mu guards active (open streams and connections per sandbox),
	// traffic (bytes in and out per sandbox since the last meter) and
	// touched (activity not yet written to the store).
	mu      sync.Mutex
	active  map[string]int
	traffic map[string]*traffic
	touched map[string]time.Time
	// lastTouch is the latest activity seen per sandbox (kept after the
	// flush, so the lifecycle loop never misses one in flight).
	lastTouch map[string]time.Time
	// flushMu serialises flushTouches.
	flushMu sync.Mutex

	// sessMu guards sessions: the live session of each running sandbox,
	// kept so requests reuse its daemon connections (a new session per
	// request would dial the daemon each time).
	sessMu   sync.Mutex
	sessions map[string]cachedSession

	// keyMu guards keys, recently looked-up API keys by hash (auth.go).
	keyMu sync.Mutex
	keys  map[string]cachedKey

	// createMu serialises quota checks with the creates they admit.
	createMu sync.Mutex

	metrics *metrics
	done    chan struct{}
	// closingCtx ends when Close begins (streams watch it).
	closingCtx  context.Context
	stopClosing context.CancelFunc
	wg          sync.WaitGroup
	closed      atomic.Bool

	// runs are the agent runs in memory (runs.go).
	runs *runHub
	// egress vets connections made for tenants (egress.go).
	egress *egress.Policy
	// secretOnce loads the key that seals team secrets (secrets.go).
	secretOnce sync.Once
	sealer     cipher.AEAD
	secretErr  error
}

type traffic struct{ in, out atomic.Int64 }

// New returns a server; it does nothing until served.
func New(cfg Config) (*Server, error) {
	if cfg.Runtime == nil || cfg.Store == nil {
		return nil, fmt.Errorf("server: a runtime and a store are required: %w", sandbox.ErrInvalid)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.DefaultTTL == 0 {
		cfg.DefaultTTL = 30 * time.Minute
	}
	if cfg.MaxTTL == 0 {
		cfg.MaxTTL = 7 * 24 * time.Hour
	}
	if cfg.Retention == 0 {
		cfg.Retention = 7 * 24 * time.Hour
	}
	if cfg.MaxBodyBytes == 0 {
		cfg.MaxBodyBytes = 1 << 20
	}
	if cfg.MaxUploadBytes == 0 {
		cfg.MaxUploadBytes = 1 << 30
	}
	if cfg.Prices == (Prices{}) {
		cfg.Prices = DefaultPrices
	}
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.MaxPids == 0 {
		cfg.MaxPids = defaultMaxPids
	}
	if cfg.MaxPids < api.MinPids {
		return nil, fmt.Errorf("server: the largest pids limit %d is below the smallest a sandbox can run with, %d: %w", cfg.MaxPids, api.MinPids, sandbox.ErrInvalid)
	}
	cfg.BaseURL = strings.TrimSuffix(cfg.BaseURL, "/")
	out, err := egress.New(cfg.OutboundAllow, cfg.LookupHost)
	if err != nil {
		return nil, err
	}
	cfg.Store = newCachedStore(cfg.Store)
	s := &Server{cfg: cfg, log: cfg.Logger, mux: http.NewServeMux(), active: map[string]int{},
		traffic: map[string]*traffic{}, metrics: newMetrics(), done: make(chan struct{}), sessions: map[string]cachedSession{}, keys: map[string]cachedKey{}, touched: map[string]time.Time{}, lastTouch: map[string]time.Time{},
		runs: newRunHub(), egress: out}
	s.closingCtx, s.stopClosing = context.WithCancel(context.Background())
	s.routes()
	return s, nil
}

// routes registers every endpoint. Each group lives in its own file.
func (s *Server) routes() {
	s.route("GET /health", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { writeJSON(w, 200, map[string]string{"status": "ok"}) }))
	s.route("GET /openapi.json", http.HandlerFunc(s.openapi))
	s.route("GET /metrics", http.HandlerFunc(s.serveMetrics))
	s.keyRoutes()
	s.sandboxRoutes()
	s.ioRoutes()
	s.snapshotRoutes()
	s.portRoutes()
	s.usageRoutes()
	s.guestRoutes()
	s.e2bRoutes()
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
		r = r.WithContext(context.WithValue(r.Context(), reqIDKey{}, id))
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
			s.metrics.request(r, rec.status, time.Since(start))
			s.log.Debug("request", "request_id", id, "method", r.Method, "path", r.URL.Path, "status", rec.status, "duration", time.Since(start))
		}()
		// E2B SDKs name the sandbox in headers when E2B_SANDBOX_URL
		// points here (e2b_envd.go).
		if s.serveE2BByHeader(rec, r) {
			return
		}
		if s.servePortByHost(rec, r) {
			return
		}
		s.mux.ServeHTTP(rec, r)
	})
}

type reqIDKey struct{}

func requestID(r *http.Request) string {
	id, _ := r.Context().Value(reqIDKey{}).(string)
	return id
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

// Start runs the background loops: lifecycle policies and metering.
// Reconcile should have run first.
func (s *Server) Start() {
	s.recoverRuns(context.Background())
	s.wg.Add(3)
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(runFlushInterval)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				return
			case <-t.C:
				s.flushRuns(context.Background())
			}
		}
	}()
	go func() {
		defer s.wg.Done()
		s.lifecycleLoop()
	}()
	go func() {
		defer s.wg.Done()
		t := time.NewTicker(touchInterval)
		defer t.Stop()
		for {
			select {
			case <-s.done:
				s.flushTouches()
				return
			case <-t.C:
				s.flushTouches()
			}
		}
	}()
}

// Close stops the background loops. Sandboxes keep running: their
// supervisors outlive the server, and a new server picks them up.
func (s *Server) Close() error {
	if s.closed.CompareAndSwap(false, true) {
		close(s.done)
		s.stopClosing()
	}
	s.wg.Wait()
	s.closeRuns()
	return nil
}

// closing reports whether Close has begun.
func (s *Server) closing() bool { return s.closed.Load() }

// streamContext is ctx, also ended when the server closes: open exec and
// attach streams then end with an error event a client can read, instead
// of being cut when the HTTP server gives up waiting for them.
func (s *Server) streamContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancel(ctx)
	// AfterFunc registers without a goroutine per stream (exec's path).
	stop := context.AfterFunc(s.closingCtx, cancel)
	return ctx, func() { stop(); cancel() }
}

// writeJSON writes v with status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// writeError writes the {code, message, request_id} body.
func writeError(w http.ResponseWriter, r *http.Request, status int, code, msg string) {
	writeJSON(w, status, api.Error{Code: code, Message: msg, RequestID: requestID(r)})
}

// fail answers a request that failed with err (see failure).
func (s *Server) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, code, msg := s.failure(r, err)
	writeError(w, r, status, code, msg)
}

// failure maps an error to its status, code and message: the sandbox
// sentinels to 4xx with their message (it says what was wrong), anything
// else to a 500 whose message is only the request id (the cause goes to
// the log).
func (s *Server) failure(r *http.Request, err error) (status int, code, msg string) {
	status, code = statusOf(err)
	msg = err.Error()
	switch {
	case status == http.StatusInternalServerError:
		s.log.Error("internal error", "request_id", requestID(r), "method", r.Method, "path", r.URL.Path, "err", err)
		msg = "internal error; quote request id " + requestID(r)
	case status == http.StatusServiceUnavailable || s.hostDetail(msg):
		// The runtime's and the daemon's words: host paths, log
		// lines (hostdetail.go).
		s.log.Warn("a failure's detail kept from the tenant", "request_id", requestID(r), "method", r.Method, "path", r.URL.Path, "status", status, "err", err)
		msg = publicMessage(status, code) + "; quote request id " + requestID(r)
	}
	return status, code, msg
}

func statusOf(err error) (int, string) {
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return http.StatusRequestEntityTooLarge, api.CodeTooLarge
	case errors.Is(err, errQuota):
		return http.StatusTooManyRequests, api.CodeLimit
	case errors.Is(err, context.DeadlineExceeded):
		return http.StatusServiceUnavailable, api.CodeUnavailable
	}
	return api.CodeOf(err)
}

var errQuota = errors.New("quota exceeded")

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

// decodeJSON reads one JSON object from r into v, refusing unknown
// fields and anything after the object.
func decodeJSON(r io.Reader, v any) error {
	dec := json.NewDecoder(r)
	dec.DisallowUnknownFields()
	err := dec.Decode(v)
	if err == nil && dec.More() {
		err = errors.New("data after the JSON object")
	}
	return err
}

// jsonMessage says what is wrong with a JSON body that did not decode.
func jsonMessage(err error) string {
	var te *json.UnmarshalTypeError
	var se *json.SyntaxError
	msg := err.Error()
	switch {
	case errors.Is(err, io.EOF):
		msg = "the request body is empty; send a JSON object"
	case errors.Is(err, io.ErrUnexpectedEOF):
		msg = "malformed JSON: the body ends before the object does"
	case errors.As(err, &te):
		msg = fmt.Sprintf("field %q must be %s, not %s", te.Field, te.Type, te.Value)
	case errors.As(err, &se):
		msg = fmt.Sprintf("malformed JSON at byte %d: %v", se.Offset, se)
	case strings.HasPrefix(msg, "json: unknown field "):
		msg = "unknown field " + strings.TrimPrefix(msg, "json: unknown field ") + "; see /openapi.json"
	}
	return msg
}

// newID returns prefix + 12 random hex digits.
func newID(prefix string) string {
	b := make([]byte, 6)
	rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// begin records an open stream or connection to a sandbox: it counts as
// activity for the idle timeout until end is called.
func (s *Server) begin(id string) (end func()) {
	s.mu.Lock()
	s.active[id]++
	s.mu.Unlock()
	s.touch(id)
	var once sync.Once
	return func() {
		once.Do(func() {
			s.mu.Lock()
			if s.active[id]--; s.active[id] <= 0 {
				delete(s.active, id)
			}
			s.mu.Unlock()
			s.touch(id)
		})
	}
}

func (s *Server) busy(id string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.active[id] > 0
}

// touch records activity on a sandbox now. The store hears of it within
// touchInterval (flushTouches): a write per request would put an fsync on
// every exec's path, and idle timeouts are minutes long.
func (s *Server) touch(id string) {
	now := s.cfg.Now()
	s.mu.Lock()
	if now.After(s.touched[id]) {
		s.touched[id] = now
	}
	if now.After(s.lastTouch[id]) {
		s.lastTouch[id] = now
	}
	s.mu.Unlock()
}

// lastActivity is the latest activity on a sandbox this server saw,
// whether or not it has reached the store yet.
func (s *Server) lastActivity(id string) time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastTouch[id]
}

// touchInterval is how often recorded activity reaches the store.
var touchInterval = time.Second

// flushTouches writes the activity recorded since the last flush. One
// flush runs at a time, so one that returns has seen every touch before
// it written (the lifecycle loop relies on it).
func (s *Server) flushTouches() {
	s.flushMu.Lock()
	defer s.flushMu.Unlock()
	s.mu.Lock()
	pending := s.touched
	s.touched = map[string]time.Time{}
	s.mu.Unlock()
	for id, t := range pending {
		if err := s.cfg.Store.TouchSandbox(context.Background(), id, t); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
			s.log.Warn("recording activity", "sandbox", id, "err", err)
		}
	}
}

// countIn and countOut meter bytes through the API and the proxy.
func (s *Server) countIn(id string, n int64)  { s.trafficOf(id).in.Add(n) }
func (s *Server) countOut(id string, n int64) { s.trafficOf(id).out.Add(n) }

func (s *Server) trafficOf(id string) *traffic {
	s.mu.Lock()
	defer s.mu.Unlock()
	t := s.traffic[id]
	if t == nil {
		t = &traffic{}
		s.traffic[id] = t
	}
	return t
}

// takeTraffic returns and resets a sandbox's byte counts.
func (s *Server) takeTraffic(id string) (in, out int64) {
	s.mu.Lock()
	t := s.traffic[id]
	s.mu.Unlock()
	if t == nil {
		return 0, 0
	}
	return t.in.Swap(0), t.out.Swap(0)
}

type cachedSession struct {
	sess    sandbox.Session
	started time.Time // the record's StartedAt when cached: a resume makes a new one
}

// runtimeSession returns the live session of a running sandbox, reusing
// the one made since it last started.
func (s *Server) runtimeSession(ctx context.Context, rec store.Sandbox) (sandbox.Session, error) {
	s.sessMu.Lock()
	c, ok := s.sessions[rec.ID]
	s.sessMu.Unlock()
	if ok && c.started.Equal(rec.StartedAt) {
		return c.sess, nil
	}
	sess, err := s.cfg.Runtime.Get(ctx, rec.ID)
	if err != nil {
		return nil, err
	}
	s.sessMu.Lock()
	s.sessions[rec.ID] = cachedSession{sess: sess, started: rec.StartedAt}
	s.sessMu.Unlock()
	return sess, nil
}

// forgetSession drops a sandbox's cached session (it stopped or went).
func (s *Server) forgetSession(id string) {
	s.sessMu.Lock()
	c, ok := s.sessions[id]
	delete(s.sessions, id)
	s.sessMu.Unlock()
	if ok {
		if cl, ok := c.sess.(io.Closer); ok {
			cl.Close()
		}
	}
}
