package procs

import (
	"context"
	"errors"
	"net/http"
	"runtime"
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

// TestOutLogSmallWritesBounded: a process that writes a byte at a time
// with nobody attached (each read of its pipe one event) holds no more
// memory than a few times the log's limit: an event's bookkeeping counts
// against the limit, not only its data.
func TestOutLogSmallWritesBounded(t *testing.T) {
	const limit = 1 << 20
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	l := newOutLog(limit)
	for range 4 * limit {
		l.append(context.Background(), kindStdout, []byte{'x'})
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	if grew := int64(after.HeapAlloc) - int64(before.HeapAlloc); grew > 4*limit {
		t.Errorf("a log of %d bytes holds %d MiB after one-byte writes; want under %d MiB", limit, grew>>20, 4*limit>>20)
	}
	runtime.KeepAlive(l)
}
