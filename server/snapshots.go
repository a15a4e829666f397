package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/store"
)

// snapshotRoutes: workspace snapshots (fleet keeps them).
func (s *Server) snapshotRoutes() {
	s.handle("POST /v1/sandboxes/{id}/snapshots", s.createSnapshot)
	s.handle("GET /v1/snapshots", s.listSnapshots)
	s.handle("GET /v1/snapshots/{sid}", s.getSnapshot)
	s.handle("GET /v1/snapshots/{sid}/download", s.downloadSnapshot)
	s.handle("POST /v1/snapshots/{sid}/restore", s.restoreSnapshot)
	s.handle("DELETE /v1/snapshots/{sid}", s.deleteSnapshot)
}

func snapshotView(sn store.Snapshot) api.Snapshot {
	return api.Snapshot{ID: sn.ID, SandboxID: sn.SandboxID, Size: sn.Size, CreatedAt: sn.CreatedAt}
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	sn, err := s.fleet.Snapshot(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusCreated, snapshotView(sn))
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, c *caller) {
	sns, err := s.fleet.Snapshots(r.Context(), c.team)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := api.SnapshotList{Snapshots: make([]api.Snapshot, 0, len(sns))}
	for _, sn := range sns {
		out.Snapshots = append(out.Snapshots, snapshotView(sn))
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	sn, err := s.fleet.GetSnapshot(r.Context(), c.team, r.PathValue("sid"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, snapshotView(sn))
}

func (s *Server) downloadSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	sn, f, err := s.fleet.OpenSnapshot(r.Context(), c.team, r.PathValue("sid"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	http.NewResponseController(w).SetWriteDeadline(time.Time{})
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", sn.ID+".tar"))
	// ServeContent answers ranges, so a broken download can resume.
	http.ServeContent(w, r, "", sn.CreatedAt, f)
}

// restoreSnapshot makes a new sandbox (the body is a create request, and
// may be empty) with the snapshot's workspace.
func (s *Server) restoreSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.CreateSandbox
	if !s.decodeOptional(w, r, &req) {
		return
	}
	// The client leaving must not leave a sandbox half made.
	ctx := context.WithoutCancel(r.Context())
	start := time.Now()
	rec, err := s.fleet.Restore(ctx, c.team, r.PathValue("sid"), req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.metrics.Created(time.Since(start))
	writeJSON(w, http.StatusCreated, s.view(rec))
}

// decodeOptional is decode for a body that may be empty (then v is left
// as it is).
func (s *Server) decodeOptional(w http.ResponseWriter, r *http.Request, v any) bool {
	data, err := io.ReadAll(http.MaxBytesReader(w, r.Body, s.cfg.MaxBodyBytes))
	var mbe *http.MaxBytesError
	if errors.As(err, &mbe) {
		writeError(w, r, http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("the request body is over %d bytes", mbe.Limit))
		return false
	}
	if err != nil {
		s.fail(w, r, err)
		return false
	}
	if len(bytes.TrimSpace(data)) == 0 {
		return true
	}
	r.Body = io.NopCloser(bytes.NewReader(data))
	return s.decode(w, r, v)
}

func (s *Server) deleteSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	if err := s.fleet.DeleteSnapshot(context.WithoutCancel(r.Context()), c.team, r.PathValue("sid")); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}
