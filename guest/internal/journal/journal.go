// Package journal is the daemon's own log of what it did (it started, a
// process started, a process ended), kept for the sandbox's owner: E2B's
// sandbox logs and Cove's. It lives in the daemon's memory, which the
// sandbox's cgroup pays for, and is bounded in lines and in bytes per
// line, so a sandbox that starts processes without end (or with huge
// command lines) only pushes its own oldest lines out. It holds what the
// daemon sees inside the sandbox, never a host path.
package journal

import (
	"sync"
	"time"
	"unicode/utf8"

	"github.com/cove-sandbox/cove/sandbox"
)

const (
	// MaxEntries is how many lines the journal keeps; older ones go.
	MaxEntries = 1000
	// MaxField bounds each field's value in bytes (a longer one is cut
	// and ends with "…").
	MaxField = 256
	// maxFields bounds the fields of one line.
	maxFields = 8
)

// Journal is a bounded, concurrency-safe log. The zero value is not
// usable; make one with New. A nil *Journal discards everything.
type Journal struct {
	now func() time.Time

	// mu guards ring, next and full.
	mu   sync.Mutex
	ring []sandbox.LogEntry
	next int
	full bool
}

// New returns an empty journal of MaxEntries lines.
func New() *Journal {
	return &Journal{now: time.Now, ring: make([]sandbox.LogEntry, MaxEntries)}
}

// Add records a line; kv are field names and values in pairs.
func (j *Journal) Add(level, msg string, kv ...string) {
	if j == nil {
		return
	}
	e := sandbox.LogEntry{Time: j.now().UTC(), Level: level, Message: cut(msg)}
	if len(kv) > 1 {
		e.Fields = make(map[string]string, len(kv)/2)
		for i := 0; i+1 < len(kv) && i/2 < maxFields; i += 2 {
			e.Fields[kv[i]] = cut(kv[i+1])
		}
	}
	j.mu.Lock()
	j.ring[j.next] = e
	j.next = (j.next + 1) % len(j.ring)
	if j.next == 0 {
		j.full = true
	}
	j.mu.Unlock()
}

// Entries returns the lines kept, oldest first.
func (j *Journal) Entries() []sandbox.LogEntry {
	if j == nil {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	var out []sandbox.LogEntry
	if j.full {
		out = append(out, j.ring[j.next:]...)
	}
	return append(out, j.ring[:j.next]...)
}

// Clean holds a line that came over the wire from a daemon (which the
// sandbox may control) to the journal's bounds: a known level, a message
// and at most maxFields fields of at most MaxField bytes each.
func Clean(e sandbox.LogEntry) sandbox.LogEntry {
	switch e.Level {
	case "debug", "info", "warn", "error":
	default:
		e.Level = "info"
	}
	e.Message = cut(e.Message)
	if len(e.Fields) == 0 {
		e.Fields = nil
		return e
	}
	fields := make(map[string]string, min(len(e.Fields), maxFields))
	for k, v := range e.Fields {
		if len(fields) == maxFields {
			break
		}
		fields[cut(k)] = cut(v)
	}
	e.Fields = fields
	return e
}

// cut bounds s to MaxField bytes, on a rune boundary, and makes it valid
// UTF-8 (a command line may be any bytes).
func cut(s string) string {
	if len(s) > 4*MaxField {
		s = s[:4*MaxField]
	}
	if !utf8.ValidString(s) {
		s = string([]rune(s)) // invalid bytes become U+FFFD
	}
	if len(s) <= MaxField {
		return s
	}
	i := MaxField - len("…")
	for i > 0 && !utf8.RuneStart(s[i]) {
		i--
	}
	return s[:i] + "…"
}
