package pid1

import (
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/harden"
	"github.com/cove-sandbox/cove/sandbox/local/internal/runsc"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// MainGVisor is `cove local-init --gvisor`: pid 1 of a gVisor sandbox.
// runsc has built its root, mounts, hostname and network from the
// supervisor's bundle, and gVisor's kernel is the wall: this is only the
// daemon. It serves on a socket it binds in a directory of the host's
// (the bundle binds it; runsc lets it make a host socket there). gVisor
// cannot save a host socket, so on runsc.SignalDrop it closes the
// listener and every connection (the host then checkpoints the sandbox)
// and on runsc.SignalListen, after a restore, it listens again.
func MainGVisor(ctx context.Context, stderr io.Writer) error {
	log := slog.New(slog.NewTextHandler(sbutil.CapWriter(stderr, sbutil.MaxRunLog), nil))
	var cfg runsc.Config
	if err := json.Unmarshal([]byte(os.Getenv(runsc.ConfigEnv)), &cfg); err != nil {
		return fmt.Errorf("reading the daemon's settings from the supervisor: %w", err)
	}
	if os.Getpid() != 1 {
		return fmt.Errorf("local-init --gvisor must be pid 1 of a gVisor sandbox (got pid %d)", os.Getpid())
	}
	token := os.Getenv(guest.TokenEnv)
	os.Unsetenv(guest.TokenEnv)
	os.Unsetenv(runsc.ConfigEnv)
	for _, d := range []string{cfg.Workspace, "/home/" + cfg.User} {
		if err := ownDir(d, cfg.UID, cfg.GID); err != nil {
			return err
		}
	}
	work, err := gvisorWorkGroup(cfg.Pids)
	if err != nil {
		return err
	}
	spawn := (*exec.Cmd).Start
	if work != nil {
		spawn = work.spawn
	}
	// gVisor is the wall; the same layers as the native tier's inside it
	// narrow what a tenant reaches of gVisor's own kernel (no user
	// namespaces, bpf, keys, perf; no_new_privs; root's capabilities cut).
	rep, err := harden.Apply(harden.Options{GVisor: true})
	if err != nil {
		return fmt.Errorf("applying seccomp, capabilities and no_new_privs: %w", err)
	}
	log.Info("sandbox hardened", "seccomp", rep.Seccomp, "no_new_privs", rep.NoNewPrivs, "caps_kept", rep.CapsKept, "skipped", rep.Skipped)
	sudoSocket := ""
	if cfg.Sudo {
		sudoSocket = guest.SudoSocketPath
	}
	var oom func() int64
	if cfg.MemoryBytes > 0 {
		oom = watchMemory(ctx, cfg.MemoryBytes, log)
	}
	srv, err := guest.NewServer(guest.Config{
		Root: "/", Workdir: cfg.Workspace, AccessToken: token, Env: cfg.Env,
		User: cfg.User, Reap: true, Logger: log, SudoSocket: sudoSocket, Spawn: spawn,
		OOMCounter: oom,
	})
	if err != nil {
		return err
	}
	defer srv.Close()
	drop := make(chan os.Signal, 1)
	listen := make(chan os.Signal, 1)
	signal.Notify(drop, syscall.SIGUSR2)
	signal.Notify(listen, syscall.SIGUSR1)
	log.Info("sandbox ready", "workspace", cfg.Workspace, "user", cfg.User, "isolation", "gvisor")
	for {
		if err := serveUntilDrop(ctx, srv, drop, log); err != nil {
			return err
		}
		if ctx.Err() != nil {
			return nil
		}
		log.Info("dropped the host's connections for a checkpoint")
		// A listen signal from before (a restore's supervisor may send
		// several) is not for this checkpoint.
		for len(listen) > 0 {
			<-listen
		}
		select {
		case <-ctx.Done():
			return nil
		case <-listen:
		}
		// Signals sent before the checkpoint are not for this run.
		for len(drop) > 0 {
			<-drop
		}
	}
}

// serveUntilDrop listens on the daemon's socket and serves until ctx ends
// or a drop signal comes; then the socket and every connection are closed.
func serveUntilDrop(ctx context.Context, srv *guest.Server, drop <-chan os.Signal, log *slog.Logger) error {
	sock := filepath.Join(runsc.SocketDir, runsc.SocketName)
	if err := os.Remove(sock); err != nil && !errors.Is(err, os.ErrNotExist) {
		return fmt.Errorf("removing the daemon's old socket: %w", err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return fmt.Errorf("opening the daemon's socket: %w", err)
	}
	os.Chmod(sock, 0o600)
	sctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-drop:
			cancel()
		case <-sctx.Done():
		}
	}()
	t0 := time.Now()
	err = srv.ServeGrace(sctx, l, 0)
	l.Close() // unlinks the socket: the host waits for that
	log.Debug("stopped serving", "served", time.Since(t0))
	return err
}

// gvisorWorkGroup puts the sandbox's commands under their pids limit,
// enforced by gVisor's own pids cgroup: the host's group of a gVisor
// sandbox holds the Sentry, the gofer and their threads with the
// commands, and a fork bomb that filled it would leave the Sentry
// without a thread and end the sandbox. The daemon mounts gVisor's
// cgroup filesystem, makes a group "work" with the limit, and starts
// the thread that joins it and forks every command (as on a cgroup v1
// host; see work.go); then it unmounts it, so no command sees it (and
// none can mount: the seccomp filter refuses mount). It returns nil for
// no limit.
func gvisorWorkGroup(pids int) (*workThread, error) {
	if pids <= 0 {
		return nil, nil
	}
	const mnt = "/run/cove/cgroup"
	if err := os.MkdirAll(mnt, 0o700); err != nil {
		return nil, err
	}
	defer os.Remove(mnt)
	if err := unix.Mount("cgroup", mnt, "cgroup", unix.MS_NOSUID|unix.MS_NODEV|unix.MS_NOEXEC, "pids"); err != nil {
		return nil, fmt.Errorf("mounting gVisor's pids cgroup: %w", err)
	}
	defer unix.Unmount(mnt, unix.MNT_DETACH)
	dir := filepath.Join(mnt, "work")
	if err := os.Mkdir(dir, 0o700); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, fmt.Errorf("making the commands' pids cgroup: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, "pids.max"), []byte(fmt.Sprint(pids)), 0); err != nil {
		return nil, fmt.Errorf("setting the commands' pids limit: %w", err)
	}
	w, err := startWorkThread([]string{filepath.Join(dir, "tasks")})
	if err != nil {
		return nil, err
	}
	if err := w.wait(); err != nil {
		return nil, err
	}
	return w, nil
}

// readdressGVisor is `local-init --gvisor-net ADDR/30 GATEWAY`, run by
// the supervisor inside a restored gVisor sandbox whose /30 changed: its
// eth0 gets addr in place of the old one, and the default route goes
// through gw.
func readdressGVisor(addr, gw string) error {
	a, err := netip.ParsePrefix(addr)
	if err != nil {
		return err
	}
	g, err := netip.ParseAddr(gw)
	if err != nil {
		return err
	}
	link, err := netlink.LinkByName("eth0")
	if err != nil {
		return fmt.Errorf("finding eth0: %w", err)
	}
	old, err := netlink.AddrList(link, netlink.FAMILY_V4)
	if err != nil {
		return err
	}
	if err := netlink.AddrAdd(link, &netlink.Addr{IPNet: sbdir.IPNet(a)}); err != nil && !errors.Is(err, unix.EEXIST) {
		return fmt.Errorf("addressing eth0: %w", err)
	}
	for _, o := range old {
		if !o.IP.Equal(net.IP(a.Addr().AsSlice())) {
			netlink.AddrDel(link, &o)
		}
	}
	r := &netlink.Route{LinkIndex: link.Attrs().Index, Gw: net.IP(g.AsSlice())}
	if err := netlink.RouteReplace(r); err != nil {
		netlink.RouteDel(&netlink.Route{LinkIndex: link.Attrs().Index})
		if err := netlink.RouteAdd(r); err != nil {
			return fmt.Errorf("routing eth0 through %s: %w", g, err)
		}
	}
	return nil
}

// watchMemory is the OOM killer gVisor's kernel lacks: while the
// sandbox's memory (what gVisor's /proc/meminfo counts as used: every
// process's pages, tmpfs and page cache; and runsc.ProcessMemory for
// each process, its cost on the host that gVisor does not show) is above
// limit, it ends the processes with the most resident memory, as many
// as it takes, never pid 1. It looks often
// while the sandbox is near its limit and seldom while it is far; the
// cgroup's runsc.MemoryOverhead is the headroom a fast allocator has
// between two looks. It returns the count of processes it ended.
func watchMemory(ctx context.Context, limit int64, log *slog.Logger) func() int64 {
	k := &oomKiller{limit: limit, log: log, dying: map[int]time.Time{}}
	go func() {
		for ctx.Err() == nil {
			time.Sleep(k.round())
		}
	}()
	return k.kills.Load
}

// oomKiller is watchMemory's state.
type oomKiller struct {
	limit int64
	log   *slog.Logger
	kills atomic.Int64
	// dying are the processes it ended whose pages may not be gone yet,
	// with when it ended them; freeing is their resident bytes, and
	// usedThen what the sandbox used before.
	dying     map[int]time.Time
	freeing   int64
	usedThen  int64
	endedLast time.Time
}

// round looks once, ends processes if the sandbox is over its limit, and
// says how long to wait before the next look.
func (k *oomKiller) round() time.Duration {
	// Until the processes it ended have let go of their pages, and
	// gVisor has counted half of them free (it gives pages back a
	// moment after a process ends), those still count: ending more then
	// would take processes that did nothing (a command started just
	// after the one that ran out). Half a second at most.
	for pid, at := range k.dying {
		if memoryGone(pid) || time.Since(at) > time.Second/2 {
			delete(k.dying, pid)
		}
	}
	used := memoryUsed() + int64(processCount())*runsc.ProcessMemory
	settling := time.Since(k.endedLast) < time.Second/2 && used > k.usedThen-k.freeing/2
	if len(k.dying) > 0 || settling {
		return 10 * time.Millisecond
	}
	wait := 200 * time.Millisecond
	if used > k.limit/2 {
		wait = 10 * time.Millisecond
	}
	if used <= k.limit {
		return wait
	}
	// The largest processes, as many as it takes to free what is over
	// the limit and a sixteenth more: one at a time, a sandbox starting
	// many small ones outgrew the killer until the host's OOM killer
	// ended the whole sandbox.
	over := used - k.limit + k.limit/16
	k.usedThen, k.freeing, k.endedLast = used, 0, time.Now()
	for _, p := range processesByRSS() {
		if over <= 0 {
			break
		}
		unix.Kill(p.pid, unix.SIGKILL)
		k.kills.Add(1)
		k.dying[p.pid] = time.Now()
		over -= p.rss + runsc.ProcessMemory
		k.freeing += p.rss + runsc.ProcessMemory
		k.log.Info("out of memory: ended the largest process", "pid", p.pid, "rss", p.rss, "used", used, "limit", k.limit)
	}
	return wait
}

// memoryGone says process pid has let go of its pages: it has exited (a
// zombie has none resident) or been reaped.
func memoryGone(pid int) bool {
	pages, ok := residentPages(strconv.Itoa(pid))
	return !ok || pages == 0
}

// residentPages is the resident pages of process pid (its /proc name),
// from its statm; ok is false when it is gone.
func residentPages(pid string) (pages int64, ok bool) {
	b, err := os.ReadFile("/proc/" + pid + "/statm")
	if err != nil {
		return 0, false
	}
	f := strings.Fields(string(b))
	if len(f) < 2 {
		return 0, false
	}
	pages, err = strconv.ParseInt(f[1], 10, 64)
	return pages, err == nil
}

// memoryUsed is MemTotal - MemFree of gVisor's /proc/meminfo, in bytes.
func memoryUsed() int64 {
	b, err := os.ReadFile("/proc/meminfo")
	if err != nil {
		return 0
	}
	var total, free int64
	for _, line := range strings.Split(string(b), "\n") {
		f := strings.Fields(line)
		if len(f) < 2 {
			continue
		}
		n, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "MemTotal:":
			total = n << 10
		case "MemFree:":
			free = n << 10
		}
	}
	return total - free
}

// processCount is the number of the sandbox's processes.
func processCount() int {
	entries, _ := os.ReadDir("/proc")
	n := 0
	for _, e := range entries {
		if c := e.Name()[0]; c >= '0' && c <= '9' {
			n++
		}
	}
	return n
}

// procRSS is a process of the sandbox and its resident bytes.
type procRSS struct {
	pid int
	rss int64
}

// processesByRSS lists the sandbox's processes other than pid 1 (the
// daemon), the most resident pages first.
func processesByRSS() []procRSS {
	entries, _ := os.ReadDir("/proc")
	var ps []procRSS
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil || p == 1 {
			continue
		}
		pages, ok := residentPages(e.Name())
		if !ok {
			continue
		}
		ps = append(ps, procRSS{p, pages * int64(os.Getpagesize())})
	}
	slices.SortFunc(ps, func(a, b procRSS) int { return cmp.Compare(b.rss, a.rss) })
	return ps
}
