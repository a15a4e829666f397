package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/disk"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/runsc"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The gVisor tier (Spec.Isolation "gvisor"): the same sandbox (state
// directory, template root, disk, cgroup, network, TTL supervisor), with
// gVisor's runsc as its pid 1 on the host and the same daemon inside
// (see package shim's gvisor.go). What it adds here: the daemon binds
// its socket in a directory the sandbox can write (a tmpfs in the
// supervisor's mount namespace), so the client never follows a link
// there; Pause checkpoints the sandbox's memory and Resume restores it;
// ForkMemory restores one checkpoint into new sandboxes.

var (
	_ sandbox.Pauser       = (*Runtime)(nil)
	_ sandbox.MemoryForker = (*Runtime)(nil)
)

var _ sandbox.IsolationLister = (*Runtime)(nil)

// Isolations lists the tiers this host has: native, and gvisor where
// runsc is installed.
func (r *Runtime) Isolations() []string {
	if runsc.Installed(r.cfg.Runsc) == "" {
		return []string{sandbox.IsolationNative}
	}
	return []string{sandbox.IsolationNative, sandbox.IsolationGVisor}
}

// gvisor says the sandbox runs under gVisor.
func gvisor(st *state) bool { return st.Info.Spec.Isolation == sandbox.IsolationGVisor }

// memoryDir holds a paused gVisor sandbox's checkpoint.
func memoryDir(dir string) string { return filepath.Join(dir, "memory") }

// findRunsc returns the runsc a gVisor sandbox runs with, or an error
// that says how to get one.
func (r *Runtime) findRunsc() (string, error) {
	if p := runsc.Installed(r.cfg.Runsc); p != "" {
		return p, nil
	}
	return "", fmt.Errorf("the gvisor isolation tier needs gVisor's runsc on the host, and this one has none: run scripts/deps.sh (make run does), which builds it from its Go module, or create the sandbox with isolation native: %w", sandbox.ErrUnavailable)
}

// listenFile opens a native sandbox's daemon socket at sock, to hand
// down to its pid 1: a client can connect at once, the kernel queues it,
// and the first health check is answered the moment the daemon serves.
func listenFile(sock string) (*os.File, error) {
	os.Remove(sock)
	l, err := net.Listen("unix", sock)
	if err != nil {
		return nil, fmt.Errorf("opening the daemon's socket: %w", err)
	}
	os.Chmod(sock, 0o600)
	ul := l.(*net.UnixListener)
	ul.SetUnlinkOnClose(false)
	lf, err := ul.File()
	ul.Close()
	return lf, err
}

// client is a client of the sandbox's daemon, whose supervisor is
// shimPID while the sandbox's record names none yet (it is starting). A
// gVisor sandbox's socket is in a directory its root can write, mounted
// in its supervisor's namespace alone: the client dials it there
// (gvisorSocket), through the supervisor the record names at each dial
// (a client outlives a stop and resume, a crash and resume), and only if
// it is a socket, never through a link planted in its place.
func (r *Runtime) client(id string, st *state, shimPID int) (*guest.Client, error) {
	if gvisor(st) {
		dial := func(ctx context.Context) (net.Conn, error) {
			pid := shimPID
			if now, err := sbdir.Cached(r.dir(id)); err == nil && now.ShimPID != 0 {
				pid = now.ShimPID
			}
			sock := r.gvisorSocket(id, pid)
			if sock == "" {
				// Not mounted yet, or gone with the supervisor.
				return nil, &net.OpError{Op: "dial", Net: "unix", Err: syscall.ENOENT}
			}
			return guest.DialUnixNoFollow(ctx, sock)
		}
		return guest.NewClient("unix:///"+runsc.SocketName, guest.ClientOptions{AccessToken: st.Token, Dial: dial})
	}
	return guest.NewClient("unix://"+filepath.Join(r.dir(id), "guest.sock"), guest.ClientOptions{AccessToken: st.Token})
}

// gvisorSocket is where the runtime reaches a gVisor sandbox's daemon
// socket: its directory is a tmpfs the supervisor (shimPID) mounts in
// its own mount namespace, so no other process that copies the host's
// namespace (another sandbox's supervisor, a container runtime) keeps
// it after the sandbox stops. "" while the supervisor has no namespace
// of its own (starting, or gone).
func (r *Runtime) gvisorSocket(id string, shimPID int) string {
	view := host.MountView(shimPID)
	if view == "" {
		return ""
	}
	return filepath.Join(view, r.dir(id), runsc.HostSocketDir, runsc.SocketName)
}

// startTimeout is how long a start may take before the daemon answers:
// a restore reads the sandbox's whole memory back first.
func startTimeout(st *state) time.Duration {
	if st.Info.Paused {
		return 2 * time.Minute
	}
	if gvisor(st) {
		return 30 * time.Second
	}
	return 15 * time.Second
}

// Pause stops a running gVisor sandbox keeping its processes and memory:
// the daemon drops its host socket (which gVisor cannot save), runsc
// checkpoints the sandbox into its directory and ends it, and the
// supervisor gives back what it held, as at a stop. Resume restores it.
func (r *Runtime) Pause(ctx context.Context, id string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.pauseLocked(ctx, id)
}

func (r *Runtime) pauseLocked(ctx context.Context, id string) error {
	st, err := r.load(id)
	if err != nil {
		return err
	}
	if !gvisor(st) {
		return fmt.Errorf("sandbox %q runs on the native tier, which cannot keep memory across a pause (stop keeps its disk; create it with isolation gvisor to keep processes): %w", id, sandbox.ErrUnavailable)
	}
	if st.Info.State != sandbox.StateRunning {
		return fmt.Errorf("sandbox %q is not running: %w", id, sandbox.ErrState)
	}
	if err := r.checkpoint(ctx, id, st); err != nil {
		return err
	}
	// runsc ended the sandbox: its supervisor records the stop and lets
	// go of the disk, then the record says what the stop kept.
	if err := r.waitShim(st.ShimPID); err != nil {
		return err
	}
	if _, err := r.load(id); err != nil {
		return err
	}
	_, err = sbdir.Update(r.dir(id), func(s *state) error {
		s.Info.Paused = true
		s.StopReason = "paused"
		return nil
	})
	if err != nil {
		return err
	}
	if d, err := disk.Open(filepath.Join(r.dir(id), "disk")); err == nil {
		if err := d.WaitFree(30 * time.Second); err != nil {
			return fmt.Errorf("pausing sandbox %q: its memory is saved, but %w", id, errDiskHeld{err})
		}
	}
	return nil
}

// checkpoint saves a running gVisor sandbox's memory into its memory
// directory and ends it: the daemon first closes every host connection
// (the host sees its socket go); if the save fails it listens again.
func (r *Runtime) checkpoint(ctx context.Context, id string, st *state) error {
	mem := memoryDir(r.dir(id))
	rs := runsc.ForSandbox(r.dir(id), st)
	if err := rs.Signal(ctx, runsc.SignalDrop); err != nil {
		r.log.Warn("asking a gVisor sandbox's daemon to drop its connections", "sandbox", id, "err", err)
		return fmt.Errorf("pausing sandbox %q: its daemon could not be reached: %w", id, sandbox.ErrUnavailable)
	}
	// "" if the supervisor is gone, and its socket with it; an Lstat
	// there fails with no such file.
	sock := r.gvisorSocket(id, st.ShimPID)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(2 * time.Millisecond) {
		if _, err := os.Lstat(sock); errors.Is(err, os.ErrNotExist) {
			break
		}
		if time.Now().After(deadline) {
			rs.Signal(ctx, runsc.SignalListen)
			return fmt.Errorf("pausing sandbox %q: its daemon did not let go of its connections within 10s: %w", id, sandbox.ErrUnavailable)
		}
	}
	os.RemoveAll(mem)
	if err := os.Mkdir(mem, 0o700); err != nil {
		return err
	}
	if err := rs.Checkpoint(ctx, mem); err != nil {
		r.log.Warn("checkpointing a gVisor sandbox", "sandbox", id, "err", err)
		os.RemoveAll(mem)
		rs.Signal(context.WithoutCancel(ctx), runsc.SignalListen)
		return fmt.Errorf("pausing sandbox %q: gVisor could not save its memory (see the sandbox's host log); it keeps running: %w", id, sandbox.ErrUnavailable)
	}
	return nil
}

// waitShim waits until the supervisor pid has ended.
func (r *Runtime) waitShim(pid int) error {
	for deadline := time.Now().Add(30 * time.Second); sbutil.Alive(pid); time.Sleep(2 * time.Millisecond) {
		if time.Now().After(deadline) {
			return fmt.Errorf("the sandbox's supervisor did not end after its checkpoint: %w", sandbox.ErrUnavailable)
		}
	}
	return nil
}

// MaxMemoryForks is the most copies one ForkMemory makes.
const MaxMemoryForks = 16

// ForkMemory copies a running gVisor sandbox, its processes and memory
// with its disk, into n new running sandboxes. The source is paused once
// (a checkpoint, as Pause does), its disk copied n times while nothing
// runs, and then the source and every copy are restored from that one
// checkpoint: each copy starts where the source was, its processes and
// their memory included, and the source goes on. A copy keeps the
// source's daemon, so it answers to the source's access token; its
// hostname is the source's (restored from memory).
func (r *Runtime) ForkMemory(ctx context.Context, id string, n int) ([]sandbox.Session, error) {
	if n < 1 || n > MaxMemoryForks {
		return nil, fmt.Errorf("fork count %d: ask for 1 to %d copies: %w", n, MaxMemoryForks, sandbox.ErrInvalid)
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	src, err := r.load(id)
	if err != nil {
		return nil, err
	}
	if !gvisor(src) {
		return nil, fmt.Errorf("sandbox %q runs on the native tier, whose forks copy the disk only (create it with isolation gvisor to fork its processes too): %w", id, sandbox.ErrUnavailable)
	}
	if src.Info.State != sandbox.StateRunning {
		return nil, fmt.Errorf("sandbox %q is not running, so it has no processes to copy (a fork copies its disk): %w", id, sandbox.ErrState)
	}
	if err := r.pauseLocked(ctx, id); err != nil {
		return nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	var sessions []sandbox.Session
	var forkErr error
	for range n {
		s, err := r.restoreCopy(ctx, id)
		if err != nil {
			forkErr = err
			break
		}
		sessions = append(sessions, s)
	}
	// The source goes on from its checkpoint whatever became of the copies.
	if _, err := r.resumeLocked(ctx, id); err != nil {
		forkErr = errors.Join(forkErr, sandbox.WrapIDf(id, err, "resuming sandbox %q after forking it", id))
	}
	if forkErr != nil {
		for _, s := range sessions {
			r.Delete(context.WithoutCancel(ctx), s.ID())
		}
		return nil, forkErr
	}
	return sessions, nil
}

// restoreCopy makes one memory fork of paused sandbox id: a copy of its
// disk and its checkpoint (linked, not copied: restore only reads it),
// restored.
func (r *Runtime) restoreCopy(ctx context.Context, id string) (sandbox.Session, error) {
	src, err := r.load(id)
	if err != nil {
		return nil, err
	}
	nid, st, err := r.copySandbox(ctx, id, src)
	if err != nil {
		return nil, err
	}
	fail := func(err error) (sandbox.Session, error) {
		r.destroy(context.WithoutCancel(ctx), nid)
		return nil, sandbox.WrapIDf(id, err, "forking sandbox %q", id)
	}
	if err := linkFiles(memoryDir(r.dir(id)), memoryDir(r.dir(nid))); err != nil {
		return fail(err)
	}
	if st, err = sbdir.Update(r.dir(nid), func(s *state) error {
		s.Info.Paused = true
		s.Token = src.Token // the restored daemon is the source's
		return nil
	}); err != nil {
		return fail(err)
	}
	c, st, err := r.startLocked(ctx, nid, st)
	if err != nil {
		return fail(err)
	}
	return r.sessionOn(c, nid, st), nil
}

// linkFiles hard-links the files of directory src into a new directory dst.
func linkFiles(src, dst string) error {
	entries, err := os.ReadDir(src)
	if err != nil {
		return err
	}
	if err := os.Mkdir(dst, 0o700); err != nil {
		return err
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		if err := os.Link(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
			return err
		}
	}
	return nil
}

// restoreFailed is a resume's error when a paused sandbox's memory could
// not be restored (a runsc of another version than the one that saved
// it, a host that ran out of memory): the memory is dropped, so the next
// resume starts the sandbox afresh with its disk as it was.
func (r *Runtime) restoreFailed(id string, err error) error {
	r.log.Warn("restoring a paused sandbox's memory", "sandbox", id, "err", err)
	if _, uerr := sbdir.Update(r.dir(id), func(s *state) error {
		s.Info.Paused = false
		s.StopReason = "memory lost: restore failed"
		return nil
	}); uerr != nil {
		return errors.Join(err, uerr)
	}
	os.RemoveAll(memoryDir(r.dir(id)))
	// runsc's words name host paths: they stay in the host's log.
	return fmt.Errorf("resuming sandbox %q: its memory could not be restored (the host's log says why) and is dropped; its disk is kept: resume it again to start it afresh: %w", id, sandbox.ErrUnavailable)
}

// waitSocket waits until the socket sock names exists (sock gives ""
// until its place is known, then the same path), the supervisor has
// exited, ctx is done or the deadline passes, whichever comes first; the
// caller's health check says which.
func waitSocket(ctx context.Context, sock func() string, exited <-chan struct{}, deadline time.Time) {
	var p string
	for time.Now().Before(deadline) && ctx.Err() == nil {
		if p == "" {
			p = sock()
		}
		if _, err := os.Lstat(p); p != "" && err == nil {
			return
		}
		select {
		case <-exited:
			return
		case <-time.After(500 * time.Microsecond):
		}
	}
}
