// Package shim is a local sandbox's supervisor (`cove local-shim`,
// started detached by the runtime): it takes what the sandbox holds on
// the host, starts its pid 1 in new namespaces, enforces the TTL and
// cleans up when pid 1 ends. cove's embedded cmd/cove-shim runs it; a
// program that re-runs itself for the roles reaches it through
// local.Main. It links neither the daemon nor templates, which would slow
// every sandbox's start.
package shim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/cgroup"
	"github.com/cove-sandbox/cove/sandbox/local/harden"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// Main is `cove local-shim`: a sandbox's supervisor. Detached from
// whoever created the sandbox (its own session), it opens the daemon's
// socket, starts pid 1 in new namespaces, enforces the TTL, and when pid 1
// ends (stop, TTL, crash) releases what the sandbox held and records that
// it stopped. One supervisor runs per running sandbox.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) < 2 || args[0] != "--dir" {
		return errors.New("usage: cove local-shim --dir DIR [INIT-COMMAND...] (started by the runtime, not by hand)")
	}
	dir := args[1]
	initCmd := args[2:]
	// Catch the signals first: the runtime may send SIGHUP (a new TTL)
	// as soon as the sandbox answers, before supervise runs, and an
	// uncaught SIGHUP would end the supervisor.
	sigs := make(chan os.Signal, 1)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	// Pdeathsig fires when the forking *thread* ends: fork from the main
	// thread, locked for the supervisor's whole life.
	runtime.LockOSThread()
	log := slog.New(slog.NewTextHandler(stderr, nil)).With("sandbox", filepath.Base(dir))
	// The supervisor records itself once pid 1 runs (below), a few
	// milliseconds from now; until then a creator killed meanwhile is
	// seen here or, later, by the next List, which deletes the sandbox,
	// and the record below then fails and stops pid 1.
	st, err := sbdir.Read(dir)
	if err != nil {
		return err
	}
	if st.CreatorPID != 0 && !sbutil.Alive(st.CreatorPID) {
		return fmt.Errorf("the process creating this sandbox (pid %d) is gone; not starting it", st.CreatorPID)
	}
	if len(initCmd) == 0 {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		initCmd = []string{exe}
	}

	gvisor := st.Info.Spec.Isolation == sandbox.IsolationGVisor
	start := startInit
	if gvisor {
		start = gvisorStart
	}
	cmd, release, err := start(ctx, dir, initCmd, st, stderr, log)
	if err != nil {
		return err
	}
	if n := st.Init.Net; n != nil && !gvisor {
		// pid 1 waits for its end of the pair before its daemon serves.
		if err = host.NetUp(filepath.Dir(dir), st.Info.ID, n, cmd.Process.Pid); err != nil {
			err = fmt.Errorf("setting up the sandbox's network: %w", err)
		}
	}
	if err == nil {
		st, err = recordRunning(dir, st, cmd)
	}
	if err != nil {
		cmd.Process.Kill()
		cmd.Wait()
		release()
		return err
	}
	log.Info("sandbox started", "init_pid", cmd.Process.Pid)
	// From here the supervisor only waits: give back its start-up pages.
	time.AfterFunc(time.Second, sbutil.TrimMemory)

	reason := supervise(ctx, dir, cmd, st.Deadline, sigs, hup, log)
	os.Remove(filepath.Join(dir, "guest.sock"))
	release()
	if n := st.Init.Net; n != nil {
		if err := host.NetDown(filepath.Dir(dir), st.Info.ID, n); err != nil {
			log.Error("removing the sandbox's network rules", "err", err)
		}
	}
	if _, err := sbdir.Update(dir, func(s *sbdir.State) error {
		if s.ShimPID != os.Getpid() && s.ShimPID != 0 {
			return nil // a newer supervisor owns the sandbox now
		}
		s.Info.State = sandbox.StateStopped
		s.ShimPID, s.InitPID = 0, 0
		s.StopReason = reason
		return nil
	}); err != nil && !errors.Is(err, sandbox.ErrNotFound) {
		log.Error("recording the stop", "err", err)
	}
	log.Info("sandbox stopped", "reason", reason)
	return nil
}

// startInit takes what the sandbox holds on the host (its mounts, its
// cgroup: release gives them back) and starts its pid 1 with the daemon's
// listening socket, in its cgroup. On error nothing is left held or
// running.
func startInit(ctx context.Context, dir string, initCmd []string, st *sbdir.State, stderr io.Writer, log *slog.Logger) (cmd *exec.Cmd, release func(), err error) {
	// The daemon's listening socket comes from the runtime as fd 3 and
	// goes to pid 1 the same way.
	lf := os.NewFile(sbdir.ListenFD, "guest.sock")
	defer lf.Close() // pid 1 has its own copy once started
	fl, err := net.FileListener(lf)
	if err != nil {
		return nil, nil, fmt.Errorf("the supervisor needs the daemon's socket as fd %d (the runtime passes it): %w", sbdir.ListenFD, err)
	}
	fl.Close()
	if err := privateMounts(); err != nil {
		return nil, nil, err
	}
	grp, release, err := host.Acquire(ctx, dir, st, log)
	if err != nil {
		return nil, nil, err
	}
	st.Init.OOMFile = host.OOMFile(grp)
	if err := sbdir.WriteInit(dir, &st.Init); err != nil {
		release()
		return nil, nil, err
	}

	cmd = exec.Command(initCmd[0], append(initCmd[1:], "local-init", "--dir", dir)...)
	cmd.Env = []string{"PATH=" + sbdir.DefaultPath, sbdir.TokenEnv + "=" + st.Token}
	if v, ok := os.LookupEnv("GORACE"); ok {
		cmd.Env = append(cmd.Env, "GORACE="+v)
	}
	cmd.ExtraFiles = []*os.File{lf}
	cmd.Stdout, cmd.Stderr = stderr, stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{
		Cloneflags: syscall.CLONE_NEWNS | syscall.CLONE_NEWPID | syscall.CLONE_NEWIPC |
			syscall.CLONE_NEWUTS | syscall.CLONE_NEWNET,
		// pid 1 dies with its supervisor, so no sandbox runs unsupervised.
		Pdeathsig: syscall.SIGKILL,
	}
	if st.Init.Harden {
		// pid 1 inherits this thread's bounding set: leave it only what it
		// needs to build the root (mounts, hostname: SYS_ADMIN; loopback:
		// NET_ADMIN; shrinking the set further: SETPCAP) and to serve.
		// The thread is locked and only starts pid 1.
		if err := harden.ShrinkBoundingSet([]string{"CAP_SYS_ADMIN", "CAP_NET_ADMIN", "CAP_SETPCAP"}); err != nil {
			release()
			return nil, nil, err
		}
	}
	if err := startInGroup(cmd, grp); err != nil {
		release()
		return nil, nil, err
	}
	return cmd, release, nil
}

// startInGroup starts pid 1 born in grp (when there is one), so nothing
// it starts ever runs outside the limits: on cgroup v2 through clone's
// CLONE_INTO_CGROUP, on v1 by forking it from this (locked) thread while
// the thread visits the group. Moving pid 1 in after the fork cost a
// 5–12 ms kernel grace period, and pid 1 could start a command before it
// was in. On error pid 1 is not running.
func startInGroup(cmd *exec.Cmd, grp *cgroup.Group) error {
	var leaveGroup func() error
	if grp != nil {
		if fd, ok := grp.FD(); ok {
			cmd.SysProcAttr.UseCgroupFD = true
			cmd.SysProcAttr.CgroupFD = fd
		} else {
			var err error
			if leaveGroup, err = grp.EnterThread(); err != nil {
				return fmt.Errorf("putting the sandbox in its cgroup: %w", err)
			}
		}
	}
	err := cmd.Start()
	if leaveGroup != nil {
		if lerr := leaveGroup(); lerr != nil {
			// The supervisor must not stay in the sandbox's group: a
			// kill of the group would take it too.
			if err == nil {
				cmd.Process.Kill()
				cmd.Wait()
			}
			return fmt.Errorf("leaving the sandbox's cgroup after starting its pid 1: %w", lerr)
		}
	}
	if err != nil {
		return fmt.Errorf("starting the sandbox's pid 1: %w", err)
	}
	return nil
}

// recordRunning records the supervisor and pid 1 in the sandbox's state,
// starting the TTL clock on the sandbox's first run, and returns the state
// as recorded.
func recordRunning(dir string, st *sbdir.State, cmd *exec.Cmd) (*sbdir.State, error) {
	_, err := sbdir.Update(dir, func(s *sbdir.State) error {
		s.ShimPID = os.Getpid()
		s.InitPID = cmd.Process.Pid
		s.CgroupRoot = st.CgroupRoot
		s.Info.State = sandbox.StateRunning
		s.StopReason = ""
		// The TTL clock starts when the sandbox first runs and keeps
		// going across stops and supervisor restarts.
		if s.Deadline.IsZero() && s.Info.Spec.TTL > 0 {
			s.Deadline = time.Now().Add(s.Info.Spec.TTL)
		}
		st = s
		return nil
	})
	return st, err
}

// supervise waits until pid 1 ends, the supervisor is told to stop (sigs,
// ctx) or the deadline passes, kills pid 1 in the last two cases, and
// returns why the sandbox stopped, as recorded in its state. SIGHUP (hup)
// means the state changed (a pooled sandbox was claimed and given a TTL,
// or the TTL moved): it reads the deadline again.
func supervise(ctx context.Context, dir string, cmd *exec.Cmd, deadline time.Time, sigs, hup <-chan os.Signal, log *slog.Logger) string {
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	ttlTimer := time.NewTimer(time.Hour)
	ttlTimer.Stop()
	defer ttlTimer.Stop()
	setDeadline := func(d time.Time) {
		ttlTimer.Stop()
		if !d.IsZero() {
			ttlTimer.Reset(time.Until(d))
		}
	}
	setDeadline(deadline)
	for {
		select {
		case err := <-exited:
			return fmt.Sprintf("exited: %v", err)
		case <-sigs:
			// Killing pid 1 of a pid namespace kills every process in it.
			cmd.Process.Kill()
			<-exited
			return "stopped"
		case <-hup:
			if now, err := sbdir.Read(dir); err == nil {
				setDeadline(now.Deadline)
			}
		case <-ttlTimer.C:
			log.Info("TTL reached; stopping the sandbox")
			cmd.Process.Kill()
			<-exited
			return "ttl"
		case <-ctx.Done():
			cmd.Process.Kill()
			<-exited
			return "stopped"
		}
	}
}

// privateMounts gives the calling thread (locked, the one that mounts the
// sandbox's disk and forks pid 1) a mount namespace of its own, so the
// disk (and a gVisor sandbox's socket directory) is mounted there and in
// pid 1's copy, never in the host's. Every process that clones the
// host's mount namespace (another sandbox's start, a container runtime,
// systemd's PrivateTmp) would otherwise copy the disk's mount and keep
// the filesystem, and so its loop device, alive after this sandbox
// stops: the stop could not free the device, and the resume after it
// would find the image still in use. The runtime reaches a running
// sandbox's mounts through this thread's /proc root (host.MountView).
//
// Mounts here are slaves of the host's: what the host unmounts goes from
// here too (where the host shares its mounts), and nothing mounted here
// reaches the host. So no sandbox mounts anything in the host's
// namespace, and no process that copies it (this supervisor, another
// sandbox's, a container runtime's) holds another sandbox's mounts.
func privateMounts() error {
	// A thread shares its root and working directory with its process
	// (CLONE_FS); unsharing the mount namespace unshares them too, for
	// this thread alone.
	if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
		return fmt.Errorf("making the supervisor's mount namespace: %w", err)
	}
	if err := unix.Mount("", "/", "", unix.MS_REC|unix.MS_SLAVE, ""); err != nil {
		return fmt.Errorf("making the supervisor's mounts private: %w", err)
	}
	return nil
}
