package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// unifiedMount is where a v2-only host mounts the unified hierarchy.
const unifiedMount = "/sys/fs/cgroup"

// v2Root puts "cove" under this process's cgroup in the unified hierarchy
// mounted on mount. A process already moved to the leaf (see moveToLeaf)
// counts as being in the leaf's parent, so the root does not move.
func v2Root(mount string) (*Root, error) {
	_, own, err := cgroups.ParseCgroupFileUnified("/proc/self/cgroup")
	if err != nil {
		return nil, fmt.Errorf("reading this process's cgroup: %w", err)
	}
	if own == "" {
		return nil, fmt.Errorf("this process is in no v2 cgroup (/proc/self/cgroup has no 0:: line): %w", sandbox.ErrUnavailable)
	}
	return v2RootFor(mount, own), nil
}

// v2RootFor returns the root for a process in the cgroup own (a path in
// the hierarchy mounted on mount).
func v2RootFor(mount, own string) *Root {
	if path.Base(own) == leafName {
		own = path.Dir(own)
	}
	return newV2Root(filepath.Join(mount, own))
}

// newV2Root returns the root that makes groups in base/cove.
func newV2Root(base string) *Root {
	return &Root{version: V2, dirs: map[string]string{"": filepath.Join(base, parentName)}, v2Base: base}
}

// v2Available returns the controllers this package uses that dir's
// children can have: those in its cgroup.controllers.
func v2Available(dir string) []string {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	if err != nil {
		return nil
	}
	var out []string
	for _, c := range strings.Fields(string(b)) {
		if contains(v2Controllers, c) {
			out = append(out, c)
		}
	}
	return out
}

// subtreeControl returns the controllers enabled for dir's children.
func subtreeControl(dir string) ([]string, error) {
	b, err := os.ReadFile(filepath.Join(dir, "cgroup.subtree_control"))
	return strings.Fields(string(b)), err
}

// enableV2 enables controllers for dir's children. A cgroup that hands
// controllers down may hold no processes (the kernel says EBUSY), so when
// dir holds some they move to its leaf child first.
func enableV2(dir string, controllers []string) error {
	have, err := subtreeControl(dir)
	if err != nil {
		return err
	}
	var add []string
	for _, c := range controllers {
		if !contains(have, c) {
			add = append(add, "+"+c)
		}
	}
	if len(add) == 0 {
		return nil
	}
	file := filepath.Join(dir, "cgroup.subtree_control")
	line := []byte(strings.Join(add, " "))
	err = os.WriteFile(file, line, 0)
	if errors.Is(err, unix.EBUSY) {
		if err := moveToLeaf(dir); err != nil {
			return err
		}
		err = os.WriteFile(file, line, 0)
	}
	if err != nil {
		return fmt.Errorf("enabling %s in %s: %w", strings.Join(add, " "), file, err)
	}
	return nil
}

// moveToLeaf moves every process of dir into dir/leaf, so dir can hand
// controllers to its children (cgroup v2's "no internal processes" rule).
// Processes forked meanwhile are caught by trying again.
func moveToLeaf(dir string) error {
	leaf := filepath.Join(dir, leafName)
	if err := os.Mkdir(leaf, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return fmt.Errorf("making the leaf cgroup for %s's own processes: %w", dir, err)
	}
	for range 100 {
		pids, err := readPids(filepath.Join(dir, "cgroup.procs"))
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		for _, pid := range pids {
			err := os.WriteFile(filepath.Join(leaf, "cgroup.procs"), []byte(strconv.Itoa(pid)), 0)
			if err != nil && !errors.Is(err, unix.ESRCH) {
				return fmt.Errorf("moving pid %d from %s to its leaf cgroup, so controllers can be enabled there: %w", pid, dir, err)
			}
		}
	}
	return fmt.Errorf("moving the processes of %s to its leaf cgroup: they keep forking: %w", dir, sandbox.ErrUnavailable)
}

func (r *Root) newV2(name string, l Limits) (*Group, error) {
	avail := v2Available(r.v2Base)
	for _, need := range []struct {
		set              bool
		controller, what string
	}{
		{l.MemoryBytes > 0, Memory, "memory"},
		{l.CPUs > 0, CPU, "CPU"},
		{l.Pids > 0, Pids, "pids"},
	} {
		if need.set && !contains(avail, need.controller) {
			return nil, missing(V2, need.controller, need.what)
		}
	}
	// Every available controller is enabled, limited or not, so the
	// group's usage can be read.
	cove := r.dirs[""]
	if len(avail) > 0 {
		if err := enableV2(r.v2Base, avail); err != nil {
			return nil, err
		}
	}
	if err := os.Mkdir(cove, 0o755); err != nil && !errors.Is(err, os.ErrExist) {
		return nil, err
	}
	if len(avail) > 0 {
		if err := enableV2(cove, avail); err != nil {
			return nil, err
		}
	}

	res := v2Resources(l, avail, cove)
	// With cove as the library's mount point it enables controllers in
	// cove alone, never above the caller's cgroup.
	m, err := cgroup2.NewManager(cove, "/"+name, res)
	if err != nil {
		os.Remove(filepath.Join(cove, name))
		return nil, err
	}
	g := &Group{root: r, name: name, v2: m, fd: -1}
	if err := g.openFD(); err != nil {
		g.removeDirs(time.Second)
		return nil, err
	}
	return g, nil
}

func (r *Root) loadV2(name string) (*Group, error) {
	m, err := cgroup2.Load("/"+name, cgroup2.WithMountpoint(r.dirs[""]))
	if err != nil {
		return nil, err
	}
	g := &Group{root: r, name: name, v2: m, fd: -1}
	if err := g.openFD(); err != nil {
		return nil, err
	}
	return g, nil
}

func (g *Group) openFD() error {
	fd, err := unix.Open(g.Path(""), unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", g.Path(""), err)
	}
	g.fd = fd
	return nil
}

func (g *Group) statsV2() (Stats, error) {
	m, err := g.v2.StatFiltered(cgroup2.StatPids | cgroup2.StatCPU | cgroup2.StatMemory | cgroup2.StatMemoryEvents)
	if err != nil {
		return Stats{}, err
	}
	var s Stats
	if m.Memory != nil {
		s.MemoryBytes = int64(m.Memory.Usage)
		s.MemoryPeak = int64(m.Memory.MaxUsage)
		s.MemoryCache = int64(m.Memory.File)
	}
	if m.MemoryEvents != nil {
		s.OOMKills = int64(m.MemoryEvents.OomKill)
	}
	if m.CPU != nil {
		s.CPUUsage = time.Duration(m.CPU.UsageUsec) * time.Microsecond
	}
	if m.Pids != nil {
		s.Pids = int(m.Pids.Current)
	}
	return s, nil
}

// v2Resources turns limits into the v2 resources to set, for the
// controllers available under cove.
func v2Resources(l Limits, avail []string, cove string) *cgroup2.Resources {
	res := &cgroup2.Resources{}
	if contains(avail, Memory) {
		res.Memory = &cgroup2.Memory{}
		if l.MemoryBytes > 0 {
			m := l.MemoryBytes
			res.Memory.Max = &m
			if _, err := os.Stat(filepath.Join(cove, "memory.swap.max")); err == nil {
				var none int64
				res.Memory.Swap = &none
			}
		}
	}
	if contains(avail, CPU) {
		res.CPU = &cgroup2.CPU{}
		if l.CPUs > 0 {
			q, p := cpuQuota(l.CPUs), uint64(cfsPeriod)
			res.CPU.Max = cgroup2.NewCPUMax(&q, &p)
		}
	}
	if contains(avail, Pids) {
		res.Pids = &cgroup2.Pids{Max: int64(l.Pids)}
	}
	return res
}
