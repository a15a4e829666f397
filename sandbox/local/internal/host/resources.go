// Package host is what a local sandbox holds on the host while it runs:
// its disk mounted, its cgroup, and for a networked sandbox the host end
// of its veth pair and its firewall rules. The supervisor takes and gives
// back these; the runtime cleans up after a supervisor that died. Pid 1
// never links it (cgroups pull in eBPF, D-Bus and protobuf).
package host

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strconv"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/cgroup"
	"github.com/cove-sandbox/cove/sandbox/local/disk"
	"github.com/cove-sandbox/cove/sandbox/local/internal/runsc"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// Acquire prepares what a sandbox holds on the host while it runs: its
// disk mounted (in the calling thread's mount namespace: the supervisor's
// own, never the host's), and a cgroup with its limits (nil when the host
// has no cgroups and the sandbox asks for no limits), with the child
// group for its commands on cgroup v1. It records the cgroup's root in st
// and what pid 1 needs of the cgroups in st.Init. The supervisor calls it
// before starting pid 1 and the returned release when pid 1 has ended.
func Acquire(ctx context.Context, dir string, st *sbdir.State, log *slog.Logger) (grp *cgroup.Group, release func(), err error) {
	d, err := disk.Open(filepath.Join(dir, "disk"))
	if err != nil {
		return nil, nil, fmt.Errorf("the sandbox's disk: %w", err)
	}
	if mounted, _ := d.Mounted(); !mounted {
		if err := d.Mount(); err != nil {
			return nil, nil, fmt.Errorf("mounting the sandbox's disk: %w", err)
		}
	}
	release = func() {
		if err := d.Unmount(); err != nil {
			log.Warn("unmounting the sandbox's disk", "err", err)
		}
	}

	root, err := CgroupRoot(st)
	if err != nil {
		if Limited(st.Info.Spec.Limits) {
			release()
			return nil, nil, fmt.Errorf("cgroups are needed for the sandbox's limits: %w", err)
		}
		log.Warn("no cgroups: the sandbox runs without resource limits", "err", err)
		return nil, release, nil
	}
	name := st.Info.ID
	if old, err := root.Load(name); err == nil {
		old.Delete(ctx) // left by a supervisor that died
	}
	limits := cgroupLimits(st.Info.Spec.Limits)
	if st.Info.Spec.Isolation == sandbox.IsolationGVisor && limits.MemoryBytes > 0 {
		limits.MemoryBytes += runsc.MemoryOverhead
	}
	nested := root.Version() != cgroup.V2
	if nested {
		limits = withReserve(limits)
	}
	if st.Info.Spec.Isolation == sandbox.IsolationGVisor {
		limits.Pids = gvisorHostPids(cgroupLimits(st.Info.Spec.Limits).Pids)
	}
	grp, err = root.New(name, limits)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("creating the sandbox's cgroup: %w", err)
	}
	st.CgroupRoot = root.String()
	st.Init.WorkTasks, st.Init.WorkOOMFile = nil, ""
	if nested {
		work, err := grp.NewChild(WorkGroup, workLimits(cgroupLimits(st.Info.Spec.Limits)), workControllers...)
		if err != nil {
			grp.Delete(context.WithoutCancel(ctx))
			release()
			return nil, nil, fmt.Errorf("creating the cgroup of the sandbox's commands: %w", err)
		}
		st.Init.WorkTasks = work.TasksFiles()
		st.Init.WorkOOMFile = OOMFile(work)
	}
	diskRelease := release
	release = func() {
		if err := grp.Delete(context.WithoutCancel(ctx)); err != nil {
			log.Warn("deleting the sandbox's cgroup", "err", err)
		}
		grp.Close()
		diskRelease()
	}
	return grp, release, nil
}

// The daemon apart from its commands. On cgroup v1 and hybrid hosts the
// sandbox's group holds the daemon (pid 1) and a child, WorkGroup, that
// holds every command it starts, with exactly the user's memory and pids
// limits; the sandbox's group has those plus a reserve the commands can
// never take. A workload of many small processes that runs out of memory
// then meets the OOM killer inside the child, which picks among the
// commands only (the daemon was the largest process and died with the
// sandbox before), and a fork bomb finds fork failing in the child while
// the daemon can still make the threads it needs. The daemon starts
// commands from one thread of its own that joined the child (pid1's
// work.go): on v1 a process is charged to the group of its main thread,
// so that thread costs the commands nothing but one pid, and the OOM
// killer, which looks at main threads, never sees the daemon there.
//
// cgroup v2 keeps one group per sandbox: a process there is either born
// in a group (clone3 with CLONE_INTO_CGROUP, which the sandbox's seccomp
// filter must refuse, since clone3 hides namespace flags from it) or
// moved, which costs a kernel RCU grace period (5-12 ms) per command.
const (
	// WorkGroup is the name of the sandbox's commands' group, below the
	// sandbox's.
	WorkGroup = "work"
	// DaemonMemory is the memory the sandbox's group holds beyond the
	// memory limit, for the daemon: its own pages are about 4 MiB (30 MiB
	// in a race-detector build), plus buffers and page cache.
	DaemonMemory = 64 << 20
	// DaemonPids is the number of tasks the sandbox's group holds beyond
	// the pids limit, for the daemon's threads (about 8 idle, one more
	// per blocking system call in flight).
	DaemonPids = 128
)

// gvisorHostPids is the host pids limit of a gVisor sandbox whose
// commands may hold pids (0: none): gVisor's own pids cgroup holds the
// commands to pids inside (see package pid1's gvisor.go), and on the host
// each of the sandbox's processes costs gVisor two or three tasks (a
// systrap stub process and its threads), beside about 35 of the Sentry,
// the gofer and runsc. The host's limit leaves room for all of them, so
// a bomb meets the sandbox's limit and never the Sentry the host's.
func gvisorHostPids(pids int) int {
	if pids <= 0 {
		return 0
	}
	return 3*pids + DaemonPids
}

// workControllers are the hierarchies the commands' group is made in:
// those whose limits must spare the daemon. CPU stays shared: a busy
// command slows the daemon but cannot stop it.
var workControllers = []string{cgroup.Memory, cgroup.Pids}

// cgroupLimits is l as cgroups take it: no pids limit is 0 there.
func cgroupLimits(l sandbox.Limits) sandbox.Limits {
	if l.Pids < 0 {
		l.Pids = 0
	}
	return l
}

// withReserve is l with the daemon's reserve added to the limits set.
func withReserve(l sandbox.Limits) sandbox.Limits {
	if l.MemoryBytes > 0 {
		l.MemoryBytes += DaemonMemory
	}
	if l.Pids > 0 {
		l.Pids += DaemonPids
	}
	return l
}

// workLimits is the part of l the commands' group enforces.
func workLimits(l sandbox.Limits) sandbox.Limits {
	return sandbox.Limits{MemoryBytes: l.MemoryBytes, Pids: l.Pids}
}

// UpdateLimits gives a running sandbox's groups the limits l (a pooled
// sandbox taking the spec of the one it becomes).
func UpdateLimits(st *sbdir.State, l sandbox.Limits) error {
	l = cgroupLimits(l)
	root, err := CgroupRoot(st)
	if err != nil {
		return err
	}
	g, err := root.Load(st.Info.ID)
	if err != nil {
		return err
	}
	defer g.Close()
	if root.Version() == cgroup.V2 {
		return g.Update(l)
	}
	work, err := g.LoadChild(WorkGroup, workControllers...)
	if err != nil {
		return err
	}
	// v1 lets a child's limit exceed its parent's, so the order does not
	// matter.
	if err := g.Update(withReserve(l)); err != nil {
		return err
	}
	return work.Update(workLimits(l))
}

// OOMFile is the file whose oom_kill counter covers the group ("" for
// none).
func OOMFile(g *cgroup.Group) string {
	if g == nil {
		return ""
	}
	if g.Root().Version() == cgroup.V2 {
		return filepath.Join(g.Path(""), "memory.events")
	}
	if p := g.Path(cgroup.Memory); p != "" {
		return filepath.Join(p, "memory.oom_control")
	}
	return ""
}

// MountView is where another process reaches what a running sandbox's
// supervisor (pid shimPID) mounts in its own mount namespace alone (its
// disk; a gVisor sandbox's socket directory): the root of that
// namespace, as /proc/PID/task/TID/root of the supervisor's thread that
// holds it. "" when no thread of the supervisor is in another mount
// namespace than the caller's (a supervisor that mounted in the host's,
// or none).
//
// A supervisor runs in the caller's pid namespace, a sandbox's processes
// never do: a pid that names one of those (a dead supervisor's pid,
// reused) gives "", not a root the sandbox's tenant made, where a path
// the caller goes on to open (a socket it sends the daemon's token to,
// a disk it copies) would be the tenant's to plant.
func MountView(shimPID int) string {
	own, err := os.Readlink("/proc/thread-self/ns/mnt")
	if err != nil {
		return ""
	}
	ownPID, err := os.Readlink("/proc/self/ns/pid")
	if err != nil {
		return ""
	}
	if pidNS, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/pid", shimPID)); err != nil || pidNS != ownPID {
		return ""
	}
	base := filepath.Join("/proc", strconv.Itoa(shimPID), "task")
	tasks, err := os.ReadDir(base)
	if err != nil {
		return ""
	}
	for _, t := range tasks {
		ns, err := os.Readlink(filepath.Join(base, t.Name(), "ns", "mnt"))
		if err == nil && ns != own {
			return filepath.Join(base, t.Name(), "root")
		}
	}
	return ""
}

// CgroupRoot is where the sandbox's cgroup lives: the root its state
// records, else the host's default.
func CgroupRoot(st *sbdir.State) (*cgroup.Root, error) {
	if st.CgroupRoot != "" {
		return cgroup.ParseRoot(st.CgroupRoot)
	}
	return cgroup.DefaultRoot()
}

// Limited reports whether l needs a cgroup.
func Limited(l sandbox.Limits) bool {
	return l.CPUs > 0 || l.MemoryBytes > 0 || l.Pids > 0
}

// ReleaseCgroup removes a sandbox's cgroup if one is left (a supervisor
// that died before cleaning up).
func ReleaseCgroup(ctx context.Context, st *sbdir.State) {
	root, err := CgroupRoot(st)
	if err != nil {
		return
	}
	if g, err := root.Load(st.Info.ID); err == nil {
		g.Delete(ctx)
		g.Close()
	} else if !errors.Is(err, sandbox.ErrNotFound) {
		return
	}
}
