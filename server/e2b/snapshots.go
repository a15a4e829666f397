package e2b

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/web"
	"github.com/cove-sandbox/cove/store"
)

// Snapshots and forks through E2B's API.
//
// An E2B snapshot is the whole sandbox, as on E2B: a frozen copy
// (fleet.Freeze) of its disk (what was installed as root, /home/user,
// the workspace) and its template, size, user and network, kept stopped
// until deleted, the team's alone. Its id (snap-...) is E2B's
// snapshotID, which the SDK passes to Sandbox.create as the template: a
// create whose templateID is one of the team's snapshots is a copy of it
// (fleet.Thaw) that gets the create's envs, metadata, timeout and
// lifecycle, and tokens of its own. Another team's snapshot is unknown
// to the caller, as a template that does not exist. DELETE
// /templates/{id} (the SDK's deleteSnapshot) deletes one, and its disk.
// Cove's workspace snapshots (/v1/snapshots) are not listed here, nor
// E2B's there; a workspace snapshot's id still works as a templateID
// and with deleteSnapshot.
//
// A fork is a copy of the whole disk (sandbox.Forker), each with its own
// envd and traffic tokens.

const (
	// snapshotPrefix starts the ids of Cove's snapshots (fleet.Snapshot).
	snapshotPrefix = "snap-"
	// snapshotLabel holds the snapshot a sandbox was made from: its
	// templateID, as on E2B.
	snapshotLabel = "cove.e2b.snapshot"
)

// maxForks is the most forks one request may ask for; the team's quota
// applies to each.
const maxForks = 10

// snapshotRoutes registers the snapshot and fork routes (Routes calls it).
func (s *API) snapshotRoutes(h func(pattern string, fn func(w http.ResponseWriter, r *http.Request, c *caller))) {
	h("POST /sandboxes/{sandboxID}/snapshots", s.createSnapshot)
	h("GET /snapshots", s.listSnapshots)
	h("DELETE /templates/{templateID}", s.deleteTemplate)
	h("POST /sandboxes/{sandboxID}/fork", s.fork)
}

// SnapshotInfo is E2B's SnapshotInfo. Cove's snapshots have no names.
type SnapshotInfo struct {
	SnapshotID string   `json:"snapshotID"`
	Names      []string `json:"names"`
}

// createSnapshot serves POST /sandboxes/{id}/snapshots.
func (s *API) createSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	var body struct {
		Name *string `json:"name"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	if body.Name != nil && *body.Name != "" {
		writeError(w, http.StatusBadRequest, "name: Cove's snapshots are not named; leave name out and create sandboxes from the snapshotId returned")
		return
	}
	rec, ok := s.record(w, r, c)
	if !ok {
		return
	}
	// A paused sandbox's disk is copied as it is: E2B snapshots one too.
	sn, err := s.fleet.Freeze(context.WithoutCancel(r.Context()), c.team, rec.ID)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	web.WriteJSON(w, http.StatusCreated, SnapshotInfo{SnapshotID: sn.ID, Names: []string{}})
}

// listSnapshots serves GET /snapshots: the team's snapshots, oldest
// first, filtered by sandboxID (the sandbox they were taken of) and name
// (a snapshot's id), a page of limit (1 to 100, default 100) at a time,
// the next page's token in X-Next-Token.
func (s *API) listSnapshots(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	limit := 100
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 100 {
			writeError(w, http.StatusBadRequest, "limit: give 1 to 100")
			return
		}
		limit = n
	}
	sns, err := s.fleet.Frozen(r.Context(), c.team)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	slices.SortFunc(sns, compareSnapshots)
	after, ok := parseCursor(q.Get("nextToken"))
	if !ok {
		writeError(w, http.StatusBadRequest, "nextToken: give the X-Next-Token of the previous page")
		return
	}
	sandboxID, name := q.Get("sandboxID"), strings.TrimSuffix(q.Get("name"), ":default")
	out := []SnapshotInfo{}
	for i, sn := range sns {
		if after.ID != "" && compareSnapshots(sn, after) <= 0 ||
			sandboxID != "" && sn.SandboxID != sandboxID || name != "" && sn.ID != name {
			continue
		}
		if len(out) == limit {
			prev := sns[i-1]
			w.Header().Set("X-Next-Token", fmt.Sprintf("%d.%s", prev.CreatedAt.UnixNano(), prev.ID))
			break
		}
		out = append(out, SnapshotInfo{SnapshotID: sn.ID, Names: []string{}})
	}
	web.WriteJSON(w, http.StatusOK, out)
}

// compareSnapshots orders snapshots oldest first, then by id.
func compareSnapshots(a, b store.Snapshot) int {
	if c := a.CreatedAt.Compare(b.CreatedAt); c != 0 {
		return c
	}
	return strings.Compare(a.ID, b.ID)
}

// parseCursor reads a list's nextToken, "{created, unix ns}.{id}" of the
// last snapshot of the page before: the next page starts after it, even
// if it was deleted meanwhile. "" is the first page.
func parseCursor(token string) (store.Snapshot, bool) {
	if token == "" {
		return store.Snapshot{}, true
	}
	ns, id, ok := strings.Cut(token, ".")
	n, err := strconv.ParseInt(ns, 10, 64)
	if !ok || err != nil || id == "" {
		return store.Snapshot{}, false
	}
	return store.Snapshot{ID: id, CreatedAt: time.Unix(0, n)}, true
}

// deleteTemplate serves DELETE /templates/{id}: the SDK's deleteSnapshot.
// Cove's templates are the server's, not a team's, so only snapshots can
// be deleted here.
func (s *API) deleteTemplate(w http.ResponseWriter, r *http.Request, c *caller) {
	id := r.PathValue("templateID")
	ctx, sid := context.WithoutCancel(r.Context()), strings.TrimSuffix(id, ":default")
	err := s.fleet.DeleteFrozen(ctx, c.team, sid)
	if errors.Is(err, sandbox.ErrNotFound) {
		err = s.fleet.DeleteSnapshot(ctx, c.team, sid) // a /v1 workspace snapshot
	}
	switch {
	case errors.Is(err, sandbox.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Sprintf("template %q not found: it is not one of your snapshots (Cove's templates are the server's and cannot be deleted through the API)", id))
	case err != nil:
		s.fail(w, r, err)
	default:
		w.WriteHeader(http.StatusNoContent)
	}
}

// isSnapshot reports whether a create's templateID names a snapshot.
func isSnapshot(template string) bool { return strings.HasPrefix(template, snapshotPrefix) }

// createFrom makes the sandbox of a create, from a snapshot of the
// team's when the template names one.
func (s *API) createFrom(ctx context.Context, team string, req api.CreateSandbox, own map[string]string) (store.Sandbox, error) {
	if !isSnapshot(req.Template) {
		rec, _, err := s.fleet.CreateLabeled(ctx, team, req, own)
		return rec, err
	}
	sid := strings.TrimSuffix(req.Template, ":default")
	req.Template = ""
	own = maps.Clone(own)
	own[snapshotLabel] = sid
	rec, err := s.fleet.Thaw(ctx, team, sid, req, own)
	if errors.Is(err, sandbox.ErrNotFound) && rec.ID == "" {
		// A /v1 workspace snapshot: its workspace on the default template.
		rec, err = s.fleet.RestoreLabeled(ctx, team, sid, req, own)
	}
	if errors.Is(err, sandbox.ErrNotFound) && rec.ID == "" {
		return rec, fmt.Errorf("template %q: no such template or snapshot of yours: %w", sid, sandbox.ErrNotFound)
	}
	return rec, err
}

// forkResult is E2B's SandboxForkResult: one of the two is set.
type forkResult struct {
	Sandbox *Sandbox   `json:"sandbox,omitempty"`
	Error   *errorBody `json:"error,omitempty"`
}

// fork serves POST /sandboxes/{id}/fork: count (1 to maxForks, default
// 1) copies of the sandbox's disk (and, of a running gvisor sandbox,
// its processes and memory), running, each ending timeout seconds
// (default 15, as E2B's) from now. 201 with one result per fork, each a
// sandbox or the error that stopped it (the team's quota, say).
func (s *API) fork(w http.ResponseWriter, r *http.Request, c *caller) {
	var body struct {
		Count   *int   `json:"count"`
		Timeout *int64 `json:"timeout"`
	}
	if !s.decode(w, r, &body) {
		return
	}
	count, timeout := 1, int64(15)
	if body.Count != nil {
		count = *body.Count
	}
	if body.Timeout != nil {
		timeout = *body.Timeout
	}
	if count < 1 || count > maxForks {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("count: %d forks; give 1 to %d", count, maxForks))
		return
	}
	maxTTL := int64(s.fleet.MaxTTL() / time.Second)
	if timeout < 1 || timeout > maxTTL {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("timeout: %d seconds is out of range; give 1 to %d", timeout, maxTTL))
		return
	}
	parent, ok := s.record(w, r, c)
	if !ok {
		return
	}
	ctx := context.WithoutCancel(r.Context())
	out := make([]forkResult, 0, count)
	children, errs := s.forks(ctx, c.team, parent, count)
	for i, child := range children {
		err := errs[i]
		if err == nil {
			child, err = s.finishFork(ctx, c.team, parent, child, time.Duration(timeout)*time.Second)
		}
		if err != nil {
			status, _, msg := s.cfg.Errs.Failure(r, err)
			out = append(out, forkResult{Error: &errorBody{Code: status, Message: msg}})
			continue
		}
		v := s.sandboxView(r, child, child.Spec.Labels[envdTokenLabel], child.Spec.Labels[trafficTokenLabel])
		out = append(out, forkResult{Sandbox: &v})
	}
	web.WriteJSON(w, http.StatusCreated, out)
}

// forks makes count forks of parent, each a record or the error that
// stopped it: a running gvisor parent's from one checkpoint of its
// memory (fleet.ForkN), others one at a time, so that one over the
// team's quota fails alone.
func (s *API) forks(ctx context.Context, team string, parent store.Sandbox, count int) ([]store.Sandbox, []error) {
	children, errs := make([]store.Sandbox, count), make([]error, count)
	if count > 1 && parent.State == store.StateRunning && s.fleet.KeepsMemory(parent) {
		made, err := s.fleet.ForkN(ctx, team, parent.ID, count)
		for i := range count {
			if err != nil {
				errs[i] = err
			} else {
				children[i] = made[i]
			}
		}
		return children, errs
	}
	for i := range count {
		children[i], errs[i] = s.fleet.Fork(ctx, team, parent.ID)
	}
	return children, errs
}

// finishFork makes a fork of parent E2B's, with envd and traffic tokens
// of its own (fleet.Fork gives a child none of the parent's), ending ttl
// from now. A fork that cannot be finished is deleted.
func (s *API) finishFork(ctx context.Context, team string, parent, child store.Sandbox, ttl time.Duration) (store.Sandbox, error) {
	id := child.ID
	child, err := s.fleet.SetOwnLabels(ctx, team, id, func(labels map[string]string) {
		labels[madeLabel] = "1"
		labels[envdTokenLabel] = newToken()
		if parent.Spec.Labels[trafficTokenLabel] != "" {
			labels[trafficTokenLabel] = newToken()
		}
	})
	if err == nil {
		child, err = s.fleet.Extend(ctx, team, id, ttl, true)
	}
	if err != nil {
		s.fleet.Delete(ctx, team, id)
		return store.Sandbox{}, fmt.Errorf("finishing a fork of sandbox %s: %w", parent.ID, err)
	}
	return child, nil
}
