package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/vishvananda/netlink"
	"github.com/vishvananda/netns"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/runsc"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// A gVisor sandbox (Spec.Isolation "gvisor") holds the same things on the
// host as a native one (its disk, cgroup, network pair and rules, TTL),
// taken and given back the same way; its pid 1 is `runsc run` (or runsc
// restore, for a sandbox paused with its memory) of a bundle that runs
// the same daemon inside gVisor. runsc's own processes (the Sentry, the
// gofer) start in the sandbox's cgroup, so its limits hold them and a
// kill of the group ends them whatever happened to runsc.

// gvisorStart takes what the sandbox holds on the host and starts runsc.
// On error nothing is left held or running.
func gvisorStart(ctx context.Context, dir string, initCmd []string, st *sbdir.State, stderr io.Writer, log *slog.Logger) (cmd *exec.Cmd, release func(), err error) {
	// After privateMounts: the daemon's socket directory is mounted in
	// this thread's namespace alone, where runsc binds it and the runtime
	// dials it through this thread's /proc root (host.MountView). In the
	// host's, every namespace copied from it while the sandbox ran
	// (another sandbox's supervisor, a container runtime, a service's
	// private /tmp) would keep the mount after the stop.
	if err := privateMounts(); err != nil {
		return nil, nil, err
	}
	sockDir := filepath.Join(dir, runsc.HostSocketDir)
	if err := socketDir(sockDir); err != nil {
		return nil, nil, err
	}
	grp, releaseHost, err := host.Acquire(ctx, dir, st, log)
	if err != nil {
		unix.Unmount(sockDir, unix.MNT_DETACH)
		return nil, nil, err
	}
	self := unix.Gettid() // signalListen, on another thread, looks here
	rs := runsc.ForSandbox(dir, st)
	var ns netns.NsHandle = -1
	release = func() {
		if err := rs.Delete(context.WithoutCancel(ctx)); err != nil {
			log.Warn("removing runsc's state of the sandbox", "err", err)
		}
		if ns >= 0 {
			ns.Close()
		}
		releaseHost() // kills what runsc left in the group
		unix.Unmount(filepath.Join(dir, "rootfs"), unix.MNT_DETACH)
		unix.Unmount(sockDir, unix.MNT_DETACH)
	}
	defer func() {
		if err != nil {
			release()
		}
	}()
	// A supervisor killed mid-run leaves runsc's record of the sandbox.
	if err := rs.Delete(ctx); err != nil {
		log.Warn("removing runsc's old state of the sandbox", "err", err)
	}
	root := filepath.Join(dir, "rootfs")
	opts := fmt.Sprintf("lowerdir=%s,upperdir=%s,workdir=%s", st.Init.Lower, st.Init.Upper, st.Init.Work)
	if err := unix.Mount("overlay", root, "overlay", unix.MS_NODEV, opts); err != nil {
		return nil, nil, fmt.Errorf("mounting the overlay: %w", err)
	}
	nsPath, readdress := "", ""
	if st.Init.Net != nil {
		last := st.Init.Net.Addr
		if ns, err = newNetns(); err != nil {
			return nil, nil, fmt.Errorf("making the sandbox's network namespace: %w", err)
		}
		nsPath = fmt.Sprintf("/proc/%d/fd/%d", os.Getpid(), int(ns))
		// gVisor's netstack copies the namespace's interfaces when it
		// boots: the pair is made and routed first.
		if err := host.NetUpNS(filepath.Dir(dir), st.Info.ID, st.Init.Net, ns, st.Info.Paused); err != nil {
			return nil, nil, fmt.Errorf("setting up the sandbox's network: %w", err)
		}
		if st.Info.Paused && st.Init.Net.Addr != last {
			// Its old /30 is another sandbox's now (or this is a memory
			// fork): the restored netstack gets the new one.
			readdress = st.Init.Net.Addr.String() + " " + st.Init.Net.Gateway.Addr().String()
		}
	}
	if err := writeBundle(dir, initCmd, st, nsPath); err != nil {
		return nil, nil, err
	}
	args := []string{"run", "--bundle", filepath.Join(dir, "bundle"), rs.ID}
	if st.Info.Paused {
		args = []string{"restore", "--image-path", filepath.Join(dir, "memory"), "--bundle", filepath.Join(dir, "bundle"), rs.ID}
	}
	cmd = rs.Command(nil, args...)
	cmd.Env = []string{"PATH=" + sbdir.DefaultPath}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	// runsc dies with its supervisor; the group's kill (release, or the
	// runtime's when it finds the supervisor gone) ends the rest.
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := startInGroup(cmd, grp); err != nil {
		return nil, nil, err
	}
	if st.Info.Paused {
		// The restored daemon waits to be told it may listen again.
		go signalListen(ctx, rs, filepath.Join(fmt.Sprintf("/proc/self/task/%d/root", self), sockDir), initCmd, readdress, log)
	}
	return cmd, release, nil
}

// signalListen tells a restored sandbox's daemon to listen again, as
// soon as runsc has it running, until its socket is there. readdress
// ("ADDR/30 GATEWAY") first gives its eth0 the addresses of this run:
// from a process runsc starts in the sandbox with the one capability
// that needs (the daemon and the sandbox's root have not got it).
func signalListen(ctx context.Context, rs runsc.Runsc, sockDir string, initCmd []string, readdress string, log *slog.Logger) {
	deadline := time.Now().Add(20 * time.Second)
	for readdress != "" && ctx.Err() == nil && time.Now().Before(deadline) {
		args := append([]string{"exec", "--cap", "CAP_NET_ADMIN", rs.ID, runsc.InitPath}, initCmd[1:]...)
		out, err := rs.Command(ctx, append(append(args, "local-init", "--gvisor-net"), strings.Fields(readdress)...)...).CombinedOutput()
		if err == nil {
			break
		}
		if time.Now().Add(20 * time.Millisecond).After(deadline) {
			log.Warn("giving the restored sandbox its new address", "err", err, "out", string(out))
		}
		time.Sleep(20 * time.Millisecond)
	}
	for ctx.Err() == nil && time.Now().Before(deadline) {
		if _, err := os.Lstat(filepath.Join(sockDir, runsc.SocketName)); err == nil {
			return
		}
		rs.Signal(ctx, runsc.SignalListen)
		time.Sleep(20 * time.Millisecond)
	}
	log.Warn("the restored sandbox's daemon did not listen again")
}

// writeBundle writes the sandbox's OCI bundle: its root is the overlay
// the supervisor mounted, its process the daemon (initCmd, run as
// local-init --gvisor) with its settings in the environment.
func writeBundle(dir string, initCmd []string, st *sbdir.State, nsPath string) error {
	sudo := sudoBindable(filepath.Join(dir, "rootfs"), st.Init.Binds)
	cfg, err := runsc.MarshalConfig(runsc.Config{
		Workspace: st.Init.Workspace, User: st.Init.User, UID: st.Init.UID, GID: st.Init.GID,
		Env: st.Init.Env, Sudo: sudo, MemoryBytes: st.Info.Spec.Limits.MemoryBytes,
		Pids: max(st.Info.Spec.Limits.Pids, 0),
	})
	if err != nil {
		return err
	}
	env := []string{"PATH=" + sbdir.DefaultPath, sbdir.TokenEnv + "=" + st.Token, runsc.ConfigEnv + "=" + cfg}
	if v, ok := os.LookupEnv("GORACE"); ok {
		env = append(env, "GORACE="+v)
	}
	tmp := gvisorTmpSize(st.Init.TmpSize, st.Info.Spec.Limits.MemoryBytes)
	b := runsc.Bundle{
		Root: filepath.Join(dir, "rootfs"), Binds: st.Init.Binds,
		Init: initCmd[0], Args: append(append([]string(nil), initCmd[1:]...), "local-init", "--gvisor"),
		Env: env, SocketDir: filepath.Join(dir, runsc.HostSocketDir), Sudo: sudo,
		Hostname: st.Init.Hostname, Netns: nsPath, TmpSize: tmp,
	}
	return b.Write(filepath.Join(dir, "bundle"))
}

// gvisorTmpSize is /tmp's size in a gVisor sandbox (set, if the
// sandbox's settings name one): /tmp is a tmpfs in gVisor's memory,
// which no process owns and the daemon's OOM killer cannot free, so a
// tenant who filled it past the memory limit would leave every command
// killed and, past the cgroup's headroom, the host's OOM killer ending
// the Sentry. It is at most half the memory limit: a full /tmp is a
// "no space left" and the sandbox goes on.
func gvisorTmpSize(set string, memory int64) string {
	if set != "" {
		return set
	}
	size := int64(512 << 20)
	if memory > 0 && memory/2 < size {
		size = memory / 2
	}
	return fmt.Sprintf("%dk", size>>10)
}

// sudoBindable says whether the daemon can be bound over /usr/bin/sudo:
// in a /usr bound from the host, where the host has the file; in the
// template's own /usr (the sandbox's root, mounted at root), where
// /usr/bin is a directory and sudo is a regular file or absent (runsc
// makes it). A link there, which a template or the sandbox's root may
// have planted, gVisor would follow inside the sandbox to mount the
// daemon where the link leads, or fail to start the sandbox when it
// cannot (a link into /proc): such a sandbox has no sudo, as on the
// native tier, where pid 1 finds the link leads nowhere.
func sudoBindable(root string, binds []string) bool {
	const sudo = "/usr/bin/sudo"
	for _, b := range binds {
		if strings.HasPrefix(sudo, strings.TrimSuffix(b, "/")+"/") {
			fi, err := os.Lstat(sudo)
			return err == nil && fi.Mode().IsRegular()
		}
	}
	r, err := os.OpenRoot(root)
	if err != nil {
		return false
	}
	defer r.Close()
	for _, d := range []string{"usr", "usr/bin"} {
		if fi, err := r.Lstat(d); err != nil || !fi.IsDir() {
			return false
		}
	}
	fi, err := r.Lstat("usr/bin/sudo")
	return errors.Is(err, os.ErrNotExist) || err == nil && fi.Mode().IsRegular()
}

// newNetns makes a network namespace with loopback up (gVisor's
// netstack copies the namespace's interfaces: loopback must be up to be
// among them) and returns a handle on it. The namespace is made on a
// thread of its own that is never unlocked, so it ends with its
// goroutine and no other goroutine ever runs in that namespace.
func newNetns() (netns.NsHandle, error) {
	type result struct {
		ns  netns.NsHandle
		err error
	}
	ch := make(chan result, 1)
	go func() {
		runtime.LockOSThread()
		ns, err := netns.New()
		if err != nil {
			ch <- result{-1, err}
			return
		}
		lo, err := netlink.LinkByName("lo")
		if err == nil {
			err = netlink.LinkSetUp(lo)
		}
		if err != nil {
			ns.Close()
			ch <- result{-1, err}
			return
		}
		ch <- result{ns, nil}
	}()
	r := <-ch
	if r.err != nil {
		return -1, fmt.Errorf("unshare of the network namespace failed: %w", r.err)
	}
	return r.ns, nil
}

// socketDir mounts a tiny tmpfs of its own at dir for the daemon's
// socket: the sandbox's root can write in that directory (the daemon
// binds its socket there through runsc), and what it writes must land
// on neither the host's disk nor beyond a few kilobytes.
func socketDir(dir string) error {
	os.RemoveAll(dir) // a crashed run's
	if err := os.Mkdir(dir, 0o700); err != nil {
		return fmt.Errorf("making the daemon's socket directory: %w", err)
	}
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "size=64k,nr_inodes=16,mode=700"); err != nil {
		return fmt.Errorf("mounting the daemon's socket directory: %w", err)
	}
	return nil
}
