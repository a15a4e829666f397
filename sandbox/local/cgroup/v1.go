package cgroup

import (
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/containerd/cgroups/v3/cgroup1"
	specs "github.com/opencontainers/runtime-spec/specs-go"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/mountinfo"
)

// cfsPeriod is the CFS bandwidth period, in microseconds, that CPU quotas
// are expressed in (the kernel's default, 100 ms).
const cfsPeriod = 100_000

// minQuota is the smallest CFS quota the kernel accepts, in microseconds.
const minQuota = 1000

// cpuQuota converts a number of cores to a quota per cfsPeriod.
func cpuQuota(cpus float64) int64 {
	return max(int64(math.Round(cpus*cfsPeriod)), minQuota)
}

// v1Mount returns the directory the v1 hierarchies are mounted under
// (/sys/fs/cgroup), as containerd/cgroups finds it: the parent of the
// first cgroup mount in mountinfo.
func v1Mount() (string, error) {
	mounts, err := mountinfo.Read("/proc/self/mountinfo")
	if err != nil {
		return "", err
	}
	for _, m := range mounts {
		if m.FSType == "cgroup" {
			return filepath.Dir(m.Point), nil
		}
	}
	return "", fmt.Errorf("no cgroup v1 hierarchy is mounted: %w", sandbox.ErrUnavailable)
}

// v1Root puts "cove" under this process's cgroup in each mounted v1
// hierarchy the package uses.
func v1Root(v Version) (*Root, error) {
	mount, err := v1Mount()
	if err != nil {
		return nil, err
	}
	own := cgroup1.NestedPath("")
	r := &Root{version: v, dirs: map[string]string{}}
	for _, c := range v1Controllers {
		hier := filepath.Join(mount, c)
		if _, err := os.Stat(hier); err != nil {
			continue // not mounted
		}
		p, err := own(cgroup1.Name(c))
		if err != nil {
			continue // this process is not in that hierarchy
		}
		r.dirs[c] = filepath.Join(hier, p, parentName)
	}
	if len(r.dirs) == 0 {
		return nil, fmt.Errorf("none of the cgroup v1 controllers %s is mounted under %s: %w", strings.Join(v1Controllers, ", "), mount, sandbox.ErrUnavailable)
	}
	return r, nil
}

// v1Hierarchy returns the subsystems of the root's hierarchies and the
// path function for the group name, in containerd/cgroups' terms: paths
// relative to each hierarchy's mount.
func (r *Root) v1Hierarchy(name string) (cgroup1.Hierarchy, cgroup1.Path, error) {
	mount, err := v1Mount()
	if err != nil {
		return nil, nil, err
	}
	var subs []cgroup1.Subsystem
	rel := map[cgroup1.Name]string{}
	for _, c := range v1Controllers {
		d, ok := r.dirs[c]
		if !ok {
			continue
		}
		hier := filepath.Join(mount, c)
		p, err := filepath.Rel(hier, filepath.Join(d, name))
		if err != nil || strings.HasPrefix(p, "..") {
			return nil, nil, fmt.Errorf("%s is not under the %s hierarchy %s: %w", d, c, hier, sandbox.ErrInvalid)
		}
		rel[cgroup1.Name(c)] = "/" + p
		switch c {
		case Memory:
			subs = append(subs, cgroup1.NewMemory(mount, cgroup1.OptionalSwap()))
		case CPU:
			subs = append(subs, cgroup1.NewCpu(mount))
		case CPUAcct:
			subs = append(subs, cgroup1.NewCpuacct(mount))
		case Pids:
			subs = append(subs, cgroup1.NewPids(mount))
		case Freezer:
			subs = append(subs, cgroup1.NewFreezer(mount))
		}
	}
	hierarchy := func() ([]cgroup1.Subsystem, error) { return subs, nil }
	path := func(n cgroup1.Name) (string, error) {
		if p, ok := rel[n]; ok {
			return p, nil
		}
		return "", cgroup1.ErrControllerNotActive
	}
	return hierarchy, path, nil
}

// missing names a limit whose controller the root lacks, with what to do.
func missing(v Version, controller, limit string) error {
	how := "mount its cgroup v1 hierarchy (mount -t cgroup -o " + controller + " cgroup /sys/fs/cgroup/" + controller + ")"
	if v == V2 {
		how = "enable it for this process's cgroup (in the parent's cgroup.subtree_control; for a systemd service, Delegate=yes)"
	}
	return fmt.Errorf("the %s controller is not available (%s host): the %s limit cannot be enforced; %s, or run without a %s limit: %w",
		controller, v, limit, how, limit, sandbox.ErrUnavailable)
}

// v1Resources turns limits into the v1 resources to set.
func (r *Root) v1Resources(l Limits) (*specs.LinuxResources, error) {
	res := &specs.LinuxResources{}
	if l.MemoryBytes > 0 {
		d, ok := r.dirs[Memory]
		if !ok {
			return nil, missing(r.version, Memory, "memory")
		}
		m := l.MemoryBytes
		res.Memory = &specs.LinuxMemory{Limit: &m}
		// Without swap accounting (no memsw files) swap cannot be
		// limited separately; memory.limit_in_bytes still holds.
		if _, err := os.Stat(filepath.Join(filepath.Dir(d), "memory.memsw.limit_in_bytes")); err == nil {
			res.Memory.Swap = &m
		}
	}
	if l.CPUs > 0 {
		if _, ok := r.dirs[CPU]; !ok {
			return nil, missing(r.version, CPU, "CPU")
		}
		q, p := cpuQuota(l.CPUs), uint64(cfsPeriod)
		res.CPU = &specs.LinuxCPU{Quota: &q, Period: &p}
	}
	if l.Pids > 0 {
		if _, ok := r.dirs[Pids]; !ok {
			return nil, missing(r.version, Pids, "pids")
		}
		n := int64(l.Pids)
		res.Pids = &specs.LinuxPids{Limit: &n}
	}
	return res, nil
}

func (r *Root) newV1(name string, l Limits) (*Group, error) {
	res, err := r.v1Resources(l)
	if err != nil {
		return nil, err
	}
	hier, path, err := r.v1Hierarchy(name)
	if err != nil {
		return nil, err
	}
	cg, err := cgroup1.New(path, res, cgroup1.WithHierarchy(hier))
	if err != nil {
		g := &Group{root: r, name: name, fd: -1}
		g.removeDirs(time.Second)
		return nil, err
	}
	return &Group{root: r, name: name, v1: cg, fd: -1}, nil
}

func (r *Root) loadV1(name string) (*Group, error) {
	hier, path, err := r.v1Hierarchy(name)
	if err != nil {
		return nil, err
	}
	cg, err := cgroup1.Load(path, cgroup1.WithHierarchy(hier))
	if errors.Is(err, cgroup1.ErrCgroupDeleted) {
		return nil, fmt.Errorf("%w: %w", err, sandbox.ErrNotFound)
	}
	if err != nil {
		return nil, err
	}
	return &Group{root: r, name: name, v1: cg, fd: -1}, nil
}

func (g *Group) statsV1() (Stats, error) {
	m, err := g.v1.Stat(cgroup1.IgnoreNotExist)
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	if m.Memory != nil && m.Memory.Usage != nil {
		s.MemoryBytes = int64(m.Memory.Usage.Usage)
		s.MemoryPeak = int64(m.Memory.Usage.Max)
		s.MemoryCache = int64(m.Memory.TotalCache)
	}
	if m.MemoryOomControl != nil {
		s.OOMKills = int64(m.MemoryOomControl.OomKill)
	}
	if m.CPU != nil && m.CPU.Usage != nil {
		s.CPUUsage = time.Duration(m.CPU.Usage.Total)
	}
	if m.Pids != nil {
		s.Pids = int(m.Pids.Current)
	}
	return s, nil
}

// EnterThread moves the calling thread into the group on a cgroup v1
// host and returns the function that moves it back; the processes the
// thread forks in between are born in the group. The caller holds the
// thread (runtime.LockOSThread) from before the call until after leave,
// and forks nothing else meanwhile.
//
// This is how a v1 host gets a new process into its group without
// moving the process: writing a pid to cgroup.procs takes the kernel's
// global threadgroup lock, whose writer waits out an RCU grace period
// (5–12 ms on this project's test machine, on every sandbox start),
// while a thread that moves itself (writing "0" to tasks) skips that
// lock (about 0.3 ms). On cgroup v2, clone into FD instead.
func (g *Group) EnterThread() (leave func() error, err error) {
	if g.root.version == V2 {
		return nil, fmt.Errorf("cgroup %q: EnterThread is for cgroup v1 hosts; on v2 start the process in FD: %w", g.name, sandbox.ErrInvalid)
	}
	mount, err := v1Mount()
	if err != nil {
		return nil, err
	}
	data, err := os.ReadFile("/proc/thread-self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("reading this thread's cgroups: %w", err)
	}
	own := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		// hierarchy-ID:controller-list:path
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		for _, c := range strings.Split(parts[1], ",") {
			own[c] = parts[2]
		}
	}
	var back []string
	leave = func() error {
		var errs []error
		for i := len(back) - 1; i >= 0; i-- {
			if err := writeTasks(back[i]); err != nil {
				errs = append(errs, fmt.Errorf("moving the thread back to %s: %w", filepath.Dir(back[i]), err))
			}
		}
		return errors.Join(errs...)
	}
	for _, c := range v1Controllers {
		p, in := own[c]
		if _, ok := g.root.dirs[c]; !ok || !in {
			continue
		}
		if err := writeTasks(filepath.Join(g.Path(c), "tasks")); err != nil {
			err = fmt.Errorf("moving the thread into cgroup %q (%s): %w", g.name, c, err)
			if lerr := leave(); lerr != nil {
				err = errors.Join(err, lerr)
			}
			return nil, err
		}
		back = append(back, filepath.Join(mount, c, p, "tasks"))
	}
	return leave, nil
}

// writeTasks moves the calling thread into the v1 cgroup whose tasks
// file is given.
func writeTasks(file string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = f.Write([]byte("0"))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// NewChild creates the group name below g with the limits l, in the v1
// hierarchies of the controllers listed (those the root lacks are
// skipped), and returns it. A child's usage counts in g's, so g's limits
// bound the child too; the child's limits bound only what runs in it.
// That is how a sandbox keeps its daemon apart from its commands: the
// daemon in g, the commands in a child with exactly the user's limits,
// and g a little larger, so the commands hitting their memory or pids
// limit meet the kernel's OOM killer and fork's EAGAIN inside the child,
// never the daemon.
//
// cgroup v1 (and hybrid) only: on v2 the child would need the process
// that starts the commands to clone them into it (clone3), which the
// sandbox's seccomp filter refuses. Errors as New's; ErrUnavailable on
// v2.
func (g *Group) NewChild(name string, l Limits, controllers ...string) (*Group, error) {
	r, err := g.childRoot(name, controllers)
	if err != nil {
		return nil, err
	}
	child, err := r.New(name, l)
	if err != nil {
		return nil, err
	}
	g.adopt(child, name)
	return child, nil
}

// LoadChild returns the child name of g made earlier by NewChild with
// the same controllers. ErrNotFound if it does not exist.
func (g *Group) LoadChild(name string, controllers ...string) (*Group, error) {
	r, err := g.childRoot(name, controllers)
	if err != nil {
		return nil, err
	}
	child, err := r.Load(name)
	if err != nil {
		return nil, err
	}
	g.adopt(child, name)
	return child, nil
}

// adopt makes a group made under childRoot's root one of g's root, named
// by its path from there ("sb/work"), so Path and the rest see it where
// it is.
func (g *Group) adopt(child *Group, name string) {
	r := &Root{version: g.root.version, dirs: map[string]string{}}
	for c := range child.root.dirs {
		r.dirs[c] = g.root.dirs[c]
	}
	child.root = r
	child.name = g.name + "/" + name
}

// childRoot is the root that makes groups directly below g in the
// hierarchies of controllers.
func (g *Group) childRoot(name string, controllers []string) (*Root, error) {
	if g.root.version == V2 {
		return nil, fmt.Errorf("cgroup %q: a child group for the sandbox's commands needs cgroup v1 (on v2 they would have to be cloned into it, which the sandbox's seccomp filter refuses): %w", g.name, sandbox.ErrUnavailable)
	}
	if err := checkName(name); err != nil {
		return nil, err
	}
	r := &Root{version: g.root.version, dirs: map[string]string{}}
	for _, c := range controllers {
		if p := g.Path(c); p != "" {
			r.dirs[c] = p
		}
	}
	if len(r.dirs) == 0 {
		return nil, fmt.Errorf("cgroup %q: none of the hierarchies %s is mounted: %w", g.name, strings.Join(controllers, ", "), sandbox.ErrUnavailable)
	}
	return r, nil
}

// TasksFiles returns the group's tasks file in each of its v1
// hierarchies: a thread that writes "0" to each moves itself into the
// group (see EnterThread), and the processes it forks from then on are
// born there. A thread can open them before it loses sight of the cgroup
// filesystem (pivot_root) and write them after. Nil on v2.
func (g *Group) TasksFiles() []string {
	if g.root.version == V2 {
		return nil
	}
	var files []string
	for _, d := range g.dirs() {
		files = append(files, filepath.Join(d, "tasks"))
	}
	return files
}
