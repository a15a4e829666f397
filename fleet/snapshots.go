package fleet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Workspace snapshots. A snapshot is the workspace's tar, kept as a file
// under DataDir/snapshots/<team>/<id>.tar and recorded in the store; the
// record is written only once the file is complete, so what is listed is
// always whole. Every replica over one store must share DataDir.

// snapshotDir is the directory of a team's snapshot files.
func (f *Fleet) snapshotDir(team string) (string, error) {
	// Team ids are checked when teams are made; this only makes sure one
	// can never name a directory elsewhere.
	if team == "" || team == "." || team == ".." || strings.ContainsAny(team, `/\`+"\x00") {
		return "", fmt.Errorf("team id %q cannot name a directory", team)
	}
	return filepath.Join(f.cfg.DataDir, "snapshots", team), nil
}

func (f *Fleet) snapshotFile(sn store.Snapshot) (string, error) {
	dir, err := f.snapshotDir(sn.TeamID)
	if err != nil {
		return "", err
	}
	if strings.ContainsAny(sn.ID, `/\`+"\x00") || strings.HasPrefix(sn.ID, ".") {
		return "", fmt.Errorf("snapshot id %q cannot name a file", sn.ID)
	}
	return filepath.Join(dir, sn.ID+".tar"), nil
}

// Snapshot saves the workspace of team's running sandbox id.
func (f *Fleet) Snapshot(ctx context.Context, team, id string) (store.Snapshot, error) {
	rec, sess, err := f.Session(ctx, team, id)
	if err != nil {
		return store.Snapshot{}, err
	}
	defer f.Begin(rec.ID)()
	sn := store.Snapshot{ID: NewID("snap-"), TeamID: team, SandboxID: rec.ID}
	file, err := f.snapshotFile(sn)
	if err != nil {
		return sn, err
	}
	size, err := writeAtomic(file, func(w io.Writer) error { return sess.SnapshotWorkspace(ctx, w) })
	if err != nil {
		return sn, sandbox.WrapIDf(rec.ID, err, "snapshotting sandbox %s", rec.ID)
	}
	sn.Size, sn.CreatedAt = size, f.cfg.Now()
	if err := f.cfg.Store.PutSnapshot(context.WithoutCancel(ctx), sn); err != nil {
		os.Remove(file)
		return sn, fmt.Errorf("recording snapshot %s: %w", sn.ID, err)
	}
	SweepTemps(filepath.Dir(file), time.Now())
	return sn, nil
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

// OpenSnapshot opens the tar of team's snapshot sid. A record whose file
// is gone is the server's fault, not the caller's (a plain error).
func (f *Fleet) OpenSnapshot(ctx context.Context, team, sid string) (store.Snapshot, *os.File, error) {
	sn, err := f.GetSnapshot(ctx, team, sid)
	if err != nil {
		return sn, nil, err
	}
	name, err := f.snapshotFile(sn)
	if err != nil {
		return sn, nil, err
	}
	file, err := os.Open(name)
	if errors.Is(err, fs.ErrNotExist) {
		return sn, nil, fmt.Errorf("snapshot %s is recorded but its file %s is missing", sn.ID, name)
	}
	return sn, file, err
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
	if name, err := f.snapshotFile(sn); err == nil {
		if err := os.Remove(name); err != nil && !errors.Is(err, fs.ErrNotExist) {
			f.log.Warn("removing a deleted snapshot's file", "snapshot", sn.ID, "err", err)
		}
	}
	return nil
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
	if err := write(f); err != nil {
		return 0, err
	}
	if err := f.Sync(); err != nil {
		return 0, err
	}
	// The file is new, so its size is what write wrote.
	info, err := f.Stat()
	if err != nil {
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
	return info.Size(), nil
}

// staleTemp is how old a temp file must be before SweepTemps removes it:
// older than any write still going on.
const staleTemp = 24 * time.Hour

// SweepTemps removes temp files (".tmp-*") left in dir by writes a crash
// cut short: snapshots here, uploads the front doors spool.
func SweepTemps(dir string, now time.Time) {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	for _, e := range ents {
		if !strings.HasPrefix(e.Name(), ".tmp-") {
			continue
		}
		if info, err := e.Info(); err == nil && now.Sub(info.ModTime()) > staleTemp {
			os.Remove(filepath.Join(dir, e.Name()))
		}
	}
}
