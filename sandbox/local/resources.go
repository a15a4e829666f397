package local

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"path/filepath"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/cgroup"
	"github.com/cove-sandbox/cove/sandbox/local/disk"
)

// acquire prepares what a sandbox holds on the host while it runs: its
// disk mounted, and a cgroup with its limits. The supervisor calls it
// before starting pid 1 and the returned release when pid 1 has ended.
func acquire(ctx context.Context, dir string, st *state, log *slog.Logger) (grp *cgroup.Group, release func(), err error) {
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

	root, err := cgroupRoot(st)
	if err != nil {
		if limited(st.Info.Spec.Limits) {
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
	grp, err = root.New(name, st.Info.Spec.Limits)
	if err != nil {
		release()
		return nil, nil, fmt.Errorf("creating the sandbox's cgroup: %w", err)
	}
	st.CgroupRoot = root.String()
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

// oomFile is the file whose oom_kill counter covers the group.
func oomFile(g *cgroup.Group) string {
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

func cgroupRoot(st *state) (*cgroup.Root, error) {
	if st.CgroupRoot != "" {
		return cgroup.ParseRoot(st.CgroupRoot)
	}
	return cgroup.DefaultRoot()
}

func limited(l sandbox.Limits) bool {
	return l.CPUs > 0 || l.MemoryBytes > 0 || l.Pids > 0
}

// releaseCgroup removes a sandbox's cgroup if one is left (a supervisor
// that died before cleaning up).
func releaseCgroup(ctx context.Context, st *state) {
	root, err := cgroupRoot(st)
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

// MemoryUsage returns the memory a running sandbox's cgroup charges
// (its processes' pages, page cache and tmpfs included).
func (r *Runtime) MemoryUsage(id string) (int64, error) {
	st, err := r.load(id)
	if err != nil {
		return 0, err
	}
	root, err := cgroupRoot(st)
	if err != nil {
		return 0, err
	}
	g, err := root.Load(id)
	if err != nil {
		return 0, err
	}
	defer g.Close()
	stats, err := g.Stats()
	if err != nil {
		return 0, err
	}
	return stats.MemoryBytes, nil
}
