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
	if len(args) != 2 || args[0] != "--dir" {
		return errors.New("usage: cove local-init --dir DIR (started by the supervisor, not by hand)")
	}
	log := slog.New(slog.NewTextHandler(stderr, nil))
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
	if err := buildRoot(cfg); err != nil {
		return fmt.Errorf("building the sandbox's root filesystem: %w", err)
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

// buildRoot mounts the overlay root and its pseudo filesystems, then
// pivots into it. It runs in the sandbox's own mount namespace: nothing
// here is visible on the host, and everything goes when pid 1 exits.
func buildRoot(cfg *sbdir.Init) error {
	// Nothing we mount may propagate back to the host.
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, ""); err != nil {
		return fmt.Errorf("making mounts private: %w", err)
	}
	root := filepath.Join(cfg.Dir, "rootfs")
	if err := os.MkdirAll(root, 0o755); err != nil {
		return err
	}
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", cfg.Lower, cfg.Upper, cfg.Work)
	if err := unix.Mount("overlay", root, "overlay", 0, opts); err != nil {
		return fmt.Errorf("mounting the overlay (%s): %w", opts, err)
	}
	for _, b := range cfg.Binds {
		if fi, err := os.Lstat(b); err != nil || !fi.IsDir() {
			continue // absent, or a symlink the template already has
		}
		target := filepath.Join(root, b)
		if err := os.MkdirAll(target, 0o755); err != nil {
			return err
		}
		if err := bindReadOnly(b, target, unix.MS_NODEV); err != nil {
			return err
		}
	}
	// The workspace and the user's home belong to the sandbox's user.
	for _, d := range []string{cfg.Workspace, "/home/" + cfg.User} {
		p := filepath.Join(root, d)
		if err := os.MkdirAll(p, 0o755); err != nil {
			return fmt.Errorf("creating %s: %w", d, err)
		}
		os.Chown(p, cfg.UID, cfg.GID)
	}
	if err := mountPseudo(root, cfg); err != nil {
		return err
	}
	// pivot_root(".", ".") stacks the old root on the new one; unmounting
	// it detaches every host mount from this namespace.
	if err := unix.Chdir(root); err != nil {
		return err
	}
	if err := unix.PivotRoot(".", "."); err != nil {
		return fmt.Errorf("pivot_root: %w", err)
	}
	if err := unix.Unmount(".", unix.MNT_DETACH); err != nil {
		return fmt.Errorf("detaching the host's root: %w", err)
	}
	return unix.Chdir("/")
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

// mountPseudo gives the new root a fresh /proc (with the kernel's knobs
// read-only and its secrets masked), a minimal /dev and a private /tmp.
func mountPseudo(root string, cfg *sbdir.Init) error {
	mk := func(p string, mode os.FileMode) error { return os.MkdirAll(filepath.Join(root, p), mode) }
	for _, d := range []string{"proc", "dev", "tmp", "sys", "run"} {
		if err := mk(d, 0o755); err != nil {
			return err
		}
	}
	proc := filepath.Join(root, "proc")
	if err := unix.Mount("proc", proc, "proc", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, ""); err != nil {
		return fmt.Errorf("mounting /proc: %w", err)
	}
	// As runc does: knobs that reach the host kernel are read-only, and
	// files that expose host memory or devices are hidden.
	for _, p := range []string{"sys", "sysrq-trigger", "irq", "bus", "fs"} {
		t := filepath.Join(proc, p)
		if _, err := os.Lstat(t); err == nil {
			if err := bindReadOnly(t, t, unix.MS_NOEXEC|unix.MS_NODEV); err != nil {
				return err
			}
		}
	}
	for _, p := range []string{"kcore", "keys", "timer_list", "sched_debug", "kallsyms", "kmsg", "latency_stats"} {
		t := filepath.Join(proc, p)
		if _, err := os.Lstat(t); err == nil {
			unix.Mount("/dev/null", t, "", unix.MS_BIND, "")
		}
	}
	for _, p := range []string{"acpi", "scsi"} {
		t := filepath.Join(proc, p)
		if _, err := os.Lstat(t); err == nil {
			unix.Mount("tmpfs", t, "tmpfs", unix.MS_RDONLY, "size=0")
		}
	}

	dev := filepath.Join(root, "dev")
	if err := unix.Mount("tmpfs", dev, "tmpfs", unix.MS_NOSUID|unix.MS_NOEXEC, "mode=755,size=64k"); err != nil {
		return fmt.Errorf("mounting /dev: %w", err)
	}
	for _, n := range []string{"null", "zero", "full", "random", "urandom", "tty"} {
		t := filepath.Join(dev, n)
		if err := os.WriteFile(t, nil, 0o666); err != nil {
			return err
		}
		if err := unix.Mount("/dev/"+n, t, "", unix.MS_BIND, ""); err != nil {
			return fmt.Errorf("binding /dev/%s: %w", n, err)
		}
	}
	pts := filepath.Join(dev, "pts")
	os.MkdirAll(pts, 0o755)
	if err := unix.Mount("devpts", pts, "devpts", unix.MS_NOSUID|unix.MS_NOEXEC, "newinstance,ptmxmode=0666,mode=0620,gid=5"); err != nil {
		return fmt.Errorf("mounting /dev/pts: %w", err)
	}
	shm := filepath.Join(dev, "shm")
	os.MkdirAll(shm, 0o1777)
	if err := unix.Mount("shm", shm, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size=64m"); err != nil {
		return fmt.Errorf("mounting /dev/shm: %w", err)
	}
	for name, target := range map[string]string{
		"ptmx": "pts/ptmx", "fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
		"stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2",
	} {
		os.Symlink(target, filepath.Join(dev, name))
	}
	size := cfg.TmpSize
	if size == "" {
		size = "512m"
	}
	if err := unix.Mount("tmpfs", filepath.Join(root, "tmp"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=1777,size="+size); err != nil {
		return fmt.Errorf("mounting /tmp: %w", err)
	}
	if err := unix.Mount("tmpfs", filepath.Join(root, "run"), "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, "mode=755,size=16m"); err != nil {
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
