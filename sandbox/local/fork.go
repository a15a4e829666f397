package local

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/disk"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
)

var _ sandbox.Forker = (*Runtime)(nil)

// Fork copies a sandbox's disk (its overlay upper dir: the workspace and
// everything installed) into a new sandbox with the same spec and starts
// it. A capped disk's image is copied sparse (sharing blocks where the
// host filesystem can) while frozen; an uncapped one keeps owners, modes,
// xattrs and overlay whiteouts.
func (r *Runtime) Fork(ctx context.Context, id string) (sandbox.Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	src, err := r.load(id)
	if err != nil {
		return nil, err
	}
	resume, err := r.pause(id, src)
	if err != nil {
		return nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	defer resume()
	nid, st, err := r.copySandbox(ctx, id, src)
	if err != nil {
		return nil, err
	}
	c, st, err := r.startLocked(ctx, nid, st)
	if err != nil {
		r.destroy(context.WithoutCancel(ctx), nid)
		return nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	return r.sessionOn(c, nid, st), nil
}

// copySandbox makes a new stopped sandbox with a copy of src's disk and
// its spec, and returns its id and state (recorded, still marked as
// being created by this process). The caller holds r.mu and starts it
// (or destroys it).
func (r *Runtime) copySandbox(ctx context.Context, id string, src *state) (string, *state, error) {
	// A sandbox made before the runtime had a pids default gets it now.
	spec := src.Info.Spec
	r.defaults(&spec)
	nid := sbutil.NewID()
	dir := r.dir(nid)
	if err := r.newDir(nid, spec, false); err != nil {
		return "", nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	if err := os.Mkdir(filepath.Join(dir, "rootfs"), 0o755); err != nil {
		return "", nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	srcDisk, err := disk.Open(filepath.Join(r.dir(id), "disk"))
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, sandbox.WrapIDf(id, hostFault(err), "forking sandbox %q", id)
	}
	// A running sandbox's disk is mounted only in its supervisor's mount
	// namespace: reach it there, so it is frozen for the copy and the copy
	// is consistent.
	if src.Info.State == sandbox.StateRunning {
		if view := host.MountView(src.ShimPID); view != "" {
			srcDisk = srcDisk.Via(view)
		}
	}
	d, err := srcDisk.Copy(ctx, filepath.Join(dir, "disk"))
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("forking sandbox %q: copying its disk: %w", id, spaceError(err))
	}
	st := &state{
		Info:     sandbox.Info{ID: nid, State: sandbox.StateStopped, Spec: spec, CreatedAt: time.Now().UTC()},
		Token:    sbutil.NewToken(),
		Template: src.Template,
		Runsc:    src.Runsc,
		Init:     src.Init,
	}
	st.Init.Dir = dir
	st.Init.Upper = d.Upper()
	st.Init.Work = d.Work()
	st.Init.Hostname = nid
	st.CreatorPID = os.Getpid()
	var mode string
	var allow []allowRule
	if src.Init.Net != nil {
		mode, allow = src.Init.Net.Mode, src.Init.Net.Allow
	}
	if err := r.writeWithNetwork(nid, st, mode, allow); err != nil {
		r.destroy(context.WithoutCancel(ctx), nid)
		return "", nil, err
	}
	return nid, st, nil
}

// pause freezes a running sandbox's processes while its disk is copied
// (when the host has a freezer), and returns what thaws them.
func (r *Runtime) pause(id string, st *state) (func(), error) {
	if st.Info.State != sandbox.StateRunning {
		return func() {}, nil
	}
	root, err := host.CgroupRoot(st)
	if err != nil {
		return func() {}, nil
	}
	g, err := root.Load(id)
	if err != nil {
		return func() {}, nil
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Freeze(ctx); err != nil {
		g.Close()
		return func() {}, nil // no freezer: copy as is
	}
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		g.Thaw(ctx)
		g.Close()
	}, nil
}
