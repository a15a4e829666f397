package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/blobdir"
)

// Workspace snapshots. A snapshot is the workspace's tar, kept as the
// blob "snapshots/<team>/<id>.tar" (Config.Blobs) and recorded in the
// store; the record is written only once the blob is whole, so what is
// listed is always whole.

// snapshotBlob is the name of a snapshot's tar among the blobs.
func snapshotBlob(sn store.Snapshot) string {
	return "snapshots/" + sn.TeamID + "/" + sn.ID + ".tar"
}

// Snapshot saves the workspace of team's running sandbox id.
func (f *Fleet) Snapshot(ctx context.Context, team, id string) (store.Snapshot, error) {
	rec, sess, err := f.Session(ctx, team, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	defer f.Begin(rec.ID)()
	sn := store.Snapshot{ID: NewID("snap-"), TeamID: team, SandboxID: rec.ID}
	size, err := f.putBlob(ctx, snapshotBlob(sn), func(w io.Writer) error { return sess.SnapshotWorkspace(ctx, w) })
	if err != nil {
		return sn, sandbox.WrapIDf(rec.ID, err, "snapshotting sandbox %s", rec.ID)
	}
	sn.Size, sn.CreatedAt = size, f.cfg.Now()
	if err := f.cfg.Store.PutSnapshot(context.WithoutCancel(ctx), sn); err != nil {
		f.cfg.Blobs.DeleteBlob(context.WithoutCancel(ctx), snapshotBlob(sn))
		return sn, fmt.Errorf("recording snapshot %s: %w", sn.ID, err)
	}
	return sn, nil
}

// putBlob stores what write writes as the blob name: write's error,
// when it fails, is the error (not the store's complaint of a cut
// stream).
func (f *Fleet) putBlob(ctx context.Context, name string, write func(io.Writer) error) (int64, error) {
	pr, pw := io.Pipe()
	werr := make(chan error, 1)
	go func() {
		err := write(pw)
		pw.CloseWithError(err)
		werr <- err
	}()
	n, err := f.cfg.Blobs.PutBlob(ctx, name, pr)
	pr.CloseWithError(errors.New("the blob store stopped reading"))
	if wErr := <-werr; wErr != nil {
		return 0, wErr
	}
	return n, err
}

// Snapshots lists team's snapshots.
func (f *Fleet) Snapshots(ctx context.Context, team string) ([]store.Snapshot, error) {
	return f.cfg.Store.ListSnapshots(ctx, team)
}

// GetSnapshot returns team's snapshot sid; another team's is ErrNotFound.
func (f *Fleet) GetSnapshot(ctx context.Context, team, sid string) (store.Snapshot, error) {
	sn, err := f.cfg.Store.GetSnapshot(ctx, team, sid)
	if err != nil {
		return sn, fmt.Errorf("snapshot %q: %w", sid, err)
	}
	return sn, nil
}

// OpenSnapshot opens the tar of team's snapshot sid. A record whose tar
// is gone is the server's fault, not the caller's (a plain error).
func (f *Fleet) OpenSnapshot(ctx context.Context, team, sid string) (store.Snapshot, store.Blob, error) {
	sn, err := f.GetSnapshot(ctx, team, sid)
	if err != nil {
		return sn, nil, err
	}
	b, err := f.cfg.Blobs.OpenBlob(ctx, snapshotBlob(sn))
	if errors.Is(err, sandbox.ErrNotFound) {
		return sn, nil, fmt.Errorf("snapshot %s is recorded but its tar is missing", sn.ID)
	}
	if err != nil {
		return sn, nil, fmt.Errorf("opening snapshot %s: %w", sn.ID, err)
	}
	return sn, b, nil
}

// Restore makes a sandbox for team (req as for Create, without a
// manifest) with the workspace of team's snapshot sid.
func (f *Fleet) Restore(ctx context.Context, team, sid string, req api.CreateSandbox) (store.Sandbox, error) {
	return f.RestoreLabeled(ctx, team, sid, req, nil)
}

// RestoreLabeled is Restore with labels of the server's own, as
// CreateLabeled.
func (f *Fleet) RestoreLabeled(ctx context.Context, team, sid string, req api.CreateSandbox, own map[string]string) (store.Sandbox, error) {
	if len(req.Manifest) > 0 {
		return store.Sandbox{}, invalid("manifest: a restored sandbox's workspace comes from the snapshot; create the sandbox without one")
	}
	sn, file, err := f.OpenSnapshot(ctx, team, sid)
	if err != nil {
		return store.Sandbox{}, err
	}
	defer file.Close()
	rec, sess, err := f.CreateLabeled(ctx, team, req, own)
	if err != nil {
		return rec, err
	}
	if err := sess.RestoreWorkspace(ctx, file); err != nil {
		f.remove(ctx, rec.ID)
		return rec, fmt.Errorf("restoring snapshot %s (the new sandbox was deleted): %w", sn.ID, err)
	}
	return rec, nil
}

// DeleteSnapshot deletes team's snapshot sid.
func (f *Fleet) DeleteSnapshot(ctx context.Context, team, sid string) error {
	sn, err := f.GetSnapshot(ctx, team, sid)
	if err != nil {
		return err
	}
	// The record goes first: a file without a record is only wasted disk,
	// a record without a file is a snapshot that cannot be restored.
	if err := f.cfg.Store.DeleteSnapshot(ctx, team, sn.ID); err != nil {
		return err
	}
	if err := f.cfg.Blobs.DeleteBlob(ctx, snapshotBlob(sn)); err != nil {
		f.log.Warn("removing a deleted snapshot's tar", "snapshot", sn.ID, "err", err)
	}
	return nil
}

// SweepTemps removes temp files (".tmp-*") left in dir by writes a crash
// cut short (store/blobdir's): uploads the front doors spool.
func SweepTemps(dir string, now time.Time) { blobdir.SweepTemps(dir, now) }
