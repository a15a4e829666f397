package fake

import (
	"context"
	"fmt"

	"github.com/cove-sandbox/cove/sandbox"
)

var _ sandbox.StatsReader = (*Runtime)(nil)

// Stats implements sandbox.StatsReader. A fake sandbox uses no CPU or
// memory; its disk use is the bytes of its files, its disk total the
// spec's disk limit.
func (r *Runtime) Stats(ctx context.Context, id string) (sandbox.Stats, error) {
	s, err := r.lookup(id)
	if err != nil {
		return sandbox.Stats{}, fmt.Errorf("measuring sandbox: %w", err)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	st := sandbox.Stats{At: r.now().UTC(), DiskTotal: s.spec.Limits.DiskBytes}
	for _, n := range s.files {
		st.DiskUsed += int64(len(n.data))
	}
	return st, nil
}
