package local

import (
	"context"
	"errors"
	"path/filepath"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/disk"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
)

var _ sandbox.StatsReader = (*Runtime)(nil)

// Stats implements sandbox.StatsReader: CPU and memory from the
// sandbox's cgroup while it runs (its commands' child group included),
// disk use from its disk's filesystem (read where the supervisor has it
// mounted, or from its image's superblock while stopped). Its errors
// name host paths: for the operator's log.
func (r *Runtime) Stats(ctx context.Context, id string) (sandbox.Stats, error) {
	st, err := r.load(id)
	if err != nil {
		return sandbox.Stats{}, err
	}
	out := sandbox.Stats{At: time.Now().UTC()}
	d, err := disk.Open(filepath.Join(r.dir(id), "disk"))
	if err != nil {
		return out, sandbox.WrapIDf(id, hostFault(err), "measuring sandbox %q", id)
	}
	if st.Info.State == sandbox.StateRunning {
		if view := host.MountView(st.ShimPID); view != "" {
			d = d.Via(view)
		}
		if err := r.cgroupStats(id, st, &out); err != nil {
			return out, sandbox.WrapIDf(id, err, "measuring sandbox %q", id)
		}
	}
	if out.DiskUsed, out.DiskTotal, err = d.Usage(); err != nil {
		return out, sandbox.WrapIDf(id, err, "measuring sandbox %q", id)
	}
	return out, nil
}

// cgroupStats reads a running sandbox's CPU time and memory.
func (r *Runtime) cgroupStats(id string, st *state, out *sandbox.Stats) error {
	root, err := host.CgroupRoot(st)
	if err != nil {
		return err
	}
	g, err := root.Load(id)
	if err != nil {
		return err
	}
	defer g.Close()
	cs, err := g.Stats()
	if err != nil {
		return err
	}
	out.CPUTime, out.MemoryBytes, out.MemoryCache = cs.CPUUsage, cs.MemoryBytes, cs.MemoryCache
	return nil
}

// hostFault is err, which is the host's fault (a sandbox's disk gone from
// its directory), without the sentinels it wraps: a disk the host lost
// is not the tenant's "not found" or "invalid", and an error with no
// sentinel reaches a tenant as an internal error with a request id, its
// detail (host paths) in the server's log only.
func hostFault(err error) error { return errors.New(err.Error()) }
