// Package pid1 is a local sandbox's first process (`cove local-init`,
// started by its supervisor): it builds the sandbox's root filesystem,
// network and hardening, then serves as the in-sandbox daemon. cove's
// embedded cmd/cove-sandbox runs it; a program that re-runs itself for the
// roles reaches it through local.Main. It links the daemon but nothing of
// the host side (cgroups, nftables, templates), which would slow every
// sandbox's start.
package pid1

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/harden"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// Main is `cove local-init`: the sandbox's pid 1. In fresh mount, pid,
// ipc, uts and network namespaces it builds the root filesystem, pivots
// into it, brings up loopback, hardens itself and then serves as the
// sandbox's daemon on the socket the supervisor opened.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 1 && args[0] == "--gvisor" {
		return MainGVisor(ctx, stderr)
	}
	if len(args) == 3 && args[0] == "--gvisor-net" {
		return readdressGVisor(args[1], args[2])
	}
	if len(args) != 2 || args[0] != "--dir" {
		return errors.New("usage: cove local-init --dir DIR (started by the supervisor, not by hand)")
	}
	// Its log is the sandbox's host log, and some of its lines follow
	// what a tenant does: bounded per run (see sbutil.CapWriter).
	log := slog.New(slog.NewTextHandler(sbutil.CapWriter(stderr, sbutil.MaxRunLog), nil))
	cfg, err := sbdir.ReadInit(args[1])
	if err != nil {
		return err
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("local-init must be pid 1 of a new pid namespace (got pid %d)", os.Getpid())
	}
	lf := os.NewFile(sbdir.ListenFD, "guest.sock")
	l, err := net.FileListener(lf)
	if err != nil {
		return fmt.Errorf("taking the daemon's socket from the supervisor: %w", err)
	}
	lf.Close()
	// The cgroup's files are not visible after pivot_root: keep the OOM
	// counters open, and start the thread that joins the commands' group
	// (while the root is built).
	oomCounter := openOOMCounters(cfg.OOMFile, cfg.WorkOOMFile)
	work, err := startWorkThread(cfg.WorkTasks)
	if err != nil {
		return err
	}
	withSudo, err := buildRoot(cfg, log)
	if err != nil {
		return fmt.Errorf("building the sandbox's root filesystem: %w", err)
	}
	sudoSocket := ""
	if withSudo {
		sudoSocket = guest.SudoSocketPath
	}
	if err := loopbackUp(); err != nil {
		return fmt.Errorf("bringing up loopback: %w", err)
	}
	if cfg.Net != nil {
		if err := sandboxNetUp(cfg.Net); err != nil {
			return fmt.Errorf("setting up the sandbox's network: %w", err)
		}
	}
	if cfg.Hostname != "" {
		unix.Sethostname([]byte(cfg.Hostname))
	}
	var spawn func(*exec.Cmd) error
	if work != nil {
		// Joined before hardening, so the thread is hardened as it is.
		if err := work.wait(); err != nil {
			return err
		}
		spawn = work.spawn
	}
	if cfg.Harden {
		if err := hardenSelf(cfg, log); err != nil {
			return fmt.Errorf("hardening the sandbox: %w", err)
		}
	}
	// In the background: it needs no more than a few milliseconds, and
	// the daemon can serve meanwhile.
	go warmThreads(8)
	token := os.Getenv(guest.TokenEnv)
	os.Unsetenv(guest.TokenEnv)
	srv, err := guest.NewServer(guest.Config{
		Root: "/", Workdir: cfg.Workspace, AccessToken: token, Env: cfg.Env,
		User: cfg.User, Reap: true, Logger: log, OOMCounter: oomCounter, Spawn: spawn,
		SudoSocket: sudoSocket,
	})
	if err != nil {
		return err
	}
	log.Info("sandbox ready", "workspace", cfg.Workspace, "user", cfg.User)
	// Start-up touched code an idle daemon never runs again; give those
	// pages back soon after, and again now and then for what requests
	// touched (the next use faults them in from the page cache).
	go func() {
		t := time.NewTimer(time.Second)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				sbutil.TrimMemory()
				t.Reset(time.Minute)
			}
		}
	}()
	err = srv.Serve(ctx, l)
	srv.Close()
	return err
}

// buildRoot mounts the overlay root and its pseudo filesystems and pivots
// into it. It runs in the sandbox's own mount namespace: nothing here is
// visible on the host, and everything goes when pid 1 exits.
//
// Everything under the new root belongs to the sandbox: its upper dir is
// the sandbox's own disk, which root inside may have filled with symlinks
// at its last run, and its lower dir is a template, which a tenant may
// have brought. A directory made or a mount placed by following such a
// link before pivot_root would land on the host (a home linked to a host
// directory would be created there and handed to the sandbox's user). So
// buildRoot does nothing under the new root before pivot_root: it mounts
// the overlay on the state directory's own rootfs, takes what the sandbox
// gets from the host (the template's binds, the device nodes) as detached
// mounts while the host is still in view, pivots, and only then makes
// directories and mounts, by paths that now resolve inside the sandbox
// the way any of its processes' paths do. A planted link leads somewhere
// in the sandbox, never out.
func buildRoot(cfg *sbdir.Init, log *slog.Logger) (withSudo bool, err error) {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return false, fmt.Errorf("making mounts private: %w", err)
	}
	root := filepath.Join(cfg.Dir, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return false, err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", cfg.Lower, cfg.Upper, cfg.Work)
	// nodev: a device node in a template must not open the host's device
	// (the runtime's /dev is a mount of its own).
	if err := unix.Mount("overlay", root, "overlay", unix.MS_NODEV, opts); err != nil {
		return false, fmt.Errorf("mounting the overlay (%s): %w", opts, err)
	}
	host, err := takeHostMounts(cfg.Binds)
	if err != nil {
		return false, err
	}
	defer host.close()
	exe := cloneExe(log)
	defer exe.close()
	// pivot_root(".", ".") stacks the old root on the new one; unmounting
	// it detaches every host mount from this namespace.
	if err := unix.Chdir(root); err != nil {
		return false, err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return false, fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return false, fmt.Errorf("detaching the host's root: %w", err)
	}
	if err := unix.Chdir("/"); err != nil {
		return false, err
	}
	// From here on every path is the sandbox's own.
	for _, b := range host.binds {
		if _, err := mkdirAll(b.path, 0o755); err != nil {
			return false, fmt.Errorf("creating %s: %w", b.path, err)
		}
		if err := attach(b, b.path, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
			return false, err
		}
	}
	// The workspace and the user's home belong to the sandbox's user.
	for _, d := range []string{cfg.Workspace, "/home/" + cfg.User} {
		if err := ownDir(d, cfg.UID, cfg.GID); err != nil {
			return false, err
		}
	}
	withSudo = bindSudo(exe, log)
	return withSudo, mountPseudo(cfg, host)
}

// hostMount is something of the host's, cloned as a detached mount before
// pivot_root, to be attached at path inside the sandbox after it.
type hostMount struct {
	path string // the host's path, and where it goes inside
	fd   int    // from open_tree(OPEN_TREE_CLONE)
}

type hostMounts struct {
	binds   []hostMount // the template's directories, bound read-only
	devices []hostMount // /dev/null and friends
}

// devices are the host's device nodes every sandbox's /dev gets.
var devices = []string{"null", "zero", "full", "random", "urandom", "tty"}

// takeHostMounts clones what the sandbox gets from the host while the
// host's paths are in view: the template's bind directories (with their
// submounts) and the device nodes. Bind directories that the host lacks,
// or has as symlinks (the template has the same link), are left out.
func takeHostMounts(binds []string) (*hostMounts, error) {
	h := &hostMounts{}
	clone := func(p string, flags uint) (hostMount, error) {
		fd, err := unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC|unix.AT_SYMLINK_NOFOLLOW|flags)
		if err != nil {
			return hostMount{}, fmt.Errorf("taking the host's %s for the sandbox: %w", p, err)
		}
		return hostMount{path: p, fd: fd}, nil
	}
	for _, b := range binds {
		if fi, err := os.Lstat(b); err != nil || !fi.IsDir() {
			continue
		}
		m, err := clone(b, unix.AT_RECURSIVE)
		if err != nil {
			h.close()
			return nil, err
		}
		h.binds = append(h.binds, m)
	}
	for _, n := range devices {
		m, err := clone("/dev/"+n, 0)
		if err != nil {
			h.close()
			return nil, err
		}
		h.devices = append(h.devices, m)
	}
	return h, nil
}

func (h *hostMounts) close() {
	for _, m := range append(h.binds, h.devices...) {
		unix.Close(m.fd)
	}
}

// attach mounts a cloned host mount at target (a path inside the sandbox,
// after pivot_root), with attrs (MOUNT_ATTR_*) set on it and every mount
// beneath it. Kernels before 5.12 lack mount_setattr: there the attrs are
// set on the top mount only, by a remount.
func attach(m hostMount, target string, attrs uint64) error {
	recursive := true
	if attrs != 0 {
		err := unix.MountSetattr(m.fd, "", unix.AT_EMPTY_PATH|unix.AT_RECURSIVE, &unix.MountAttr{Attr_set: attrs})
		if errors.Is(err, unix.ENOSYS) {
			recursive = false
		} else if err != nil {
			return fmt.Errorf("making the host's %s read-only: %w", m.path, err)
		}
	}
	// T_SYMLINKS: a target that is a symlink is followed, as mount(2)
	// does, inside the sandbox.
	if err := unix.MoveMount(m.fd, "", unix.AT_FDCWD, target, unix.MOVE_MOUNT_F_EMPTY_PATH|unix.MOVE_MOUNT_T_SYMLINKS); err != nil {
		return fmt.Errorf("mounting the host's %s on %s: %w", m.path, target, err)
	}
	if !recursive {
		flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT)
		for attr, flag := range map[uint64]uintptr{unix.MOUNT_ATTR_RDONLY: unix.MS_RDONLY, unix.MOUNT_ATTR_NOSUID: unix.MS_NOSUID, unix.MOUNT_ATTR_NODEV: unix.MS_NODEV, unix.MOUNT_ATTR_NOEXEC: unix.MS_NOEXEC} {
			if attrs&attr != 0 {
				flags |= flag
			}
		}
		if err := unix.Mount("", target, "", flags, ""); err != nil {
			return fmt.Errorf("making the host's %s read-only: %w", m.path, err)
		}
	}
	return nil
}

// mkdirAll makes dir and its missing parents inside the sandbox (pid 1
// is past pivot_root), resolving symlinks as the kernel would for any of
// the sandbox's processes, one component at a time: a link whose target
// is missing gets its target made, as a directory. made says whether the
// directory dir names was made now.
func mkdirAll(dir string, mode os.FileMode) (made bool, err error) {
	fd, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return false, err
	}
	defer func() { unix.Close(fd) }()
	fail := func(err error) (bool, error) { return false, &os.PathError{Op: "mkdir", Path: dir, Err: err} }
	rest := strings.Split(dir, "/")
	for hops := 0; len(rest) > 0; {
		name := rest[0]
		rest = rest[1:]
		if name == "" || name == "." {
			continue
		}
		made = false
		next, err := unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if errors.Is(err, unix.ENOENT) && name != ".." {
			perm := uint32(0o755)
			if len(rest) == 0 {
				perm = uint32(mode.Perm())
			}
			merr := unix.Mkdirat(fd, name, perm)
			if merr != nil && !errors.Is(merr, unix.EEXIST) {
				return fail(merr)
			}
			made = merr == nil
			next, err = unix.Openat(fd, name, unix.O_PATH|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		}
		if err != nil {
			return fail(err)
		}
		var st unix.Stat_t
		if err := unix.Fstat(next, &st); err != nil {
			unix.Close(next)
			return fail(err)
		}
		switch st.Mode & unix.S_IFMT {
		case unix.S_IFDIR:
			unix.Close(fd)
			fd = next
		case unix.S_IFLNK:
			target, err := sbutil.Readlinkat(next, "")
			unix.Close(next)
			if err != nil {
				return fail(err)
			}
			if hops++; hops > 40 {
				return fail(unix.ELOOP)
			}
			if strings.HasPrefix(target, "/") {
				root, err := unix.Open("/", unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
				if err != nil {
					return fail(err)
				}
				unix.Close(fd)
				fd = root
			}
			// The link's components take its place; a relative one
			// goes on from the directory that holds the link.
			rest = append(strings.Split(target, "/"), rest...)
		default:
			unix.Close(next)
			return fail(unix.ENOTDIR)
		}
	}
	return made, nil
}

// ownDir makes dir (the workspace or the user's home) if it is missing
// and gives it to uid:gid. A directory that pid 1 finds already there
// only through a symlink keeps its owner: the link (the sandbox's or its
// template's) leads somewhere inside the sandbox, but not necessarily to
// a place its user should own.
func ownDir(dir string, uid, gid int) error {
	made, err := mkdirAll(dir, 0o755)
	if err != nil {
		return fmt.Errorf("creating %s: %w", dir, err)
	}
	if !made && linkOnPath(dir) {
		return nil
	}
	if err := os.Chown(dir, uid, gid); err != nil {
		return fmt.Errorf("giving %s to the sandbox's user: %w", dir, err)
	}
	return nil
}

// linkOnPath reports whether any component of the absolute path p is a
// symlink.
func linkOnPath(p string) bool {
	for cur := p; cur != "/"; cur = filepath.Dir(cur) {
		if fi, err := os.Lstat(cur); err != nil || fi.Mode()&os.ModeSymlink != 0 {
			return true
		}
	}
	return false
}

func bindReadOnly(src, target string, extra uintptr) error {
	if err := unix.Mount(src, target, "", unix.MS_BIND|unix.MS_REC, ""); err != nil {
		return fmt.Errorf("binding %s: %w", src, err)
	}
	flags := uintptr(unix.MS_BIND | unix.MS_REMOUNT | unix.MS_RDONLY | unix.MS_NOSUID | extra)
	if err := unix.Mount("", target, "", flags, ""); err != nil {
		return fmt.Errorf("making %s read-only: %w", src, err)
	}
	return nil
}

// mountPseudo gives the sandbox (pid 1 is past pivot_root) a minimal /dev
// with the host's device nodes in h, a fresh /proc (with the kernel's
// knobs read-only and its secrets masked) and private /tmp and /run.
func mountPseudo(cfg *sbdir.Init, h *hostMounts) error {
	for _, d := range []string{"/proc", "/dev", "/tmp", "/sys", "/run"} {
		if _, err := mkdirAll(d, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
	}
	if err := unix.Mount("tmpfs", "/dev", "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	// /dev is a fresh tmpfs: what is made below is made there.
	for _, d := range h.devices {
		if err := os.WriteFile(d.path, nil, 0o666); err != nil {
			return err
		}
		if err := attach(d, d.path, 0); err != nil {
			return err
		}
	}
	os.Mkdir("/dev/pts", 0o755)
	if err := unix.Mount("devpts", "/dev/pts", "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("mounting /dev/pts: %w", err)
	}
	os.Mkdir("/dev/shm", 0o1777)
	if err := unix.Mount("shm", "/dev/shm", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		os.Symlink(target, "/dev/"+name)
	}

	if err := unix.Mount("proc", "/proc", "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	// As runc does: knobs that reach the host kernel are read-only, and
	// files that expose host memory or devices are hidden. The paths are
	// the kernel's, in the fresh /proc.
	for _, p := range []string{"sys", "sysrq-trigger", "irq", "bus", "fs"} {
		t := "/proc/" + p
		if _, err := os.Lstat(t); err == nil {
			if err := bindReadOnly(t, t, unix.MS_NOEXEC|unix.MS_NODEV); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{"kcore", "keys", "timer_list", "sched_debug", "kallsyms", "kmsg", "latency_stats"} {
		t := "/proc/" + p
		if _, err := os.Lstat(t); err == nil {
			unix.Mount("/dev/null", t, "", unix.MS_BIND, "")
		}
	}
	for _, p := range []string{"acpi", "scsi"} {
		t := "/proc/" + p
		if _, err := os.Lstat(t); err == nil {
			unix.Mount("tmpfs", t, "tmpfs", unix.MS_RDONLY, "size=0")
		}
	}

	size := cfg.TmpSize
	if size == "" {
		size = "512m"
	}
	if err := unix.Mount("tmpfs", "/tmp", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+size); err != nil {
		return fmt.Errorf("mounting /tmp: %w", err)
	}
	if err := unix.Mount("tmpfs", "/run", "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755,size=16m"); err != nil {
		return fmt.Errorf("mounting /run: %w", err)
	}
	return nil
}

// warmThreads makes the Go runtime start n OS threads now, which it then
// keeps idle for reuse. The daemon shares the sandbox's pids limit with
// its commands; under a fork bomb no new thread can be made, and a Go
// program that cannot make a thread it needs dies.
func warmThreads(n int) {
	var wg sync.WaitGroup
	for range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			// A blocking syscall holds its thread, so each one needs its own.
			unix.Nanosleep(&unix.Timespec{Nsec: 2e6}, nil)
		}()
	}
	wg.Wait()
}

// readOOMCounter reads "oom_kill N" from an open cgroup file.
func readOOMCounter(f *os.File) int64 {
	buf := make([]byte, 4096)
	n, err := f.ReadAt(buf, 0)
	if n == 0 && err != nil {
		return -1
	}
	for _, line := range strings.Split(string(buf[:n]), "\n") {
		if v, ok := strings.CutPrefix(line, "oom_kill "); ok {
			if k, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64); err == nil {
				return k
			}
		}
	}
	return -1
}

// hardenSelf walls in pid 1 (and so every command it starts): capabilities
// cut to what the daemon needs, no_new_privs, the seccomp filter and a
// Landlock ruleset where the kernel has one. It runs after the mounts and
// before the daemon serves.
func hardenSelf(cfg *sbdir.Init, log *slog.Logger) error {
	t0 := time.Now()
	rep, err := harden.Apply(harden.Options{})
	if err != nil {
		return fmt.Errorf("applying seccomp, capabilities and no_new_privs: %w", err)
	}
	log.Info("sandbox hardened", "seccomp", rep.Seccomp, "no_new_privs", rep.NoNewPrivs,
		"landlock_abi", rep.Landlock, "caps_kept", rep.CapsKept, "skipped", rep.Skipped, "took", time.Since(t0))
	return nil
}
