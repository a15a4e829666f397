package sandbox

import (
	"context"
	"time"
)

// Stats is what a sandbox uses at one moment, as its runtime measures it
// from outside (the host's cgroup and the sandbox's disk), so nothing the
// sandbox runs can make it lie.
type Stats struct {
	// At is when the figures were read.
	At time.Time `json:"at"`
	// CPUTime is the CPU time the sandbox's processes have used since it
	// last started, over all CPUs; 0 while stopped.
	CPUTime time.Duration `json:"cpu_time"`
	// MemoryBytes is the memory the sandbox is charged now, page cache
	// included; MemoryCache the page cache part. 0 while stopped.
	MemoryBytes int64 `json:"memory_bytes"`
	MemoryCache int64 `json:"memory_cache"`
	// DiskUsed is the bytes in use on the sandbox's own disk, DiskTotal
	// what it can hold (0 when the disk is uncapped).
	DiskUsed  int64 `json:"disk_used"`
	DiskTotal int64 `json:"disk_total"`
}

// StatsReader is a Runtime that can measure its sandboxes.
type StatsReader interface {
	// Stats reads sandbox id's use now, running or stopped (a stopped
	// one uses only disk). ErrNotFound if unknown. Its errors are for
	// the operator (they may name host paths), never for a tenant.
	Stats(ctx context.Context, id string) (Stats, error)
}

// LogEntry is one line of a sandbox's own log: what its daemon did
// (started, a process started, a process ended). Fields hold the
// details, each a short string.
type LogEntry struct {
	Time    time.Time         `json:"time"`
	Level   string            `json:"level"` // debug, info, warn or error
	Message string            `json:"message"`
	Fields  map[string]string `json:"fields,omitempty"`
}

// LogReader is a Session whose daemon keeps a log of what it did since
// the sandbox last started, bounded (the oldest lines go first), in
// sandbox terms only: no host path or host log line is ever in it.
type LogReader interface {
	// Logs returns the log's lines, oldest first.
	Logs(ctx context.Context) ([]LogEntry, error)
}
