package local

import (
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
)

// MemoryUsage returns the memory a running sandbox's cgroup charges
// (its processes' pages, page cache and tmpfs included).
func (r *Runtime) MemoryUsage(id string) (int64, error) {
	st, err := r.load(id)
	if err != nil {
		return 0, err
	}
	root, err := host.CgroupRoot(st)
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
