package server

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/store"
)

// snapshotRoutes: workspace snapshots. A snapshot is the workspace's tar,
// kept by the server as a file under DataDir/snapshots/<team>/<id>.tar
// and recorded in the store; the record is written only once the file is
// complete, so what the API lists is always whole.
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

// snapshotDir is the directory of a team's snapshot files.
func (s *Server) snapshotDir(team string) (string, error) {
	// Team ids are checked when teams are made; this only makes sure one
	// can never name a directory elsewhere.
	if team == "" || team == "." || team == ".." || strings.ContainsAny(team, `/\`+"\x00") {
		return "", fmt.Errorf("team id %q cannot name a directory", team)
	}
	return filepath.Join(s.cfg.DataDir, "snapshots", team), nil
}

func (s *Server) snapshotFile(sn store.Snapshot) (string, error) {
	dir, err := s.snapshotDir(sn.TeamID)
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(sn.ID, `/\`+"\x00") || strings.HasPrefix(sn.ID, ".") {
		return "", fmt.Errorf("snapshot id %q cannot name a file", sn.ID)
	}
	return filepath.Join(dir, sn.ID+".tar"), nil
}

func (s *Server) createSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, sess, end, ok := s.inUse(w, r, c)
	if !ok {
		return
	}
	defer end()
	sn := store.Snapshot{ID: newID("snap-"), TeamID: c.team, SandboxID: rec.ID}
	file, err := s.snapshotFile(sn)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	size, err := writeAtomic(file, func(w io.Writer) error { return sess.SnapshotWorkspace(r.Context(), w) })
	if err != nil {
		s.fail(w, r, fmt.Errorf("snapshotting sandbox %s: %w", rec.ID, err))
		return
	}
	sn.Size, sn.CreatedAt = size, s.cfg.Now()
	if err := s.cfg.Store.PutSnapshot(context.WithoutCancel(r.Context()), sn); err != nil {
		os.Remove(file)
		s.fail(w, r, fmt.Errorf("recording snapshot %s: %w", sn.ID, err))
		return
	}
	sweepTemps(filepath.Dir(file), time.Now())
	writeJSON(w, http.StatusCreated, snapshotView(sn))
}

// writeAtomic writes a file through a temp file in its directory, synced
// and renamed into place, so the name holds a whole file or nothing. It
// returns the size.
func writeAtomic(name string, write func(io.Writer) error) (n int64, err error) {
	dir := filepath.Dir(name)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return 0, err
	}
	f, err := os.CreateTemp(dir, ".tmp-"+filepath.Base(name)+"-*")
	if err != nil {
		return 0, err
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	cw := &countWriter{w: f}
	if err := write(cw); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	if err := f.Close(); err != nil {
		return 0, err
	}
	if err := os.Rename(f.Name(), name); err != nil {
		return 0, err
	}
	// The rename itself must survive a crash before the record is made.
	if d, err := os.Open(dir); err == nil {
		d.Sync()
		d.Close()
	}
	return cw.n, nil
}

type countWriter struct {
	w io.Writer
	n int64
}

func (c *countWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

func (s *Server) listSnapshots(w http.ResponseWriter, r *http.Request, c *caller) {
	sns, err := s.cfg.Store.ListSnapshots(r.Context(), c.team)
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

// snapshot loads the caller's snapshot named in the path; another team's
// is not found.
func (s *Server) snapshot(w http.ResponseWriter, r *http.Request, c *caller) (store.Snapshot, bool) {
	id := r.PathValue("sid")
	sn, err := s.cfg.Store.GetSnapshot(r.Context(), c.team, id)
	if err != nil {
		s.fail(w, r, fmt.Errorf("snapshot %q: %w", id, err))
		return sn, false
	}
	return sn, true
}

func (s *Server) getSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	if sn, ok := s.snapshot(w, r, c); ok {
		writeJSON(w, http.StatusOK, snapshotView(sn))
	}
}

// openSnapshot opens a snapshot's file. A record whose file is gone is the
// server's fault, not the caller's.
func (s *Server) openSnapshot(sn store.Snapshot) (*os.File, error) {
	name, err := s.snapshotFile(sn)
	if err != nil {
		return nil, err
	}
	f, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("snapshot %s is recorded but its file %s is missing", sn.ID, name)
	}
	return f, err
}

func (s *Server) downloadSnapshot(w http.ResponseWriter, r *http.Request, c *caller) {
	sn, ok := s.snapshot(w, r, c)
	if !ok {
		return
	}
	f, err := s.openSnapshot(sn)
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
	if len(req.Manifest) > 0 {
		s.fail(w, r, invalid("manifest: a restored sandbox's workspace comes from the snapshot; create the sandbox without one"))
		return
	}
	sn, ok := s.snapshot(w, r, c)
	if !ok {
		return
	}
	f, err := s.openSnapshot(sn)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer f.Close()
	// The client leaving must not leave a sandbox half made.
	ctx := context.WithoutCancel(r.Context())
	start := s.cfg.Now()
	rec, sess, err := s.createRecorded(ctx, c.team, req)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if err := sess.RestoreWorkspace(ctx, f); err != nil {
		s.remove(ctx, rec.ID)
		s.fail(w, r, fmt.Errorf("restoring snapshot %s (the new sandbox was deleted): %w", sn.ID, err))
		return
	}
	s.metrics.created(s.cfg.Now().Sub(start))
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
	sn, ok := s.snapshot(w, r, c)
	if !ok {
		return
	}
	ctx := context.WithoutCancel(r.Context())
	// The record goes first: a file without a record is only wasted disk,
	// a record without a file is a snapshot that cannot be restored.
	if err := s.cfg.Store.DeleteSnapshot(ctx, c.team, sn.ID); err != nil {
		s.fail(w, r, err)
		return
	}
	if name, err := s.snapshotFile(sn); err == nil {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("removing a deleted snapshot's file", "snapshot", sn.ID, "err", err)
		}
	}
	w.WriteHeader(http.StatusNoContent)
}
