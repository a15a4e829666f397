// Package remote is a sandbox.Runtime that is a client of a Cove server
// (`cove serve`). Sandboxes are created, listed, stopped, resumed, forked
// and deleted through the server's /v1 JSON API; everything inside one
// (processes and their streams, files, tar, port tunnels) goes to the
// sandbox's own daemon through the server's proxy at
// /v1/sandboxes/{id}/guest, so a remote session is the same guest.Session
// every other runtime hands out. The server's errors come back as the
// sandbox package's sentinels, so errors.Is works across the API.
package remote

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
)

// Config configures a Runtime.
type Config struct {
	// URL is the server's base URL: "https://cove.example.com",
	// "http://127.0.0.1:7300".
	URL string
	// APIKey is a key of the team whose sandboxes these are ("cove_...";
	// `cove key create` makes one).
	APIKey string
	// HTTPClient makes every request, to the API and to the daemons; nil
	// means a client of the runtime's own. Its Timeout must be 0: a
	// process's output stream lasts as long as the process. Bound calls
	// with their ctx instead.
	HTTPClient *http.Client
	// Logger receives a debug line per API call; nil discards them.
	Logger *slog.Logger
	// MaxRetryTime bounds the retries of a request that failed to reach
	// a server (see retry.go for which are retried); 0 means
	// DefaultMaxRetryTime, negative none.
	MaxRetryTime time.Duration
}

// Runtime is a Cove server's sandboxes, seen by one team. Safe for
// concurrent use.
type Runtime struct {
	base string // the server's URL, no trailing slash
	key  string
	// hc reaches the daemons (sessions: streams, tunnels, which are not
	// retried); api is hc retrying what is safe (retry.go), for the API
	// calls.
	hc  *http.Client
	api *http.Client
	log *slog.Logger
}

var (
	_ sandbox.Runtime   = (*Runtime)(nil)
	_ sandbox.Forker    = (*Runtime)(nil)
	_ sandbox.Deadliner = (*Runtime)(nil)
	_ sandbox.Pauser    = (*Runtime)(nil)

	_ sandbox.MemoryForker = (*Runtime)(nil)
)

// New returns a runtime for the server at cfg.URL. It makes no request:
// a wrong URL or key shows in the first call (a refused key as
// sandbox.ErrPermission).
func New(cfg Config) (*Runtime, error) {
	u, err := url.Parse(cfg.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" || u.Fragment != "" {
		return nil, fmt.Errorf("server URL %q: want http(s)://host[:port][/path]: %w", cfg.URL, sandbox.ErrInvalid)
	}
	if strings.TrimSpace(cfg.APIKey) == "" {
		return nil, fmt.Errorf("no API key: set one of the team's keys (cove key create makes one): %w", sandbox.ErrInvalid)
	}
	if cfg.HTTPClient == nil {
		tr := http.DefaultTransport.(*http.Transport).Clone()
		// Every running process holds a stream: keep enough connections.
		tr.MaxIdleConnsPerHost = 64
		cfg.HTTPClient = &http.Client{Transport: tr}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Runtime{base: strings.TrimSuffix(cfg.URL, "/"), key: strings.TrimSpace(cfg.APIKey), hc: cfg.HTTPClient,
		api: retrying(cfg.HTTPClient, cfg.MaxRetryTime), log: cfg.Logger}, nil
}

// Create asks the server for a sandbox of spec. The server applies its
// own defaults and caps: a zero TTL is its default TTL (not none), zero
// limits are its "small" size. A network other than "none", and a pids
// limit, cannot be asked of it: ErrInvalid.
func (r *Runtime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	if err := spec.Normalize(); err != nil {
		return nil, err
	}
	req, err := createRequest(spec)
	if err != nil {
		return nil, err
	}
	// A key of its own per create: a create retried after a lost answer
	// gets the same sandbox, not a second one.
	var sb api.Sandbox
	hdr := http.Header{api.IdempotencyKeyHeader: {newIdempotencyKey()}}
	if err := r.callWith(ctx, http.MethodPost, "/v1/sandboxes", hdr, req, &sb); err != nil {
		return nil, fmt.Errorf("creating a sandbox: %w", err)
	}
	return r.session(sb), nil
}

// createRequest is the API's form of a normalized spec.
func createRequest(spec sandbox.Spec) (api.CreateSandbox, error) {
	if m := spec.Network.Mode; (m != "" && m != "none") || len(spec.Network.Allow) > 0 {
		return api.CreateSandbox{}, fmt.Errorf("network mode %q: a Cove server's sandboxes have no network (mode none); leave Spec.Network empty: %w", spec.Network.Mode, sandbox.ErrInvalid)
	}
	req := api.CreateSandbox{
		Template: spec.Template, Env: spec.Env, Labels: spec.Labels, User: spec.User, Root: spec.Root,
		CPUs: spec.Limits.CPUs, MemoryBytes: spec.Limits.MemoryBytes, DiskBytes: spec.Limits.DiskBytes,
		// 0 takes the size's limit; the server refuses what is out of
		// its range.
		Pids:      spec.Limits.Pids,
		Isolation: spec.Isolation,
	}
	if spec.TTL > 0 {
		// Whole seconds, rounded up: never shorter than asked.
		req.TTLSeconds = int64(math.Ceil(spec.TTL.Seconds()))
	}
	return req, nil
}

// Get returns a session of sandbox id, running or stopped.
func (r *Runtime) Get(ctx context.Context, id string) (sandbox.Session, error) {
	sb, err := r.get(ctx, id)
	if err != nil {
		return nil, err
	}
	return r.session(sb), nil
}

func (r *Runtime) get(ctx context.Context, id string) (api.Sandbox, error) {
	var sb api.Sandbox
	p, err := sandboxPath(id, "")
	if err == nil {
		err = r.call(ctx, http.MethodGet, p, nil, &sb)
	}
	if err != nil {
		return sb, sandbox.WrapIDf(id, err, "getting sandbox %q", id)
	}
	return sb, nil
}

// List returns the team's sandboxes in creation order, every page of
// them.
func (r *Runtime) List(ctx context.Context) ([]sandbox.Info, error) {
	var out []sandbox.Info
	q := url.Values{"limit": {"1000"}}
	for {
		var page struct {
			Sandboxes  []api.Sandbox `json:"sandboxes"`
			NextCursor string        `json:"next_cursor"`
		}
		if err := r.call(ctx, http.MethodGet, "/v1/sandboxes?"+q.Encode(), nil, &page); err != nil {
			return nil, fmt.Errorf("listing sandboxes: %w", err)
		}
		for _, sb := range page.Sandboxes {
			out = append(out, info(sb))
		}
		if page.NextCursor == "" || len(page.Sandboxes) == 0 {
			return out, nil
		}
		q.Set("cursor", page.NextCursor)
	}
}

// Stop stops sandbox id and keeps its disk.
func (r *Runtime) Stop(ctx context.Context, id string) error {
	p, err := sandboxPath(id, "/stop")
	if err == nil {
		err = r.call(ctx, http.MethodPost, p, nil, nil)
	}
	if err != nil {
		return sandbox.WrapIDf(id, err, "stopping sandbox %q", id)
	}
	return nil
}

// Resume starts a stopped sandbox again, with a fresh TTL.
func (r *Runtime) Resume(ctx context.Context, id string) (sandbox.Session, error) {
	var sb api.Sandbox
	p, err := sandboxPath(id, "/resume")
	if err == nil {
		err = r.call(ctx, http.MethodPost, p, nil, &sb)
	}
	if err != nil {
		return nil, sandbox.WrapIDf(id, err, "resuming sandbox %q", id)
	}
	return r.session(sb), nil
}

// Delete deletes sandbox id and its disk. A delete retried after its
// answer was lost (the server died answering) that finds the sandbox
// gone did its work: nil, not ErrNotFound.
func (r *Runtime) Delete(ctx context.Context, id string) error {
	var retries atomic.Int32
	p, err := sandboxPath(id, "")
	if err == nil {
		err = r.call(withRetries(ctx, &retries), http.MethodDelete, p, nil, nil)
	}
	if errors.Is(err, sandbox.ErrNotFound) && retries.Load() > 0 {
		return nil
	}
	if err != nil {
		return sandbox.WrapIDf(id, err, "deleting sandbox %q", id)
	}
	return nil
}

// Fork copies sandbox id into a new running sandbox of the same team.
// ErrInvalid if the server's runtime cannot fork.
func (r *Runtime) Fork(ctx context.Context, id string) (sandbox.Session, error) {
	var sb api.Sandbox
	p, err := sandboxPath(id, "/fork")
	if err == nil {
		err = r.call(ctx, http.MethodPost, p, nil, &sb)
	}
	if err != nil {
		return nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	return r.session(sb), nil
}

// Pause stops running sandbox id keeping its processes and memory (a
// gvisor sandbox's); ErrUnavailable (with ErrInvalid) when its tier
// keeps the disk only, ErrState when it is not running.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	keep := true
	p, err := sandboxPath(id, "/pause")
	if err == nil {
		err = r.call(ctx, http.MethodPost, p, api.Pause{KeepMemory: &keep}, nil)
	}
	if errors.Is(err, sandbox.ErrInvalid) {
		err = fmt.Errorf("%w: %w", sandbox.ErrUnavailable, err)
	}
	if err != nil {
		return sandbox.WrapIDf(id, err, "pausing sandbox %q", id)
	}
	return nil
}

// ForkMemory makes n running copies of running gvisor sandbox id with
// its processes and memory (the server checkpoints it once).
// ErrUnavailable when it runs on another tier, whose copies get the disk
// only (Fork).
func (r *Runtime) ForkMemory(ctx context.Context, id string, n int) ([]sandbox.Session, error) {
	sb, err := r.get(ctx, id)
	if err != nil {
		return nil, err
	}
	if sb.Isolation != sandbox.IsolationGVisor || sb.State != string(sandbox.StateRunning) {
		return nil, fmt.Errorf("forking sandbox %q with its memory: it is a %s %s sandbox; only running gvisor ones are: %w", id, sb.State, sb.Isolation, sandbox.ErrUnavailable)
	}
	return r.ForkN(ctx, id, n)
}

// ForkN makes n running copies of sandbox id at once (1 to
// api.MaxForks): of a running gvisor sandbox with its processes and
// memory, of others with the disk.
func (r *Runtime) ForkN(ctx context.Context, id string, n int) ([]sandbox.Session, error) {
	var list api.SandboxList
	p, err := sandboxPath(id, "/forks")
	if err == nil {
		err = r.call(ctx, http.MethodPost, p, api.Fork{Count: n}, &list)
	}
	if err != nil {
		return nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	out := make([]sandbox.Session, 0, len(list.Sandboxes))
	for _, sb := range list.Sandboxes {
		out = append(out, r.session(sb))
	}
	return out, nil
}

// SetDeadline makes sandbox id stop at t, to the second (rounded up; a
// time already past stops it within the second). A Cove server always
// has a deadline, capped by its maximum TTL: the zero time (never) is
// ErrInvalid.
func (r *Runtime) SetDeadline(ctx context.Context, id string, t time.Time) error {
	if t.IsZero() {
		return fmt.Errorf("setting the TTL of sandbox %q: a Cove server's sandboxes always have a deadline; give a time: %w", id, sandbox.ErrInvalid)
	}
	secs := max(int64(math.Ceil(time.Until(t).Seconds())), 1)
	p, err := sandboxPath(id, "/ttl")
	if err == nil {
		err = r.call(ctx, http.MethodPost, p, api.SetTTL{TTLSeconds: secs}, nil)
	}
	if err != nil {
		return sandbox.WrapIDf(id, err, "setting the TTL of sandbox %q", id)
	}
	return nil
}

// sandboxPath is /v1/sandboxes/{id}{suffix}. An id that is no path
// segment names no sandbox.
func sandboxPath(id, suffix string) (string, error) {
	if id == "" || id == "." || id == ".." || strings.ContainsAny(id, "/\\?#\x00") {
		return "", fmt.Errorf("no sandbox has that id: %w", sandbox.ErrNotFound)
	}
	return "/v1/sandboxes/" + url.PathEscape(id) + suffix, nil
}

// session is a guest.Session of sb over the server's proxy to its daemon.
func (r *Runtime) session(sb api.Sandbox) *guest.Session {
	id := sb.ID
	// The key goes in X-API-Key: Authorization is the daemon's (envd
	// names the request's user in it).
	c, err := guest.NewClient(r.base+"/v1/sandboxes/"+url.PathEscape(id)+"/guest", guest.ClientOptions{
		Header:        http.Header{"X-Api-Key": {r.key}},
		HTTPClient:    r.hc,
		CheckResponse: checkProxyResponse,
	})
	if err != nil {
		// r.base was checked by New and an id is one path segment.
		panic(fmt.Sprintf("remote: a daemon client for sandbox %q: %v", id, err))
	}
	return guest.NewSession(c, guest.SessionOptions{
		ID:   id,
		Root: sb.Root,
		Info: func(ctx context.Context) (sandbox.Info, error) {
			sb, err := r.get(ctx, id)
			if err != nil {
				return sandbox.Info{}, err
			}
			return info(sb), nil
		},
	})
}

// info is the sandbox package's description of an API sandbox.
func info(sb api.Sandbox) sandbox.Info {
	spec := sandbox.Spec{
		Template: sb.Template, Root: sb.Root, User: sb.User, Labels: sb.Labels, Env: sb.Env,
		Limits: sandbox.Limits{CPUs: sb.CPUs, MemoryBytes: sb.MemoryBytes, DiskBytes: sb.DiskBytes, Pids: sb.Pids},
	}
	if sb.Deadline != nil && !sb.StartedAt.IsZero() {
		// The TTL as it stands: from the start to the deadline.
		spec.TTL = sb.Deadline.Sub(sb.StartedAt).Round(time.Second)
	}
	if sb.Isolation != sandbox.IsolationNative {
		spec.Isolation = sb.Isolation
	}
	in := sandbox.Info{ID: sb.ID, State: sandbox.State(sb.State), Spec: spec, CreatedAt: sb.CreatedAt, Paused: sb.Paused}
	if sb.Deadline != nil {
		in.Deadline = *sb.Deadline
	}
	return in
}

// call makes one API request: body (when not nil) as JSON, the response
// decoded into out (when not nil). An error response is an *Error.
func (r *Runtime) call(ctx context.Context, method, path string, body, out any) error {
	return r.callWith(ctx, method, path, nil, body, out)
}

// callWith is call with extra headers.
func (r *Runtime) callWith(ctx context.Context, method, path string, hdr http.Header, body, out any) error {
	resp, err := r.sendWith(ctx, method, path, hdr, body)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if out == nil {
		io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<20))
		return nil
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		return fmt.Errorf("decoding the Cove server's answer to %s %s: %w", method, path, err)
	}
	return nil
}

// send makes one API request, body (when not nil) as JSON, and returns
// the response of a success for the caller to read and close (a stream
// is read as it comes). An error response is an *Error.
func (r *Runtime) send(ctx context.Context, method, path string, body any) (*http.Response, error) {
	return r.sendWith(ctx, method, path, nil, body)
}

// sendWith is send with extra headers.
func (r *Runtime) sendWith(ctx context.Context, method, path string, hdr http.Header, body any) (*http.Response, error) {
	var rd io.Reader
	if body != nil {
		data, err := json.Marshal(body)
		if err != nil {
			return nil, err
		}
		rd = bytes.NewReader(data)
	}
	req, err := http.NewRequestWithContext(ctx, method, r.base+path, rd)
	if err != nil {
		return nil, err
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	req.Header.Set("Authorization", "Bearer "+r.key)
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	start := time.Now()
	resp, err := r.api.Do(req)
	if err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("reaching the Cove server at %s: %w: %w", r.base, sandbox.ErrUnavailable, err)
	}
	r.log.Debug("cove api", "method", method, "path", path, "status", resp.StatusCode, "request_id", resp.Header.Get("X-Request-Id"), "duration", time.Since(start))
	if resp.StatusCode >= 300 {
		defer resp.Body.Close()
		e := responseError(resp)
		if e.Code == api.CodeUnauthorized {
			return nil, fmt.Errorf("the Cove server at %s refused the API key: %w", r.base, e)
		}
		return nil, e
	}
	return resp, nil
}
