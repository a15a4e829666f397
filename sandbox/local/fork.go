package local

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

var _ sandbox.Forker = (*Runtime)(nil)

// Fork copies a sandbox's disk (its overlay upper dir: the workspace and
// everything installed) into a new sandbox with the same spec and starts
// it. The copy keeps owners, modes, xattrs and overlay whiteouts; on
// filesystems that support it, it shares blocks (reflink) until changed.
func (r *Runtime) Fork(ctx context.Context, id string) (sandbox.Session, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	src, err := r.load(id)
	if err != nil {
		return nil, err
	}
	resume, err := r.pause(id, src)
	if err != nil {
		return nil, fmt.Errorf("forking sandbox %q: %w", id, err)
	}
	defer resume()

	nid := newID()
	dir := r.dir(nid)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("forking sandbox %q: %w", id, err)
	}
	for _, d := range []string{"work", "rootfs"} {
		if err := os.Mkdir(filepath.Join(dir, d), 0o755); err != nil {
			return nil, fmt.Errorf("forking sandbox %q: %w", id, err)
		}
	}
	out, err := exec.CommandContext(ctx, "cp", "-a", "--reflink=auto", filepath.Join(r.dir(id), "upper"), filepath.Join(dir, "upper")).CombinedOutput()
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("forking sandbox %q: copying its disk: %s: %w", id, strings.TrimSpace(string(out)), err)
	}
	var tok [16]byte
	rand.Read(tok[:])
	st := &state{
		Info:     sandbox.Info{ID: nid, State: sandbox.StateStopped, Spec: src.Info.Spec, CreatedAt: time.Now().UTC()},
		Token:    hex.EncodeToString(tok[:]),
		Template: src.Template,
		Init:     src.Init,
	}
	st.Init.Dir = dir
	st.Init.Upper = filepath.Join(dir, "upper")
	st.Init.Work = filepath.Join(dir, "work")
	st.Init.Hostname = nid
	if err := writeState(dir, st); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := writeInit(dir, &st.Init); err != nil {
		os.RemoveAll(dir)
		return nil, err
	}
	if err := r.startLocked(ctx, nid, st); err != nil {
		r.destroy(context.WithoutCancel(ctx), nid)
		return nil, fmt.Errorf("forking sandbox %q: %w", id, err)
	}
	return r.session(nid, st), nil
}

// pause stops a running sandbox's processes from changing its disk while
// it is copied, and returns what undoes that. Without a freezer cgroup it
// is a no-op: the copy is then only as consistent as the workload allows.
func (r *Runtime) pause(id string, st *state) (func(), error) {
	return func() {}, nil
}
