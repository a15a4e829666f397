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
	"path/filepath"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/cgroup"
	"github.com/cove-sandbox/cove/sandbox/local/disk"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// Acquire prepares what a sandbox holds on the host while it runs: its
// disk mounted, and a cgroup with its limits (nil when the host has no
// cgroups and the sandbox asks for no limits). It records the cgroup's
// root in st. The supervisor calls it before starting pid 1 and the
// returned release when pid 1 has ended.
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
