package server

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

func (s *Server) sandboxRoutes() {
	s.handle("POST /v1/sandboxes", s.createSandbox)
	s.handle("GET /v1/sandboxes", s.listSandboxes)
	s.handle("GET /v1/sandboxes/{id}", s.getSandbox)
	s.handle("DELETE /v1/sandboxes/{id}", s.deleteSandbox)
	s.handle("POST /v1/sandboxes/{id}/stop", s.stopSandbox)
	s.handle("POST /v1/sandboxes/{id}/resume", s.resumeSandbox)
	s.handle("POST /v1/sandboxes/{id}/fork", s.forkSandbox)
	s.handle("POST /v1/sandboxes/{id}/forks", s.forkSandboxes)
	s.handle("POST /v1/sandboxes/{id}/pause", s.pauseSandbox)
	s.handle("POST /v1/sandboxes/{id}/ttl", s.setTTL)
}

// view is the API's description of a record.
func (s *Server) view(rec store.Sandbox) api.Sandbox {
	v := api.Sandbox{
		ID: rec.ID, State: rec.State, Template: rec.Spec.Template, Size: rec.Size,
		CPUs: rec.Spec.Limits.CPUs, MemoryBytes: rec.Spec.Limits.MemoryBytes, DiskBytes: rec.Spec.Limits.DiskBytes,
		Root: rec.Spec.Root, User: rec.Spec.User, Labels: fleet.UserLabels(rec.Spec.Labels), Env: rec.Spec.Env,
		CreatedAt: rec.CreatedAt, StartedAt: rec.StartedAt, OnExpire: rec.OnExpire,
		IdleTimeoutSeconds: int64(rec.IdleTimeout / time.Second),
		Isolation:          fleet.Isolation(rec), Paused: fleet.Paused(rec),
	}
	if v.Template == "" {
		v.Template = "host"
	}
	if v.Root == "" {
		v.Root = sandbox.DefaultRoot
	}
	v.Pids = rec.Spec.Limits.Pids
	if v.Pids == 0 {
		v.Pids = api.PidsUnlimited
	}
	if !rec.StoppedAt.IsZero() && rec.State == store.StateStopped {
		t := rec.StoppedAt
		v.StoppedAt = &t
	}
	if !rec.Deadline.IsZero() {
		t := rec.Deadline
		v.Deadline = &t
	}
	if n := rec.Spec.Network; n.Mode != "" && n.Mode != "none" {
		v.Network = &api.Network{Mode: n.Mode, Allow: n.Allow}
	}
	return v
}

// invalid is a 400 that says what to fix.
func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, sandbox.ErrInvalid)...)
}

// seconds turns a count of seconds into a duration, refusing negatives and
// anything over max (fleet.Seconds).
func seconds(field string, n int64, max time.Duration) (time.Duration, error) {
	return fleet.Seconds(field, n, max)
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.CreateSandbox
	if !s.decode(w, r, &req) {
		return
	}
	// The client leaving must not leave a sandbox half made.
	ctx := context.WithoutCancel(r.Context())
	op, replay, err := s.idem.Begin(ctx, r, c.team, "v1", req)
	if err != nil || replay != "" {
		s.answerIdempotent(w, r, c, replay, err)
		return
	}
	start := time.Now()
	rec, _, err := s.fleet.CreateLabeled(ctx, c.team, req, op.Labels())
	err = op.End(ctx, rec.ID, err, func() { s.fleet.Delete(ctx, c.team, rec.ID) })
	if err != nil {
		s.failIdempotent(w, r, err)
		return
	}
	s.metrics.Created(time.Since(start))
	writeJSON(w, http.StatusCreated, s.view(rec))
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	f := store.SandboxFilter{State: q.Get("state"), After: q.Get("cursor")}
	if f.State != "" && f.State != store.StateRunning && f.State != store.StateStopped {
		writeError(w, r, http.StatusBadRequest, api.CodeInvalid, "state: use running or stopped")
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, r, http.StatusBadRequest, api.CodeInvalid, "limit: give 1 to 1000")
			return
		}
		f.Limit = n
	}
	for _, l := range q["label"] {
		k, v, ok := strings.Cut(l, "=")
		if !ok || k == "" {
			writeError(w, r, http.StatusBadRequest, api.CodeInvalid, "label: use label=key=value")
			return
		}
		if f.Labels == nil {
			f.Labels = map[string]string{}
		}
		f.Labels[k] = v
	}
	recs, next, err := s.fleet.List(r.Context(), c.team, f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(recs)), NextCursor: next}
	for _, rec := range recs {
		out.Sandboxes = append(out.Sandboxes, s.view(rec))
	}
	writeJSON(w, http.StatusOK, out)
}

// record loads the caller's sandbox named in the path; another team's is
// not found.
func (s *Server) record(w http.ResponseWriter, r *http.Request, c *caller) (store.Sandbox, bool) {
	rec, err := s.fleet.Get(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return rec, false
	}
	return rec, true
}

// session is the live session of the caller's running sandbox named in
// the path (its use is activity).
func (s *Server) session(w http.ResponseWriter, r *http.Request, c *caller) (store.Sandbox, sandbox.Session, bool) {
	rec, sess, err := s.fleet.Session(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		if errors.Is(err, sandbox.ErrState) && rec.State == store.StateStopped {
			err = fmt.Errorf("sandbox %s is stopped; resume it first (POST /v1/sandboxes/{id}/resume): %w", rec.ID, sandbox.ErrState)
		}
		s.fail(w, r, err)
		return rec, nil, false
	}
	return rec, sess, true
}

// inUse is session for a stream or transfer: the sandbox counts as in
// use (never idle) until end is called.
func (s *Server) inUse(w http.ResponseWriter, r *http.Request, c *caller) (store.Sandbox, sandbox.Session, func(), bool) {
	rec, sess, ok := s.session(w, r, c)
	if !ok {
		return rec, nil, nil, false
	}
	return rec, sess, s.begin(rec.ID), true
}

func (s *Server) getSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	if rec, ok := s.record(w, r, c); ok {
		writeJSON(w, http.StatusOK, s.view(rec))
	}
}

func (s *Server) deleteSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := s.fleet.Delete(context.WithoutCancel(r.Context()), c.team, r.PathValue("id")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// answer writes a sandbox a call returned, or its error.
func (s *Server) answer(w http.ResponseWriter, r *http.Request, status int, rec store.Sandbox, err error) {
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, status, s.view(rec))
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, err := s.fleet.Stop(context.WithoutCancel(r.Context()), c.team, r.PathValue("id"))
	s.answer(w, r, http.StatusOK, rec, err)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, err := s.fleet.Resume(context.WithoutCancel(r.Context()), c.team, r.PathValue("id"))
	s.answer(w, r, http.StatusOK, rec, err)
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, err := s.fleet.Fork(context.WithoutCancel(r.Context()), c.team, r.PathValue("id"))
	if errors.Is(err, errors.ErrUnsupported) {
		writeError(w, r, http.StatusNotImplemented, api.CodeInvalid, "this server's runtime cannot fork sandboxes")
		return
	}
	s.answer(w, r, http.StatusCreated, rec, err)
}

// pauseSandbox stops a running sandbox without its deadline, keeping
// its memory where its tier can unless the body says keep_memory false.
// Another team's sandbox is not found whatever the body.
func (s *Server) pauseSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	if _, ok := s.record(w, r, c); !ok {
		return
	}
	var req api.Pause
	if !s.decodeOptional(w, r, &req) {
		return
	}
	mem := fleet.MemoryIfKept
	if req.KeepMemory != nil {
		mem = fleet.MemoryDropped
		if *req.KeepMemory {
			mem = fleet.MemoryRequired
		}
	}
	rec, err := s.fleet.Pause(context.WithoutCancel(r.Context()), c.team, r.PathValue("id"), mem)
	s.answer(w, r, http.StatusOK, rec, err)
}

// forkSandboxes makes count copies of a sandbox and answers with them.
// Another team's sandbox is not found whatever the body.
func (s *Server) forkSandboxes(w http.ResponseWriter, r *http.Request, c *caller) {
	if _, ok := s.record(w, r, c); !ok {
		return
	}
	var req api.Fork
	if !s.decode(w, r, &req) {
		return
	}
	recs, err := s.fleet.ForkN(context.WithoutCancel(r.Context()), c.team, r.PathValue("id"), req.Count)
	if errors.Is(err, errors.ErrUnsupported) {
		writeError(w, r, http.StatusNotImplemented, api.CodeInvalid, "this server's runtime cannot fork sandboxes")
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := api.SandboxList{Sandboxes: make([]api.Sandbox, 0, len(recs))}
	for _, rec := range recs {
		out.Sandboxes = append(out.Sandboxes, s.view(rec))
	}
	writeJSON(w, http.StatusCreated, out)
}

func (s *Server) setTTL(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.SetTTL
	if !s.decode(w, r, &req) {
		return
	}
	rec, err := s.fleet.SetTTL(context.WithoutCancel(r.Context()), c.team, r.PathValue("id"), req.TTLSeconds)
	s.answer(w, r, http.StatusOK, rec, err)
}
