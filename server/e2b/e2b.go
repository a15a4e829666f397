// Package e2b is the E2B-compatible front door of `cove serve`: E2B's
// control plane (REST) and the routing of envd's and ports' traffic into
// sandboxes, over the same fleet as /v1.
//
// E2B's SDKs talk to two services: a control
// plane (REST: create, list, get, kill, pause, connect, timeouts) at
// E2B_API_URL, and each sandbox's envd (Connect RPC process and
// filesystem services, /files) at {port}-{id}.{domain} or, with
// E2B_SANDBOX_URL, at one URL that names the sandbox and port in the
// E2b-Sandbox-Id and E2b-Sandbox-Port headers. This server is both: the
// control plane's routes (sandboxes.go) sit beside /v1 over the same
// records, runtime and quotas, with snapshots and forks (snapshots.go),
// and envd traffic (envd.go) is routed to the sandbox's own daemon,
// which speaks envd's protocol.
//
// Paths, JSON field names, status codes and error bodies ({"code": 404,
// "message": "..."}) are E2B's, so the unmodified SDK raises the same
// error classes it raises against E2B. E2B's paused is Cove's stopped:
// the disk is kept, and on the gvisor tier (a create's isolation field,
// or metadata cove.isolation) memory and processes too, as E2B's
// keepMemory; a native sandbox's processes end. A sandbox made with
// autoResume is resumed by traffic to it (autoresume.go). The routes
// are E2B's (documented by E2B's own OpenAPI spec) and are left out of
// Cove's /openapi.json.
//
// What E2B keeps per sandbox and Cove's records do not have (the envd
// access token, the traffic access token, whether traffic resumes it,
// that the sandbox was made through this API) is kept in the record's
// labels under cove.e2b, which the /v1 API never shows and which never
// reach the runtime. Pause at the timeout is the record's OnExpire stop.
package e2b

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/idempotency"
	"github.com/cove-sandbox/cove/server/internal/proxy"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

const (
	// madeLabel marks a sandbox made through the E2B API: its ports are
	// reached as E2B's are (any port, no expose step).
	madeLabel = "cove.e2b"
	// envdTokenLabel holds the envd access token (X-Access-Token).
	envdTokenLabel = "cove.e2b.envd-token"
	// trafficTokenLabel holds the traffic access token of a sandbox
	// whose ports are not public (e2b-traffic-access-token).
	trafficTokenLabel = "cove.e2b.traffic-token"

	// EnvdVersion is the envd version the SDK is told: it gates SDK
	// features by it. 0.6.3 has everything Cove's daemon serves
	// (octet-stream uploads, stdin close, watch events with entries) and
	// nothing it does not but file metadata, which the proxy refuses
	// with a clear error (envd.go).
	EnvdVersion = "0.6.3"
	// EnvdPort is envd's port in host names and E2b-Sandbox-Port.
	EnvdPort = 49983
	envdPort = EnvdPort
	// clientID is the clientID field E2B's responses still carry.
	clientID = "cove"
)

// Config is what the E2B front door works with. Zero values are not
// defaults: the server fills every field.
type Config struct {
	Fleet *fleet.Fleet
	Proxy *proxy.Proxy
	Errs  *web.Errors
	Log   *slog.Logger
	// Domain, when set, is the domain sandboxes' host names are under;
	// without it, localhost and the port a request came to
	// (routes_misc.go).
	Domain string
	// Network is the network of a sandbox whose create does not say
	// (allow_internet_access absent): "internet", E2B's default, or
	// "none"; "" is "internet".
	Network string
	// MaxBodyBytes caps JSON bodies; MaxUploadBytes envd's uploads.
	MaxBodyBytes, MaxUploadBytes int64
	// Authenticate finds the team of a request by its API key: "" and
	// a message that says why when it has none or a wrong one; err is
	// for a store that failed.
	Authenticate func(r *http.Request) (team, msg string, err error)
	// Created observes how long a create took (the server's metrics).
	Created func(time.Duration)
	// Idempotency makes creates with an Idempotency-Key safe to retry
	// (the server's, shared with /v1).
	Idempotency *idempotency.Keys
}

// API serves the E2B API. Make it with New, register its control plane
// with Routes, and pass it sandbox traffic with ServeByHeader and
// ServeByHost.
type API struct {
	cfg   Config
	fleet *fleet.Fleet
	proxy *proxy.Proxy
	log   *slog.Logger
}

// New returns the E2B front door.
func New(cfg Config) *API {
	return &API{cfg: cfg, fleet: cfg.Fleet, proxy: cfg.Proxy, log: cfg.Log}
}

// caller is the team a request was authenticated as.
type caller struct{ team string }

// Routes registers the control plane on mux. Its routes are E2B's API,
// not part of Cove's OpenAPI document (the test that holds that document
// to the routes skips them).
func (s *API) Routes(mux *http.ServeMux) {
	h := func(pattern string, fn func(w http.ResponseWriter, r *http.Request, c *caller)) {
		mux.Handle(pattern, s.authed(fn))
	}
	h("POST /sandboxes", s.create)
	h("POST /v2/sandboxes", s.create)
	h("GET /sandboxes", s.listV1)
	h("GET /v2/sandboxes", s.list)
	h("GET /sandboxes/{sandboxID}", s.get)
	h("DELETE /sandboxes/{sandboxID}", s.kill)
	h("POST /sandboxes/{sandboxID}/timeout", s.setTimeout)
	h("POST /sandboxes/{sandboxID}/refreshes", s.refresh)
	h("POST /sandboxes/{sandboxID}/pause", s.pause)
	h("POST /sandboxes/{sandboxID}/connect", s.connect)
	h("POST /v2/sandboxes/{sandboxID}/connect", s.connect)
	h("GET /sandboxes/{sandboxID}/metrics", s.sandboxMetrics)
	s.snapshotRoutes(h)
	h("GET /sandboxes/metrics", s.metricsOf)
	h("GET /sandboxes/{sandboxID}/logs", s.logsV1)
	h("GET /v2/sandboxes/{sandboxID}/logs", s.logsV2)
}

// errorBody is E2B's error body.
type errorBody struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

func writeError(w http.ResponseWriter, status int, msg string) {
	web.WriteJSON(w, status, errorBody{Code: status, Message: msg})
}

// fail is fail in E2B's body.
func (s *API) fail(w http.ResponseWriter, r *http.Request, err error) {
	status, _, msg := s.cfg.Errs.Failure(r, err)
	writeError(w, status, msg)
}

// authed authenticates as authed does (E2B's SDKs send X-API-Key),
// answering in E2B's error body.
func (s *API) authed(h func(w http.ResponseWriter, r *http.Request, c *caller)) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		team, msg, err := s.cfg.Authenticate(r)
		switch {
		case err != nil:
			s.fail(w, r, err)
		case team == "":
			if web.KeyFrom(r) == "" {
				msg = "no API key: set E2B_API_KEY to a key of this server (cove key create --e2b makes one); it is sent as X-API-Key"
			}
			writeError(w, http.StatusUnauthorized, msg)
		default:
			h(w, r, &caller{team: team})
		}
	})
}

// decode reads an optional JSON body into v. Unknown fields are
// ignored, as E2B's API does, so newer SDKs that send more still work;
// the fields Cove cannot honour are refused by the handlers by name.
func (s *API) decode(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			writeError(w, http.StatusRequestEntityTooLarge, fmt.Sprintf("the request body is over %d bytes", mbe.Limit))
			return false
		}
		writeError(w, http.StatusBadRequest, "reading the request body: "+err.Error())
		return false
	}
	if len(strings.TrimSpace(string(data))) == 0 {
		return true
	}
	if err := json.Unmarshal(data, v); err != nil {
		writeError(w, http.StatusBadRequest, "Error when parsing request: "+web.JSONMessage(err))
		return false
	}
	return true
}

// newToken returns 128 random bits, hex.
func newToken() string {
	b := make([]byte, 16)
	rand.Read(b)
	return hex.EncodeToString(b)
}

// gone reports whether E2B would no longer know a sandbox: its
// timeout passed and it is to be deleted then (the lifecycle loop does so
// within a few seconds; until then the E2B API already answers as after).
func (s *API) gone(rec store.Sandbox) bool { return s.fleet.Expired(rec) }

// record loads the caller's sandbox named in the path, answering 404
// in E2B's words when it is unknown, another team's, or gone.
func (s *API) record(w http.ResponseWriter, r *http.Request, c *caller) (store.Sandbox, bool) {
	id := r.PathValue("sandboxID")
	rec, err := s.fleet.Get(r.Context(), c.team, id)
	if err == nil && s.gone(rec) {
		err = sandbox.ErrNotFound
	}
	if errors.Is(err, sandbox.ErrNotFound) {
		writeError(w, http.StatusNotFound, fmt.Sprintf("sandbox %q not found", id))
		return rec, false
	}
	if err != nil {
		s.fail(w, r, err)
		return rec, false
	}
	return rec, true
}

// tokens returns the sandbox's envd access token, giving it one when
// it has none (a sandbox made through /v1 and reached through the E2B
// API for the first time), and its traffic access token if any.
func (s *API) tokens(ctx context.Context, rec *store.Sandbox) (envd, traffic string, err error) {
	if t := rec.Spec.Labels[envdTokenLabel]; t != "" {
		return t, rec.Spec.Labels[trafficTokenLabel], nil
	}
	fresh, err := s.fleet.SetOwnLabels(ctx, rec.TeamID, rec.ID, func(labels map[string]string) {
		if labels[envdTokenLabel] == "" {
			labels[envdTokenLabel] = newToken()
		}
	})
	if err != nil {
		return "", "", err
	}
	*rec = fresh
	return rec.Spec.Labels[envdTokenLabel], rec.Spec.Labels[trafficTokenLabel], nil
}

// The control plane's bodies, as E2B's OpenAPI spec names them.

// Sandbox is E2B's Sandbox: what create and connect return.
type Sandbox struct {
	TemplateID         string  `json:"templateID"`
	SandboxID          string  `json:"sandboxID"`
	ClientID           string  `json:"clientID"`
	EnvdVersion        string  `json:"envdVersion"`
	EnvdAccessToken    string  `json:"envdAccessToken,omitempty"`
	TrafficAccessToken *string `json:"trafficAccessToken"`
	Domain             *string `json:"domain"`
}

// Listed is E2B's ListedSandbox.
type Listed struct {
	TemplateID   string            `json:"templateID"`
	SandboxID    string            `json:"sandboxID"`
	ClientID     string            `json:"clientID"`
	StartedAt    time.Time         `json:"startedAt"`
	EndAt        time.Time         `json:"endAt"`
	CPUCount     int               `json:"cpuCount"`
	MemoryMB     int64             `json:"memoryMB"`
	DiskSizeMB   int64             `json:"diskSizeMB"`
	Metadata     map[string]string `json:"metadata,omitempty"`
	State        string            `json:"state"`
	EnvdVersion  string            `json:"envdVersion"`
	VolumeMounts []any             `json:"volumeMounts"`
}

// Detail is E2B's SandboxDetail.
type Detail struct {
	Listed
	EnvdAccessToken     string    `json:"envdAccessToken,omitempty"`
	Domain              *string   `json:"domain"`
	AllowInternetAccess bool      `json:"allowInternetAccess"`
	Lifecycle           lifecycle `json:"lifecycle"`
}

type lifecycle struct {
	OnTimeout  string `json:"onTimeout"` // kill or pause
	AutoResume bool   `json:"autoResume"`
}

// templateOf is the templateID of a record: the snapshot it was made
// from, if any; Cove's default template is E2B's base.
func templateOf(rec store.Sandbox) string {
	if sid := rec.Spec.Labels[snapshotLabel]; sid != "" {
		return sid
	}
	if rec.Spec.Template == "" {
		return "base"
	}
	return rec.Spec.Template
}

func (s *API) sandboxView(r *http.Request, rec store.Sandbox, envd, traffic string) Sandbox {
	v := Sandbox{TemplateID: templateOf(rec), SandboxID: rec.ID, ClientID: clientID, EnvdVersion: EnvdVersion,
		EnvdAccessToken: envd, Domain: s.domain(r)}
	if traffic != "" {
		v.TrafficAccessToken = &traffic
	}
	return v
}

func (s *API) listedView(rec store.Sandbox) Listed {
	state := "running"
	if s.paused(rec) {
		state = "paused"
	}
	end := rec.Deadline
	if end.IsZero() {
		end = rec.StoppedAt
	}
	return Listed{
		TemplateID: templateOf(rec), SandboxID: rec.ID, ClientID: clientID,
		StartedAt: rec.StartedAt, EndAt: end,
		CPUCount:   max(1, int(math.Ceil(rec.Spec.Limits.CPUs))),
		MemoryMB:   rec.Spec.Limits.MemoryBytes >> 20,
		DiskSizeMB: rec.Spec.Limits.DiskBytes >> 20,
		Metadata:   fleet.UserLabels(rec.Spec.Labels), State: state, EnvdVersion: EnvdVersion, VolumeMounts: []any{},
	}
}
