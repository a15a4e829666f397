package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// teamLabel marks a runtime sandbox with the team that asked for it, so
// a server that died between creating a sandbox and recording it can tell
// the orphan from sandboxes that are not its own.
const teamLabel = "cove.team"

func (s *Server) sandboxRoutes() {
	s.handle("POST /v1/sandboxes", s.createSandbox)
	s.handle("GET /v1/sandboxes", s.listSandboxes)
	s.handle("GET /v1/sandboxes/{id}", s.getSandbox)
	s.handle("DELETE /v1/sandboxes/{id}", s.deleteSandbox)
	s.handle("POST /v1/sandboxes/{id}/stop", s.stopSandbox)
	s.handle("POST /v1/sandboxes/{id}/resume", s.resumeSandbox)
	s.handle("POST /v1/sandboxes/{id}/fork", s.forkSandbox)
	s.handle("POST /v1/sandboxes/{id}/ttl", s.setTTL)
}

// view is the API's description of a record.
func (s *Server) view(rec store.Sandbox) api.Sandbox {
	v := api.Sandbox{
		ID: rec.ID, State: rec.State, Template: rec.Spec.Template, Size: rec.Size,
		CPUs: rec.Spec.Limits.CPUs, MemoryBytes: rec.Spec.Limits.MemoryBytes, DiskBytes: rec.Spec.Limits.DiskBytes,
		Root: rec.Spec.Root, User: rec.Spec.User, Labels: userLabels(rec.Spec.Labels), Env: rec.Spec.Env,
		CreatedAt: rec.CreatedAt, StartedAt: rec.StartedAt, OnExpire: rec.OnExpire,
		IdleTimeoutSeconds: int64(rec.IdleTimeout / time.Second),
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

func userLabels(l map[string]string) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		if !strings.HasPrefix(k, "cove.") {
			out[k] = v
		}
	}
	if len(out) == 0 {
		return nil
	}
	return out
}

// invalid is a 400 that says what to fix.
func invalid(format string, args ...any) error {
	return fmt.Errorf(format+": %w", append(args, sandbox.ErrInvalid)...)
}

// seconds turns a count of seconds into a duration, refusing negatives and
// anything over max.
func seconds(field string, n int64, max time.Duration) (time.Duration, error) {
	if n < 0 {
		return 0, invalid("%s: %d is negative; give a number of seconds >= 0", field, n)
	}
	if n > int64(max/time.Second) {
		return 0, invalid("%s: %d is over the limit of %d seconds", field, n, int64(max/time.Second))
	}
	return time.Duration(n) * time.Second, nil
}

// defaultMaxPids is Config.MaxPids unless the operator sets it.
const defaultMaxPids = 8192

// checkSize checks the resources a create asks for and sets them over
// the size's (preset). Each range is what a sandbox can start with and
// the host can back: a limit out of it is a 400 that says the range,
// not a failure deep in the runtime.
func (s *Server) checkSize(preset *api.Size, req api.CreateSandbox) error {
	switch {
	case math.IsNaN(req.CPUs) || req.CPUs < 0 || req.CPUs > 0 && req.CPUs < api.MinCPUs || req.CPUs > api.MaxCPUs:
		return invalid("cpus: %v is out of range; give %g to %d (or leave it out for the size's)", req.CPUs, api.MinCPUs, api.MaxCPUs)
	case req.MemoryBytes < 0 || req.MemoryBytes > 0 && req.MemoryBytes < api.MinMemoryBytes || req.MemoryBytes > api.MaxMemoryBytes:
		return invalid("memory_bytes: %d is out of range; give %d (64 MiB) to %d (1 TiB) (or leave it out for the size's)", req.MemoryBytes, int64(api.MinMemoryBytes), int64(api.MaxMemoryBytes))
	case req.DiskBytes < 0 || req.DiskBytes > 0 && req.DiskBytes < api.MinDiskBytes || req.DiskBytes > api.MaxDiskBytes:
		return invalid("disk_bytes: %d is out of range; give %d (16 MiB) to %d (1 TiB) (or leave it out for the size's)", req.DiskBytes, int64(api.MinDiskBytes), int64(api.MaxDiskBytes))
	}
	switch {
	case req.Pids == api.PidsUnlimited && !s.cfg.AllowUnlimitedPids:
		return invalid("pids: %d (no limit) is not allowed on this server; give %d to %d (or leave it out for the size's)", req.Pids, api.MinPids, s.cfg.MaxPids)
	case req.Pids == api.PidsUnlimited:
	case req.Pids < 0 || req.Pids > 0 && req.Pids < api.MinPids || req.Pids > s.cfg.MaxPids:
		unlimited := ""
		if s.cfg.AllowUnlimitedPids {
			unlimited = fmt.Sprintf(", or %d for no limit", api.PidsUnlimited)
		}
		return invalid("pids: %d is out of range; give %d to %d%s (or leave it out for the size's)", req.Pids, api.MinPids, s.cfg.MaxPids, unlimited)
	}
	if req.CPUs > 0 {
		preset.CPUs = req.CPUs
	}
	if req.MemoryBytes > 0 {
		preset.MemoryBytes = req.MemoryBytes
	}
	if req.DiskBytes > 0 {
		preset.DiskBytes = req.DiskBytes
	}
	if req.Pids != 0 {
		preset.Pids = req.Pids
	}
	return nil
}

// checkLabel checks a label (what names a sandbox's labels in messages:
// "label", or E2B's "metadata"). Keys are filtered on as key=value and
// both are shown in terminals and the UI, so neither may hold control
// characters or invalid UTF-8, and keys no "=".
func checkLabel(what, k, v string) error {
	bad := func(s string) bool {
		return !utf8.ValidString(s) || strings.ContainsFunc(s, func(r rune) bool { return unicode.IsControl(r) })
	}
	switch {
	case k == "" || len(k) > 63:
		return invalid("%s key %q: keys are 1 to 63 bytes", what, k)
	case bad(k) || strings.Contains(k, "="):
		return invalid("%s key %q: keys may not hold control characters, invalid UTF-8 or \"=\"", what, k)
	case strings.HasPrefix(k, "cove."):
		return invalid("%s key %q: keys may not start with cove. (the server's own)", what, k)
	case len(v) > 256:
		return invalid("%s %q: values are at most 256 bytes", what, k)
	case bad(v):
		return invalid("%s %q: values may not hold control characters or invalid UTF-8", what, k)
	}
	return nil
}

// specFor checks a create request and turns it into a runtime spec and a
// record (without id). The manifest, when any, is returned to apply.
func (s *Server) specFor(req api.CreateSandbox, team string) (sandbox.Spec, store.Sandbox, *manifest.Manifest, error) {
	var rec store.Sandbox
	size := req.Size
	if size == "" {
		size = "small"
	}
	preset, ok := api.Sizes[size]
	if !ok {
		return sandbox.Spec{}, rec, nil, invalid("size %q: use small, medium or large, or give cpus, memory_bytes and disk_bytes", req.Size)
	}
	if err := s.checkSize(&preset, req); err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	ttl, err := seconds("ttl_seconds", req.TTLSeconds, s.cfg.MaxTTL)
	if err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	if ttl == 0 {
		ttl = s.cfg.DefaultTTL
	}
	idle, err := seconds("idle_timeout_seconds", req.IdleTimeoutSeconds, s.cfg.MaxTTL)
	if err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	switch req.OnExpire {
	case "":
		req.OnExpire = store.ExpireStop
	case store.ExpireStop, store.ExpireDelete:
	default:
		return sandbox.Spec{}, rec, nil, invalid("on_expire %q: use stop (keep the disk) or delete", req.OnExpire)
	}
	if len(req.Labels) > 64 {
		return sandbox.Spec{}, rec, nil, invalid("labels: at most 64")
	}
	labels := map[string]string{teamLabel: team}
	for k, v := range req.Labels {
		if err := checkLabel("label", k, v); err != nil {
			return sandbox.Spec{}, rec, nil, err
		}
		labels[k] = v
	}
	spec := sandbox.Spec{
		Template: req.Template, Root: req.Root, User: req.User, Env: maps.Clone(req.Env), Labels: labels, TTL: ttl,
		Limits: sandbox.Limits{CPUs: preset.CPUs, MemoryBytes: preset.MemoryBytes, DiskBytes: preset.DiskBytes, Pids: preset.Pids},
	}
	if n := req.Network; n != nil {
		switch n.Mode {
		case "", "none":
			if len(n.Allow) > 0 {
				return sandbox.Spec{}, rec, nil, invalid("network.allow is for mode allow, not %q", n.Mode)
			}
		case "internet", "allow":
			if len(n.Allow) > 64 {
				return sandbox.Spec{}, rec, nil, invalid("network.allow: at most 64 entries")
			}
			spec.Network = sandbox.Network{Mode: n.Mode, Allow: n.Allow}
		default:
			return sandbox.Spec{}, rec, nil, invalid("network.mode %q: want none, internet or allow", n.Mode)
		}
	}
	var m *manifest.Manifest
	if len(req.Manifest) > 0 {
		if m, err = manifest.Parse(req.Manifest); err != nil {
			return sandbox.Spec{}, rec, nil, fmt.Errorf("manifest: %w", err)
		}
		if spec.Root == "" {
			spec.Root = m.RootDir()
		}
		env := m.Env()
		maps.Copy(env, spec.Env)
		spec.Env = env
	}
	if err := spec.Normalize(); err != nil {
		return sandbox.Spec{}, rec, nil, err
	}
	rec = store.Sandbox{TeamID: team, Spec: spec, Size: req.Size, IdleTimeout: idle, OnExpire: req.OnExpire}
	return spec, rec, m, nil
}

// admit checks a team's quota for one more running sandbox of spec.
// Callers hold createMu until the sandbox is recorded.
func (s *Server) admit(ctx context.Context, team string, spec sandbox.Spec) error {
	t, err := s.cfg.Store.GetTeam(ctx, team)
	if err != nil {
		return err
	}
	q := t.Quota
	if q == (store.Quota{}) {
		return nil
	}
	n, cpus, mem := 1, spec.Limits.CPUs, spec.Limits.MemoryBytes
	cursor := ""
	for {
		page, next, err := s.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{TeamID: team, State: store.StateRunning, After: cursor, Limit: 1000})
		if err != nil {
			return err
		}
		for _, r := range page {
			n++
			cpus += r.Spec.Limits.CPUs
			mem += r.Spec.Limits.MemoryBytes
		}
		if next == "" {
			break
		}
		cursor = next
	}
	switch {
	case q.Sandboxes > 0 && n > q.Sandboxes:
		return fmt.Errorf("team %s may run %d sandboxes at once; stop or delete one first: %w", team, q.Sandboxes, errQuota)
	case q.CPUs > 0 && cpus > q.CPUs:
		return fmt.Errorf("team %s may use %g CPUs at once and this would make %g; stop a sandbox or ask for fewer cpus: %w", team, q.CPUs, cpus, errQuota)
	case q.MemoryBytes > 0 && mem > q.MemoryBytes:
		return fmt.Errorf("team %s may use %d bytes of memory at once and this would make %d; stop a sandbox or ask for less: %w", team, q.MemoryBytes, mem, errQuota)
	}
	return nil
}

func (s *Server) createSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.CreateSandbox
	if !s.decode(w, r, &req) {
		return
	}
	// The client leaving must not leave a sandbox half made.
	ctx := context.WithoutCancel(r.Context())
	start := time.Now()
	rec, sess, err := s.createRecorded(ctx, c.team, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.applyManifest(ctx, rec.ID, sess, req.Manifest); err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.created(time.Since(start))
	writeJSON(w, http.StatusCreated, s.view(rec))
}

// createRecorded makes a running sandbox for team from a create request
// (its manifest is the caller's to apply) and records it: the steps of
// POST /v1/sandboxes, for creates whose workspace comes from elsewhere.
// On error nothing is left behind.
func (s *Server) createRecorded(ctx context.Context, team string, req api.CreateSandbox) (store.Sandbox, sandbox.Session, error) {
	spec, rec, _, err := s.specFor(req, team)
	if err != nil {
		return rec, nil, err
	}
	// One create at a time, quota check and all. Measured on 2 cores with
	// 50 clients creating, running and deleting: 907-1031 cycles in 30 s
	// one at a time, 807 with two at once, 690 with no limit; starting a
	// sandbox is CPU work, and more at once only makes each slower.
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if err := s.admit(ctx, team, spec); err != nil {
		return rec, nil, err
	}
	sess, err := s.cfg.Runtime.Create(ctx, spec)
	if err != nil {
		return rec, nil, fmt.Errorf("creating the sandbox: %w", err)
	}
	now := s.cfg.Now()
	rec.ID, rec.State, rec.CreatedAt, rec.StartedAt, rec.LastActivity = sess.ID(), store.StateRunning, now, now, now
	rec.Deadline = now.Add(spec.TTL)
	if err := s.cfg.Store.PutSandbox(ctx, rec); err != nil {
		s.cfg.Runtime.Delete(ctx, sess.ID())
		return rec, nil, fmt.Errorf("recording sandbox %s: %w", sess.ID(), err)
	}
	return rec, sess, nil
}

// applyManifest builds the workspace of a sandbox just made from a
// tenant's manifest (none when raw is empty); on error the sandbox is
// deleted.
func (s *Server) applyManifest(ctx context.Context, id string, sess sandbox.Session, raw json.RawMessage) error {
	if len(raw) == 0 {
		return nil
	}
	m, err := manifest.Parse(raw) // checked by specFor already
	if err == nil {
		// Host paths in a tenant's manifest would read the server's own
		// files: local_file and local_dir are confined to an empty
		// directory, which refuses them.
		// git_repo entries: https only, to addresses the outbound
		// policy allows, never the server's own disk (egress.go).
		err = manifest.Apply(ctx, m, sess, manifest.ApplyOptions{BaseDir: s.emptyDir(), Git: manifest.GitPolicy{
			Schemes: []string{"https"}, CheckAddr: s.egress.Check, Resolve: s.egress.Lookup,
		}})
	}
	if err != nil {
		s.remove(ctx, id)
		return fmt.Errorf("applying the manifest (the sandbox was deleted): %w", err)
	}
	return nil
}

// emptyDir is a directory with nothing in it, for manifest base dirs.
func (s *Server) emptyDir() string {
	d := filepath.Join(s.cfg.DataDir, "empty")
	os.MkdirAll(d, 0o755)
	return d
}

// remove deletes a sandbox from the runtime and the store.
func (s *Server) remove(ctx context.Context, id string) error {
	s.forgetSession(id)
	if err := s.cfg.Runtime.Delete(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("deleting sandbox %s: %w", id, err)
	}
	// Under createMu: the lifecycle loop's read-modify-write of a record
	// must not put back one deleted in between.
	s.createMu.Lock()
	err := s.cfg.Store.DeleteSandbox(ctx, id)
	s.createMu.Unlock()
	if err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return err
	}
	s.mu.Lock()
	delete(s.traffic, id)
	delete(s.lastTouch, id)
	s.mu.Unlock()
	return nil
}

func (s *Server) listSandboxes(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	f := store.SandboxFilter{TeamID: c.team, State: q.Get("state"), After: q.Get("cursor")}
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
	recs, next, err := s.cfg.Store.ListSandboxes(r.Context(), f)
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
	id := r.PathValue("id")
	rec, err := s.cfg.Store.GetSandbox(r.Context(), c.team, id)
	if err != nil {
		s.fail(w, r, err)
		return rec, false
	}
	return rec, true
}

// session is the live session of the caller's running sandbox.
func (s *Server) session(w http.ResponseWriter, r *http.Request, c *caller) (store.Sandbox, sandbox.Session, bool) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return rec, nil, false
	}
	if rec.State != store.StateRunning {
		s.fail(w, r, fmt.Errorf("sandbox %s is stopped; resume it first (POST /v1/sandboxes/%s/resume): %w", rec.ID, rec.ID, sandbox.ErrState))
		return rec, nil, false
	}
	// Every use of a live session is activity (exec, files, processes,
	// ports); reading a sandbox's record is not.
	s.touch(rec.ID)
	sess, err := s.runtimeSession(r.Context(), rec)
	if err != nil {
		s.fail(w, r, fmt.Errorf("sandbox %s: %w", rec.ID, err))
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
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	if err := s.remove(context.WithoutCancel(r.Context()), rec.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) stopSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	if err := s.stop(context.WithoutCancel(r.Context()), &rec); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(rec))
}

// stop stops a sandbox and records it.
func (s *Server) stop(ctx context.Context, rec *store.Sandbox) error {
	s.forgetSession(rec.ID)
	if err := s.cfg.Runtime.Stop(ctx, rec.ID); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		return fmt.Errorf("stopping sandbox %s: %w", rec.ID, err)
	}
	if rec.State == store.StateStopped {
		return nil
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if _, err := s.cfg.Store.GetSandbox(ctx, "", rec.ID); err != nil {
		return err // deleted meanwhile
	}
	rec.State, rec.StoppedAt = store.StateStopped, s.cfg.Now()
	return s.cfg.Store.PutSandbox(ctx, *rec)
}

func (s *Server) resumeSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	if err := s.resume(context.WithoutCancel(r.Context()), c.team, &rec); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(rec))
}

// resume starts a stopped sandbox of team again (within its quota) with
// its TTL afresh, and records it; a running one is left as it is.
func (s *Server) resume(ctx context.Context, team string, rec *store.Sandbox) error {
	return s.resumeFor(ctx, team, rec, rec.Spec.TTL)
}

// resumeFor is resume to end ttl from now (E2B's connect names its own).
func (s *Server) resumeFor(ctx context.Context, team string, rec *store.Sandbox, ttl time.Duration) error {
	if rec.State == store.StateRunning {
		return nil
	}
	s.createMu.Lock()
	defer s.createMu.Unlock()
	fresh, err := s.cfg.Store.GetSandbox(ctx, "", rec.ID)
	if err != nil {
		return err
	}
	if fresh.State == store.StateRunning {
		*rec = fresh // resumed meanwhile
		return nil
	}
	if err := s.admit(ctx, team, fresh.Spec); err != nil {
		return err
	}
	now := s.cfg.Now()
	deadline := now.Add(ttl)
	// The runtime's deadline is moved first: the past one would refuse
	// the resume, and a stopped sandbox starts with the one it has.
	if d, ok := s.cfg.Runtime.(sandbox.Deadliner); ok {
		if err := d.SetDeadline(ctx, fresh.ID, deadline); err != nil {
			return err
		}
	}
	if _, err := s.cfg.Runtime.Resume(ctx, fresh.ID); err != nil {
		return fmt.Errorf("resuming sandbox %s: %w", fresh.ID, err)
	}
	fresh.State, fresh.StartedAt, fresh.StoppedAt, fresh.LastActivity = store.StateRunning, now, time.Time{}, now
	fresh.Deadline = deadline
	if err := s.cfg.Store.PutSandbox(ctx, fresh); err != nil {
		return err
	}
	*rec = fresh
	return nil
}

func (s *Server) forkSandbox(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	f, ok := s.cfg.Runtime.(sandbox.Forker)
	if !ok {
		writeError(w, r, http.StatusNotImplemented, api.CodeInvalid, "this server's runtime cannot fork sandboxes")
		return
	}
	ctx := context.WithoutCancel(r.Context())
	s.createMu.Lock()
	defer s.createMu.Unlock()
	if err := s.admit(ctx, c.team, rec.Spec); err != nil {
		s.fail(w, r, err)
		return
	}
	sess, err := f.Fork(ctx, rec.ID)
	if err != nil {
		s.fail(w, r, fmt.Errorf("forking sandbox %s: %w", rec.ID, err))
		return
	}
	now := s.cfg.Now()
	child := rec
	child.ID, child.State, child.CreatedAt, child.StartedAt, child.StoppedAt, child.LastActivity = sess.ID(), store.StateRunning, now, now, time.Time{}, now
	child.Deadline = now.Add(rec.Spec.TTL)
	if err := s.cfg.Store.PutSandbox(ctx, child); err != nil {
		s.cfg.Runtime.Delete(ctx, sess.ID())
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, s.view(child))
}

func (s *Server) setTTL(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.SetTTL
	if !s.decode(w, r, &req) {
		return
	}
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	ttl, err := seconds("ttl_seconds", req.TTLSeconds, s.cfg.MaxTTL)
	if err == nil && ttl == 0 {
		err = invalid("ttl_seconds: give a number of seconds > 0")
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.setDeadline(context.WithoutCancel(r.Context()), &rec, s.cfg.Now().Add(ttl)); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, s.view(rec))
}

// setDeadline moves a sandbox's end to t, in the runtime (which enforces
// it while the sandbox runs) and the record.
func (s *Server) setDeadline(ctx context.Context, rec *store.Sandbox, t time.Time) error {
	if rec.State == store.StateRunning {
		if d, ok := s.cfg.Runtime.(sandbox.Deadliner); ok {
			if err := d.SetDeadline(ctx, rec.ID, t); err != nil {
				return fmt.Errorf("setting the TTL of sandbox %s: %w", rec.ID, err)
			}
		}
	}
	return s.update(ctx, rec, func(rec *store.Sandbox) { rec.Deadline = t })
}

// update changes a record read afresh and writes it, under createMu as
// every read-modify-write of a record is (the lifecycle loop's too); rec
// becomes what was written.
func (s *Server) update(ctx context.Context, rec *store.Sandbox, change func(*store.Sandbox)) error {
	s.createMu.Lock()
	defer s.createMu.Unlock()
	fresh, err := s.cfg.Store.GetSandbox(ctx, "", rec.ID)
	if err != nil {
		return err
	}
	// change may set labels: on a copy, as the cached record shares its map.
	labels := make(map[string]string, len(fresh.Spec.Labels)+3)
	for k, v := range fresh.Spec.Labels {
		labels[k] = v
	}
	fresh.Spec.Labels = labels
	change(&fresh)
	if err := s.cfg.Store.PutSandbox(ctx, fresh); err != nil {
		return fmt.Errorf("recording sandbox %s: %w", rec.ID, err)
	}
	*rec = fresh
	return nil
}

// Reconcile makes the store and the runtime agree after a (re)start:
// sandboxes whose supervisor died or whose TTL stopped them while the
// server was down are recorded stopped, records of sandboxes the runtime
// no longer has are dropped, and sandboxes the runtime has with a team
// label but no record (a create cut short by a crash) are deleted.
func (s *Server) Reconcile(ctx context.Context) error {
	infos, err := s.cfg.Runtime.List(ctx)
	if err != nil {
		return fmt.Errorf("listing the runtime's sandboxes: %w", err)
	}
	live := map[string]sandbox.Info{}
	for _, in := range infos {
		live[in.ID] = in
	}
	cursor := ""
	seen := map[string]bool{}
	for {
		recs, next, err := s.cfg.Store.ListSandboxes(ctx, store.SandboxFilter{After: cursor, Limit: 1000})
		if err != nil {
			return err
		}
		for _, rec := range recs {
			seen[rec.ID] = true
			in, ok := live[rec.ID]
			switch {
			case !ok:
				s.log.Warn("sandbox gone from the runtime; dropping its record", "sandbox", rec.ID)
				s.cfg.Store.DeleteSandbox(ctx, rec.ID)
			case in.State == sandbox.StateStopped && rec.State == store.StateRunning:
				rec.State, rec.StoppedAt = store.StateStopped, s.cfg.Now()
				s.cfg.Store.PutSandbox(ctx, rec)
			case in.State == sandbox.StateRunning && rec.State == store.StateStopped:
				rec.State, rec.StoppedAt = store.StateRunning, time.Time{}
				s.cfg.Store.PutSandbox(ctx, rec)
			}
		}
		if next == "" {
			break
		}
		cursor = next
	}
	for id, in := range live {
		if !seen[id] && in.Spec.Labels[teamLabel] != "" {
			s.log.Warn("deleting a sandbox created but never recorded (the server stopped mid-create)", "sandbox", id)
			if err := s.cfg.Runtime.Delete(ctx, id); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
				s.log.Error("deleting orphan", "sandbox", id, "err", err)
			}
		}
	}
	return nil
}
