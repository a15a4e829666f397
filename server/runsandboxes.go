package server

import (
	"context"
	"errors"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/runs"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// runSandboxes is the server's sandboxes as runs sees them, until the
// sandbox service (fleet) provides them.
type runSandboxes struct{ s *Server }

var (
	_ runs.Sandboxes = runSandboxes{}
	_ runs.Deleter   = runSandboxes{}
	_ runs.Beginner  = runSandboxes{}
)

// Create makes a sandbox as POST /v1/sandboxes does, its manifest
// applied; on error nothing is left behind.
func (a runSandboxes) Create(ctx context.Context, team string, req api.CreateSandbox) (store.Sandbox, sandbox.Session, error) {
	rec, sess, err := a.s.createRecorded(ctx, team, req)
	if err != nil {
		return rec, nil, err
	}
	if err := a.s.applyManifest(ctx, rec.ID, sess, req.Manifest); err != nil {
		return rec, nil, err
	}
	return rec, sess, nil
}

// Open returns the live session of team's sandbox id, resuming it when
// it was stopped.
func (a runSandboxes) Open(ctx context.Context, team, id string) (sandbox.Session, error) {
	s := a.s
	rec, err := s.cfg.Store.GetSandbox(ctx, team, id)
	if err != nil {
		return nil, err
	}
	if err := s.resume(ctx, team, &rec); err != nil {
		return nil, err
	}
	s.touch(rec.ID)
	return s.runtimeSession(ctx, rec)
}

// Delete deletes team's sandbox id.
func (a runSandboxes) Delete(ctx context.Context, team, id string) error {
	if _, err := a.s.cfg.Store.GetSandbox(ctx, team, id); err != nil {
		if errors.Is(err, sandbox.ErrNotFound) {
			return nil
		}
		return err
	}
	return a.s.remove(ctx, id)
}

// Begin counts the sandbox in use until end is called.
func (a runSandboxes) Begin(id string) (end func()) { return a.s.begin(id) }
