// Package check holds what store/sqlite and store/postgres check before
// they write, and the errors they make themselves, so the two stores
// refuse the same records with the same words. It knows no SQL.
package check

import (
	"fmt"
	"math"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Page sizes of the List calls.
const (
	DefaultLimit = 100
	MaxLimit     = 1000
)

// NotFound is what of ErrNotFound.
func NotFound(what string) error { return fmt.Errorf("%s %w", what, sandbox.ErrNotFound) }

// Exists is what of ErrExist.
func Exists(what string) error { return fmt.Errorf("%s %w", what, sandbox.ErrExist) }

// Invalid is ErrInvalid with what was wrong.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", sandbox.ErrInvalid, fmt.Sprintf(format, args...))
}

// The times a record may hold: what int64 nanoseconds since 1970 can.
var (
	minTime = time.Unix(0, math.MinInt64)
	maxTime = time.Unix(0, math.MaxInt64)
)

// Time refuses a time the stores cannot keep exactly (the zero time is
// none, and kept).
func Time(what string, t time.Time) error {
	if !t.IsZero() && (t.Before(minTime) || t.After(maxTime)) {
		return Invalid("%s %s is outside the years 1678-2262", what, t.Format(time.RFC3339Nano))
	}
	return nil
}

// State refuses a sandbox state other than running and stopped.
func State(state string) error {
	if state != store.StateRunning && state != store.StateStopped {
		return Invalid("unknown sandbox state %q (want %q or %q)", state, store.StateRunning, store.StateStopped)
	}
	return nil
}

// Sandbox refuses a sandbox record that cannot be stored.
func Sandbox(sb store.Sandbox) error {
	switch {
	case sb.ID == "":
		return Invalid("sandbox id is empty")
	case sb.TeamID == "":
		return Invalid("sandbox %s: team id is empty", sb.ID)
	case sb.CreatedAt.IsZero():
		// Pages are ordered by creation time.
		return Invalid("sandbox %s: created_at is not set", sb.ID)
	case sb.IdleTimeout < 0:
		return Invalid("sandbox %s: negative idle timeout %v", sb.ID, sb.IdleTimeout)
	case sb.OnExpire != "" && sb.OnExpire != store.ExpireStop && sb.OnExpire != store.ExpireDelete:
		return Invalid("sandbox %s: unknown on_expire %q (want %q or %q)", sb.ID, sb.OnExpire, store.ExpireStop, store.ExpireDelete)
	}
	if err := State(sb.State); err != nil {
		return fmt.Errorf("sandbox %s: %w", sb.ID, err)
	}
	for _, c := range []struct {
		what string
		t    time.Time
	}{{"created_at", sb.CreatedAt}, {"started_at", sb.StartedAt}, {"stopped_at", sb.StoppedAt}, {"deadline", sb.Deadline}, {"last_activity", sb.LastActivity}} {
		if err := Time("sandbox "+sb.ID+" "+c.what, c.t); err != nil {
			return err
		}
	}
	return nil
}

// Quota refuses negative or non-finite limits.
func Quota(q store.Quota) error {
	if q.Sandboxes < 0 || q.CPUs < 0 || math.IsNaN(q.CPUs) || math.IsInf(q.CPUs, 0) || q.MemoryBytes < 0 {
		return Invalid("quota %+v: limits must be zero (unlimited) or positive", q)
	}
	return nil
}

// Port refuses a port record with no sandbox or a port out of range.
func Port(sandboxID string, port int) error {
	switch {
	case sandboxID == "":
		return Invalid("sandbox id is empty")
	case port < 1 || port > 65535:
		return Invalid("port %d of sandbox %s: ports are 1 to 65535", port, sandboxID)
	}
	return nil
}

// PortName names a port in errors.
func PortName(sandboxID string, port int) string {
	return fmt.Sprintf("port %d of sandbox %s", port, sandboxID)
}

// Lease refuses a lease with no name or holder.
func Lease(name, holder string) error {
	switch {
	case name == "":
		return Invalid("lease name is empty")
	case holder == "":
		return Invalid("lease %s: holder is empty", name)
	}
	return nil
}

// PageLimit is the page size to use for a List call's limit n (0: the
// default; more than the most: the most).
func PageLimit(n int) (int, error) {
	switch {
	case n < 0:
		return 0, Invalid("negative page limit %d", n)
	case n == 0:
		return DefaultLimit, nil
	case n > MaxLimit:
		return MaxLimit, nil
	}
	return n, nil
}
