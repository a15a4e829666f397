package local

import (
	"context"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/cgroup"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
)

// cgroupRoot is where the sandbox's cgroup lives.
func cgroupRoot(st *state) (*cgroup.Root, error) { return host.CgroupRoot(st) }

// limited reports whether l needs a cgroup.
func limited(l sandbox.Limits) bool { return host.Limited(l) }

// releaseCgroup removes a sandbox's cgroup if one is left (a supervisor
// that died before cleaning up).
func releaseCgroup(ctx context.Context, st *state) { host.ReleaseCgroup(ctx, st) }

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
