// Package cgroup confines a sandbox's processes with kernel control groups,
// on v1, hybrid and v2 hosts: it caps their memory (swap included), CPU time
// and number of processes, reports what they use, and kills them all at
// once.
//
// Every group lives under a Root: a "cove" directory under the calling
// process's own cgroup, in each hierarchy the package uses (memory, cpu,
// cpuacct, pids and freezer on v1 and hybrid hosts, the one unified
// hierarchy on v2). On a hybrid host where the caller sits in a nested
// memory cgroup (/process_api/<id>) and at the top of the other
// hierarchies, a sandbox named sb1 gets memory:/process_api/<id>/cove/sb1,
// pids:/cove/sb1 and so on. Nesting
// under the caller's cgroup is what a container or a systemd service with
// Delegate=yes is allowed to do; it also means a process started from
// another cgroup (another login session) sees another Root, so a runtime
// that must find its groups again from anywhere stores Root.String() and
// uses ParseRoot.
//
// On v2 a cgroup that hands controllers to its children may hold no
// processes itself. When the caller's cgroup holds processes, the first New
// that needs a controller moves them into a "leaf" child (as
// Docker-in-Docker moves its processes to /init) and enables memory, cpu
// and pids for the groups below.
//
// Limits are written with github.com/containerd/cgroups/v3; this package
// adds the layout, killing that cannot miss a forking process, deletion,
// listing for garbage collection, and the clone3 descriptor that starts a
// process inside a v2 group atomically.
//
// The package needs root (or a delegated cgroup). A Group is safe for
// concurrent use.
package cgroup

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	cgroups "github.com/containerd/cgroups/v3"
	"github.com/containerd/cgroups/v3/cgroup1"
	"github.com/containerd/cgroups/v3/cgroup2"
	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// Version is how a host mounts cgroups.
type Version int

const (
	// Unavailable: no cgroup filesystem is mounted.
	Unavailable Version = iota
	// V1: one hierarchy per controller (legacy).
	V1
	// Hybrid: v1 hierarchies for the controllers plus a unified (v2)
	// hierarchy that holds none of the ones this package uses; limits are
	// set through v1.
	Hybrid
	// V2: the unified hierarchy only.
	V2
)

// String returns "unavailable", "v1", "hybrid" or "v2".
func (v Version) String() string {
	switch v {
	case V1:
		return "v1"
	case Hybrid:
		return "hybrid"
	case V2:
		return "v2"
	}
	return "unavailable"
}

// Controller names.
const (
	Memory  = "memory"
	CPU     = "cpu"
	CPUAcct = "cpuacct" // v1 only: CPU usage (v2 reports it without a controller)
	Pids    = "pids"
	Freezer = "freezer" // v1 only: v2 freezes without a controller
)

// v1Controllers are the v1 hierarchies a group joins.
var v1Controllers = []string{Memory, CPU, CPUAcct, Pids, Freezer}

// v2Controllers are the v2 controllers a group can have enabled.
var v2Controllers = []string{Memory, CPU, Pids}

// Mode describes the host's cgroups as this process sees them.
type Mode struct {
	Version Version
	// Controllers lists, sorted, the controllers among those this
	// package uses that a group can have: on v1 and hybrid hosts the
	// mounted hierarchies of memory, cpu, cpuacct, pids and freezer; on
	// v2 those of memory, cpu and pids that the calling process's cgroup
	// offers (its cgroup.controllers).
	Controllers []string
}

// Has reports whether controller is available.
func (m Mode) Has(controller string) bool {
	for _, c := range m.Controllers {
		if c == controller {
			return true
		}
	}
	return false
}

// String is like "hybrid (cpu, cpuacct, freezer, memory, pids)".
func (m Mode) String() string {
	return fmt.Sprintf("%s (%s)", m.Version, strings.Join(m.Controllers, ", "))
}

// Detect reports the host's cgroup version and the controllers a group
// made by this process can use.
func Detect() Mode {
	r, err := DefaultRoot()
	if err != nil {
		return Mode{Version: hostVersion()}
	}
	return r.Mode()
}

// hostVersion reads the cgroup version from the filesystems mounted on
// /sys/fs/cgroup.
func hostVersion() Version {
	switch cgroups.Mode() {
	case cgroups.Legacy:
		return V1
	case cgroups.Hybrid:
		return Hybrid
	case cgroups.Unified:
		return V2
	}
	return Unavailable
}

// Root is where a runtime's groups live: a "cove" directory in each
// hierarchy. Its zero value is not usable; get one from DefaultRoot or
// ParseRoot.
type Root struct {
	version Version
	// dirs maps each usable controller to the absolute path of the
	// "cove" directory in its hierarchy (v1, hybrid); on v2 the one key
	// "" maps to the "cove" directory in the unified hierarchy.
	dirs map[string]string
	// v2Base is the cgroup "cove" is made in (v2 only): the one whose
	// processes may have to move to a leaf.
	v2Base string
}

// leafName is the v2 child cgroup that takes the processes of the
// caller's cgroup so it can hand controllers down.
const leafName = "leaf"

// parentName is the directory under the caller's cgroup that holds the
// groups.
const parentName = "cove"

// DefaultRoot returns the root under the calling process's own cgroups. It
// changes nothing on the host; New creates the directories when needed.
// ErrUnavailable if no cgroup filesystem is mounted.
func DefaultRoot() (*Root, error) {
	switch v := hostVersion(); v {
	case V1, Hybrid:
		return v1Root(v)
	case V2:
		return v2Root(unifiedMount)
	}
	return nil, fmt.Errorf("no cgroup filesystem is mounted on /sys/fs/cgroup: memory, CPU and process limits cannot be enforced; mount cgroup2 there: %w", sandbox.ErrUnavailable)
}

// Version is the cgroup version the root's groups use.
func (r *Root) Version() Version { return r.version }

// Mode describes the root's version and usable controllers.
func (r *Root) Mode() Mode {
	m := Mode{Version: r.version}
	if r.version == V2 {
		m.Controllers = v2Available(r.v2Base)
	} else {
		for c := range r.dirs {
			m.Controllers = append(m.Controllers, c)
		}
	}
	sort.Strings(m.Controllers)
	return m
}

// String encodes the root for ParseRoot: its version and directories,
// separated by spaces, such as "v2 /sys/fs/cgroup/system.slice/cove.service"
// or "hybrid memory=/sys/fs/cgroup/memory/a/cove pids=/sys/fs/cgroup/pids/cove".
func (r *Root) String() string {
	if r.version == V2 {
		return "v2 " + r.v2Base
	}
	parts := []string{r.version.String()}
	for _, c := range v1Controllers {
		if d, ok := r.dirs[c]; ok {
			parts = append(parts, c+"="+d)
		}
	}
	return strings.Join(parts, " ")
}

// MarshalText encodes the root as String does.
func (r *Root) MarshalText() ([]byte, error) { return []byte(r.String()), nil }

// UnmarshalText decodes a root as ParseRoot does.
func (r *Root) UnmarshalText(b []byte) error {
	p, err := ParseRoot(string(b))
	if err != nil {
		return err
	}
	*r = *p
	return nil
}

// ParseRoot decodes a Root.String, so a runtime finds its groups again
// from a process in another cgroup. Every directory must be inside a
// cgroup filesystem. ErrInvalid otherwise.
func ParseRoot(s string) (*Root, error) {
	fields := strings.Fields(s)
	bad := func(why string) error {
		return fmt.Errorf("parsing cgroup root %q: %s: %w", s, why, sandbox.ErrInvalid)
	}
	if len(fields) < 2 {
		return nil, bad("want a version and directories")
	}
	var r *Root
	switch fields[0] {
	case "v2":
		if len(fields) != 2 {
			return nil, bad("a v2 root has one directory")
		}
		r = newV2Root(fields[1])
	case "v1", "hybrid":
		r = &Root{version: V1, dirs: map[string]string{}}
		if fields[0] == "hybrid" {
			r.version = Hybrid
		}
		for _, f := range fields[1:] {
			c, d, ok := strings.Cut(f, "=")
			if !ok || !contains(v1Controllers, c) {
				return nil, bad(fmt.Sprintf("%q is not controller=directory", f))
			}
			r.dirs[c] = d
		}
	default:
		return nil, bad("unknown version " + fields[0])
	}
	for _, d := range r.dirs {
		if !filepath.IsAbs(d) || filepath.Clean(d) != d || filepath.Base(d) != parentName {
			return nil, bad(fmt.Sprintf("%q is not a clean absolute path ending in /%s", d, parentName))
		}
		if !onCgroupFS(filepath.Dir(d)) {
			return nil, bad(fmt.Sprintf("%s is not in a cgroup filesystem", filepath.Dir(d)))
		}
	}
	return r, nil
}

// onCgroupFS reports whether dir is on a cgroup (v1 or v2) filesystem.
func onCgroupFS(dir string) bool {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return false
	}
	return st.Type == unix.CGROUP_SUPER_MAGIC || st.Type == unix.CGROUP2_SUPER_MAGIC
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// Group is one sandbox's control group, in every hierarchy of its Root.
type Group struct {
	root *Root
	name string

	v1 cgroup1.Cgroup   // v1 and hybrid
	v2 *cgroup2.Manager // v2

	// mu guards fd, the v2 group directory's O_PATH descriptor (-1 on
	// v1, or once closed).
	mu sync.Mutex
	fd int
}

// Limits are sandbox.Limits. Zero fields are not limited, and DiskBytes
// is not a cgroup matter (see package disk).
type Limits = sandbox.Limits

// New creates a group under the default root (see Root.New).
func New(name string, l Limits) (*Group, error) {
	r, err := DefaultRoot()
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %q: %w", name, err)
	}
	return r.New(name, l)
}

// Load returns a group made earlier under the default root (see Root.Load).
func Load(name string) (*Group, error) {
	r, err := DefaultRoot()
	if err != nil {
		return nil, fmt.Errorf("loading cgroup %q: %w", name, err)
	}
	return r.Load(name)
}

// List returns the names of the groups under the default root (see
// Root.List).
func List() ([]string, error) {
	r, err := DefaultRoot()
	if err != nil {
		return nil, fmt.Errorf("listing cgroups: %w", err)
	}
	return r.List()
}

// checkName refuses names that are not one path element.
func checkName(name string) error {
	if name == "" || name == "." || name == ".." || len(name) > 200 ||
		strings.ContainsAny(name, "/\x00\n") {
		return fmt.Errorf("cgroup name %q: want one path element of at most 200 bytes: %w", name, sandbox.ErrInvalid)
	}
	return nil
}

// New creates the group name (a sandbox id) with the limits l; zero limits
// are not set. Memory is limited with swap (v1 memory+swap equal to the
// limit, v2 no swap), CPU with a CFS quota of l.CPUs cores per 100 ms
// period, and pids with pids.max. The group has no process yet: start one
// in it (FD) or Add one.
//
// Errors: ErrInvalid for a bad name or negative limits; ErrExist if the
// group exists (Load it, or Delete it first); ErrUnavailable when a
// limit's controller is missing, naming it and saying what to do.
func (r *Root) New(name string, l Limits) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	if l.MemoryBytes < 0 || l.CPUs < 0 || l.Pids < 0 {
		return nil, fmt.Errorf("creating cgroup %q: negative limit in %+v: %w", name, l, sandbox.ErrInvalid)
	}
	for _, d := range r.groupDirs(name) {
		if _, err := os.Stat(d); err == nil {
			return nil, fmt.Errorf("creating cgroup %q: %s exists already: %w", name, d, sandbox.ErrExist)
		}
	}
	var g *Group
	var err error
	if r.version == V2 {
		g, err = r.newV2(name, l)
	} else {
		g, err = r.newV1(name, l)
	}
	if err != nil {
		return nil, fmt.Errorf("creating cgroup %q: %w", name, err)
	}
	return g, nil
}

// Load returns the existing group name, for instance after the runtime
// restarted. ErrNotFound if it does not exist.
func (r *Root) Load(name string) (*Group, error) {
	if err := checkName(name); err != nil {
		return nil, err
	}
	found := false
	for _, d := range r.groupDirs(name) {
		if _, err := os.Stat(d); err == nil {
			found = true
		}
	}
	if !found {
		return nil, fmt.Errorf("loading cgroup %q: %w", name, sandbox.ErrNotFound)
	}
	var g *Group
	var err error
	if r.version == V2 {
		g, err = r.loadV2(name)
	} else {
		g, err = r.loadV1(name)
	}
	if err != nil {
		return nil, fmt.Errorf("loading cgroup %q: %w", name, err)
	}
	return g, nil
}

// List returns the names of the groups under the root, sorted: those of
// live sandboxes and those a dead sandbox left behind, for the runtime to
// Delete.
func (r *Root) List() ([]string, error) {
	seen := map[string]bool{}
	for _, d := range r.dirs {
		entries, err := os.ReadDir(d)
		if errors.Is(err, os.ErrNotExist) {
			continue
		}
		if err != nil {
			return nil, fmt.Errorf("listing cgroups in %s: %w", d, err)
		}
		for _, e := range entries {
			if e.IsDir() {
				seen[e.Name()] = true
			}
		}
	}
	names := make([]string, 0, len(seen))
	for n := range seen {
		names = append(names, n)
	}
	sort.Strings(names)
	return names, nil
}

// groupDirs returns the group's directory in each hierarchy, without
// duplicates (v1 controllers mounted together share one).
func (r *Root) groupDirs(name string) []string {
	var dirs []string
	seen := map[string]bool{}
	for _, c := range append([]string{""}, v1Controllers...) {
		d, ok := r.dirs[c]
		if !ok {
			continue
		}
		d = filepath.Join(d, name)
		key := d
		if real, err := filepath.EvalSymlinks(filepath.Dir(d)); err == nil {
			key = filepath.Join(real, name)
		}
		if !seen[key] {
			seen[key] = true
			dirs = append(dirs, d)
		}
	}
	return dirs
}

// Name is the group's name.
func (g *Group) Name() string { return g.name }

// Root is the root the group lives under.
func (g *Group) Root() *Root { return g.root }

// Path returns the group's directory in controller's hierarchy (on v2 the
// one directory, whatever controller), or "" if the root has no such
// hierarchy.
func (g *Group) Path(controller string) string {
	if g.root.version == V2 {
		controller = ""
	}
	d, ok := g.root.dirs[controller]
	if !ok {
		return ""
	}
	return filepath.Join(d, g.name)
}

// exists reports whether the group has a directory in any hierarchy.
func (g *Group) exists() bool {
	for _, d := range g.dirs() {
		if _, err := os.Stat(d); err == nil {
			return true
		}
	}
	return false
}

// dirs returns the group's directory in every hierarchy.
func (g *Group) dirs() []string { return g.root.groupDirs(g.name) }

// FD returns a descriptor of the group's directory for starting a process
// directly inside the group (exec.Cmd's SysProcAttr.UseCgroupFD and
// CgroupFD, clone3 with CLONE_INTO_CGROUP), so no child it forks can
// escape; ok is true on v2 only. On v1 and hybrid hosts, start the process
// stopped (blocked on a pipe, say) and Add it before it runs anything. The
// descriptor stays valid until Close or Delete.
func (g *Group) FD() (fd int, ok bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fd < 0 {
		return -1, false
	}
	return g.fd, true
}

// Close releases the group's descriptor; the group itself stays (Delete
// removes it). Closing twice does nothing.
func (g *Group) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.fd < 0 {
		return nil
	}
	err := unix.Close(g.fd)
	g.fd = -1
	return err
}

// Add moves the process pid (all its threads) into the group; the children
// it forks from then on are born inside. ErrInvalid for a pid below 1,
// ErrNotFound if there is no such process.
func (g *Group) Add(pid int) error {
	if pid < 1 {
		return fmt.Errorf("adding pid %d to cgroup %q: %w", pid, g.name, sandbox.ErrInvalid)
	}
	var err error
	if g.v2 != nil {
		err = g.v2.AddProc(uint64(pid))
	} else {
		err = g.v1.AddProc(uint64(pid))
	}
	if errors.Is(err, unix.ESRCH) {
		err = fmt.Errorf("%w: %w", err, sandbox.ErrNotFound)
	}
	if err != nil {
		return fmt.Errorf("adding pid %d to cgroup %q: %w", pid, g.name, err)
	}
	return nil
}

// Stats is what a group's processes use.
type Stats struct {
	// MemoryBytes is the memory charged now, page cache included.
	MemoryBytes int64
	// MemoryCache is the page cache part of MemoryBytes (file-backed
	// pages, which the kernel can take back under pressure).
	MemoryCache int64
	// MemoryPeak is the highest MemoryBytes since the group was made; 0
	// where the kernel does not say (v2 before Linux 5.19).
	MemoryPeak int64
	// OOMKills counts the processes the out-of-memory killer ended in the
	// group (v1 memory.oom_control and v2 memory.events oom_kill; Linux
	// 4.13 or later).
	OOMKills int64
	// CPUUsage is the CPU time the group's processes used, over all CPUs.
	CPUUsage time.Duration
	// Pids counts the group's tasks (processes and threads) now.
	Pids int
}

// Stats reads the group's usage. A figure whose controller is missing is
// 0. ErrNotFound if the group was deleted.
func (g *Group) Stats() (Stats, error) {
	if !g.exists() {
		return Stats{}, fmt.Errorf("reading cgroup %q stats: %w", g.name, sandbox.ErrNotFound)
	}
	var s Stats
	var err error
	if g.v2 != nil {
		s, err = g.statsV2()
	} else {
		s, err = g.statsV1()
	}
	if errors.Is(err, os.ErrNotExist) || errors.Is(err, cgroup1.ErrCgroupDeleted) {
		err = fmt.Errorf("%w: %w", err, sandbox.ErrNotFound)
	}
	if err != nil {
		return Stats{}, fmt.Errorf("reading cgroup %q stats: %w", g.name, err)
	}
	return s, nil
}

// Update changes the group's limits in place (a pooled sandbox takes the
// limits of the sandbox it becomes). ErrUnavailable when a limit's
// controller is missing.
func (g *Group) Update(l Limits) error {
	if l.MemoryBytes < 0 || l.CPUs < 0 || l.Pids < 0 {
		return fmt.Errorf("updating cgroup %q: negative limit in %+v: %w", g.name, l, sandbox.ErrInvalid)
	}
	if g.v2 != nil {
		cove := g.root.dirs[""]
		if err := g.v2.Update(v2Resources(l, v2Available(g.root.v2Base), cove)); err != nil {
			return fmt.Errorf("updating cgroup %q: %w", g.name, err)
		}
		return nil
	}
	res, err := g.root.v1Resources(l)
	if err != nil {
		return err
	}
	if err := g.v1.Update(res); err != nil {
		return fmt.Errorf("updating cgroup %q: %w", g.name, err)
	}
	return nil
}
