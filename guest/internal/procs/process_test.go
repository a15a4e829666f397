package procs

import (
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// TestKillAfter: a tenant's X-Cove-Kill-After is whole milliseconds, from
// 1 to a year; anything else (negative, zero, huge, overflowing, not a
// plain number) is ErrInvalid, never a timer that fires at once or never.
func TestKillAfter(t *testing.T) {
	for v, want := range map[string]time.Duration{
		"":            0,
		"1":           time.Millisecond,
		"60000":       time.Minute,
		"31536000000": 365 * 24 * time.Hour,
	} {
		h := http.Header{}
		if v != "" {
			h.Set(wire.KillAfterHeader, v)
		}
		if got, err := killAfter(h); err != nil || got != want {
			t.Errorf("%q: %v, %v; want %v", v, got, err, want)
		}
	}
	for _, v := range []string{"0", "-1", "-9223372036854775808", "31536000001", "9223372036854775807", "99999999999999999999", "1e3", "1.5", " 5", "0x10", "5ms"} {
		h := http.Header{}
		h.Set(wire.KillAfterHeader, v)
		if got, err := killAfter(h); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("%q: %v, %v; want ErrInvalid", v, got, err)
		}
	}
}
