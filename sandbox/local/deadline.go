package local

import (
	"context"
	"fmt"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

var _ sandbox.Deadliner = (*Runtime)(nil)

// SetDeadline moves a sandbox's TTL. The supervisor of a running sandbox
// is told with SIGHUP and re-reads it; a stopped one starts with it.
func (r *Runtime) SetDeadline(ctx context.Context, id string, t time.Time) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, err := r.load(id); err != nil {
		return err
	}
	st, err := sbdir.Update(r.dir(id), func(s *state) error {
		s.Deadline = t
		return nil
	})
	if err != nil {
		return fmt.Errorf("setting the TTL of sandbox %q: %w", id, err)
	}
	if st.Info.State == sandbox.StateRunning && st.ShimPID > 0 {
		if err := syscall.Kill(st.ShimPID, syscall.SIGHUP); err != nil && err != syscall.ESRCH {
			return fmt.Errorf("telling sandbox %q's supervisor its TTL: %w", id, err)
		}
	}
	return nil
}
