// Package api holds the JSON types of the Cove server's HTTP API (/v1),
// shared by the server (package server) and its Go client
// (sandbox/remote), so the two cannot drift apart. The OpenAPI document
// the server serves at /openapi.json describes the same types.
package api

import (
	"encoding/json"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Error is every error response: {code, message, request_id}.
type Error struct {
	// Code is one of the Code* constants.
	Code string `json:"code"`
	// Message says what was wrong and what to do.
	Message   string `json:"message"`
	RequestID string `json:"request_id,omitempty"`
}

// Error codes, each with one HTTP status.
const (
	CodeInvalid      = "invalid"      // 400: the request is malformed or a value is out of range
	CodeUnauthorized = "unauthorized" // 401: no API key, or an unknown or revoked one
	CodeForbidden    = "forbidden"    // 403: the key may not do this (admin only), or a quota forbids it
	CodeNotFound     = "not_found"    // 404: no such sandbox, process, file, snapshot or port (for this team)
	CodeExists       = "exists"       // 409: the target already exists
	CodeState        = "state"        // 409: wrong state (exec in a stopped sandbox)
	CodeTooLarge     = "too_large"    // 413: the body is over the limit
	CodeLimit        = "limit"        // 429: a limit was hit (quota, disk full, output cap)
	CodeUnavailable  = "unavailable"  // 503: the sandbox cannot be reached right now; retry
	CodeUpstream     = "upstream"     // 502: the app behind an exposed port did not answer (nothing listens there, or not HTTP)
	CodeInternal     = "internal"     // 500: our fault; the request id finds it in the logs
)

// Size presets for CreateSandbox.Size. Every size has a pids limit, so
// a fork bomb in one sandbox cannot take the host's process table.
var Sizes = map[string]Size{
	"small":  {CPUs: 1, MemoryBytes: 512 << 20, DiskBytes: 2 << 30, Pids: 512},
	"medium": {CPUs: 2, MemoryBytes: 2 << 30, DiskBytes: 10 << 30, Pids: 1024},
	"large":  {CPUs: 4, MemoryBytes: 8 << 30, DiskBytes: 40 << 30, Pids: 2048},
}

// Size is a sandbox's resources.
type Size struct {
	CPUs        float64 `json:"cpus"`
	MemoryBytes int64   `json:"memory_bytes"`
	DiskBytes   int64   `json:"disk_bytes"`
	Pids        int     `json:"pids"`
}

// The ranges a create may ask for (0 in a request means the size's
// value). The server's operator sets the largest pids limit (8192 by
// default) and whether PidsUnlimited may be asked for.
const (
	MinCPUs        = 0.1
	MaxCPUs        = 64
	MinMemoryBytes = 64 << 20
	MaxMemoryBytes = 1 << 40
	MinDiskBytes   = 16 << 20
	MaxDiskBytes   = 1 << 40
	MinPids        = 32
	// PidsUnlimited asks for no pids limit; a server refuses it unless
	// its operator allows it.
	PidsUnlimited = sandbox.NoPidsLimit
)

// CreateSandbox is the body of POST /v1/sandboxes.
type CreateSandbox struct {
	Template string `json:"template,omitempty"`
	// Size is a preset (small, medium, large); CPUs, MemoryBytes and
	// DiskBytes override its parts. Default small.
	Size        string  `json:"size,omitempty"`
	CPUs        float64 `json:"cpus,omitempty"`
	MemoryBytes int64   `json:"memory_bytes,omitempty"`
	DiskBytes   int64   `json:"disk_bytes,omitempty"`
	// Pids is the most processes and threads the sandbox may run at
	// once: MinPids up to the server's maximum, or PidsUnlimited where the
	// operator allows it; 0 is the size's.
	Pids int               `json:"pids,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	// Manifest is an Agents SDK manifest applied to the new workspace.
	Manifest json.RawMessage `json:"manifest,omitempty"`
	// TTLSeconds stops (or deletes, see OnExpire) the sandbox this long
	// after it starts; 0 means the server's default.
	TTLSeconds int64 `json:"ttl_seconds,omitempty"`
	// IdleTimeoutSeconds stops (or deletes) it after this long with no
	// running process, stream or port connection; 0 means none.
	IdleTimeoutSeconds int64 `json:"idle_timeout_seconds,omitempty"`
	// OnExpire is "stop" (keep the disk; the default) or "delete".
	OnExpire string            `json:"on_expire,omitempty"`
	Labels   map[string]string `json:"labels,omitempty"`
	// User runs commands; "" is the template's unprivileged user.
	User string `json:"user,omitempty"`
	// Root is the workspace path; "" is /workspace (or the manifest's).
	Root string `json:"root,omitempty"`
	// Network is what the sandbox may reach; none (loopback only) when
	// absent.
	Network *Network `json:"network,omitempty"`
	// Isolation is the wall between the sandbox and the host: "native"
	// (the default; the host's kernel behind namespaces, seccomp and
	// Landlock) or "gvisor" (gVisor's user-space kernel, whose pause
	// keeps memory).
	Isolation string `json:"isolation,omitempty"`
}

// Network is a sandbox's network policy.
type Network struct {
	// Mode is none (loopback only), internet (public addresses; never
	// the host, private ranges or cloud metadata) or allow (only Allow).
	Mode string `json:"mode"`
	// Allow lists addresses, CIDRs or host names, each with an optional
	// ":port", for mode allow.
	Allow []string `json:"allow,omitempty"`
}

// Sandbox describes a sandbox.
type Sandbox struct {
	ID                 string            `json:"id"`
	State              string            `json:"state"` // running, stopped
	Template           string            `json:"template"`
	Size               string            `json:"size,omitempty"`
	CPUs               float64           `json:"cpus"`
	MemoryBytes        int64             `json:"memory_bytes"`
	DiskBytes          int64             `json:"disk_bytes"`
	Pids               int               `json:"pids"` // PidsUnlimited for none
	Root               string            `json:"root"`
	User               string            `json:"user,omitempty"`
	Labels             map[string]string `json:"labels,omitempty"`
	Env                map[string]string `json:"env,omitempty"`
	CreatedAt          time.Time         `json:"created_at"`
	StartedAt          time.Time         `json:"started_at"`
	StoppedAt          *time.Time        `json:"stopped_at,omitempty"`
	Deadline           *time.Time        `json:"deadline,omitempty"`
	IdleTimeoutSeconds int64             `json:"idle_timeout_seconds,omitempty"`
	OnExpire           string            `json:"on_expire"`
	Network            *Network          `json:"network,omitempty"`
	// Isolation is the sandbox's tier: native or gvisor.
	Isolation string `json:"isolation"`
	// Paused says a stopped sandbox kept its memory: resume brings back
	// its processes as they were (gvisor only).
	Paused bool `json:"paused,omitempty"`
}

// Pause is the optional body of POST /v1/sandboxes/{id}/pause.
type Pause struct {
	// KeepMemory: true keeps the processes and their memory (refused
	// on a tier that cannot: native), false keeps the disk only; absent
	// keeps memory when the sandbox's tier can (gvisor).
	KeepMemory *bool `json:"keep_memory,omitempty"`
}

// Fork is the body of POST /v1/sandboxes/{id}/forks, which answers
// with a SandboxList of the copies (POST .../fork makes one and answers
// with it).
type Fork struct {
	// Count is how many copies to make, 1 to MaxForks.
	// Copies of a running gvisor sandbox start with its processes and
	// memory; others with its disk.
	Count int `json:"count,omitempty"`
}

// MaxForks is the most copies one fork makes.
const MaxForks = 16

// SandboxList is GET /v1/sandboxes: a page and the cursor of the next.
type SandboxList struct {
	Sandboxes  []Sandbox `json:"sandboxes"`
	NextCursor string    `json:"next_cursor,omitempty"`
}

// SetTTL is the body of POST /v1/sandboxes/{id}/ttl: the sandbox now
// stops TTLSeconds from now.
type SetTTL struct {
	TTLSeconds int64 `json:"ttl_seconds"`
}

// Exec is the body of POST /v1/sandboxes/{id}/exec. The response is
// NDJSON: one ExecEvent per line, "start" first, "exit" (or "error") last.
type Exec struct {
	Cmd   string            `json:"cmd"`
	Args  []string          `json:"args,omitempty"`
	Shell bool              `json:"shell,omitempty"` // run Cmd with /bin/sh -c
	Dir   string            `json:"dir,omitempty"`
	Env   map[string]string `json:"env,omitempty"`
	User  string            `json:"user,omitempty"`
	// Stdin is sent to the process, then closed (base64 in JSON).
	Stdin []byte `json:"stdin,omitempty"`
	// Tag names a background process for later attach.
	Tag string `json:"tag,omitempty"`
	// Background returns after the "start" event; the process keeps
	// running (attach to it with its pid or tag).
	Background bool `json:"background,omitempty"`
	// TimeoutSeconds kills the process after this long; 0 means none.
	TimeoutSeconds int64 `json:"timeout_seconds,omitempty"`
}

// ExecEvent is one line of an exec or attach stream.
type ExecEvent struct {
	// Type is start, stdout, stderr, exit or error.
	Type string `json:"type"`
	PID  int    `json:"pid,omitempty"`
	// Data is output (base64 in JSON).
	Data     []byte `json:"data,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	OOM      bool   `json:"oom,omitempty"`
	// Error says why the stream ended early (type error), with Code.
	Error string `json:"error,omitempty"`
	Code  string `json:"code,omitempty"`
	// TimedOut is set on the exit event of a process killed because it
	// ran past Exec.TimeoutSeconds.
	TimedOut bool `json:"timed_out,omitempty"`
}

// Signal is the body of POST /v1/sandboxes/{id}/processes/{pid}/signal.
type Signal struct {
	// Signal is a name (TERM, KILL, INT, HUP, QUIT, USR1, USR2) or number.
	Signal string `json:"signal"`
}

// Process describes a running background process.
type Process struct {
	PID  int      `json:"pid"`
	Tag  string   `json:"tag,omitempty"`
	Cmd  string   `json:"cmd"`
	Args []string `json:"args,omitempty"`
	Dir  string   `json:"dir,omitempty"`
}

// ProcessList is GET /v1/sandboxes/{id}/processes.
type ProcessList struct {
	Processes []Process `json:"processes"`
}

// PTYMessage is a text message on the WebSocket of GET
// /v1/sandboxes/{id}/pty (binary messages are the terminal's bytes). The
// client sends {"type":"resize","cols":..,"rows":..}; the server sends
// {"type":"exit","exit_code":..} when the process ends, then closes.
type PTYMessage struct {
	Type     string `json:"type"`
	Cols     uint16 `json:"cols,omitempty"`
	Rows     uint16 `json:"rows,omitempty"`
	ExitCode *int   `json:"exit_code,omitempty"`
	Signal   string `json:"signal,omitempty"`
	OOM      bool   `json:"oom,omitempty"`
	Error    string `json:"error,omitempty"`
}

// FileInfo describes a file in a sandbox.
type FileInfo struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"`
	Type          string    `json:"type"` // file, dir, symlink
	Size          int64     `json:"size"`
	Mode          uint32    `json:"mode"`
	ModTime       time.Time `json:"mod_time"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// FileList is GET /v1/sandboxes/{id}/files/list.
type FileList struct {
	Files []FileInfo `json:"files"`
}

// Move is the body of POST /v1/sandboxes/{id}/files/move.
type Move struct {
	From string `json:"from"`
	To   string `json:"to"`
}

// Snapshot describes a saved workspace.
type Snapshot struct {
	ID        string    `json:"id"`
	SandboxID string    `json:"sandbox_id"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
}

// SnapshotList is GET /v1/snapshots: the team's snapshots, oldest first.
type SnapshotList struct {
	Snapshots []Snapshot `json:"snapshots"`
}

// ExposePort is the body of POST /v1/sandboxes/{id}/ports/{port}.
type ExposePort struct {
	// Public ports need no token.
	Public bool `json:"public,omitempty"`
}

// Port is an exposed port and how to reach it.
type Port struct {
	Port   int  `json:"port"`
	Public bool `json:"public"`
	// URL reaches the port by host name ({port}-{id}.{domain}); empty
	// when the server has no domain.
	URL string `json:"url,omitempty"`
	// PathURL reaches it by path (/p/{id}/{port}/).
	PathURL string `json:"path_url"`
	// Token must be sent (header X-Cove-Port-Token, or ?cove_token=) to a
	// private port. Shown when the port is exposed.
	Token string `json:"token,omitempty"`
}

// UsageReport is GET /v1/usage.
type UsageReport struct {
	From      time.Time      `json:"from"`
	To        time.Time      `json:"to"`
	Sandboxes []SandboxUsage `json:"sandboxes"`
	Total     SandboxUsage   `json:"total"`
	// Days is the team's use per UTC day (asked for with by=day), each
	// day cut to [From, To).
	Days []UsageDay `json:"days,omitempty"`
	// Models is the team's agent runs' model use (runs made in the
	// period); not in Total, which is the sandboxes'.
	Models *ModelUsage `json:"models,omitempty"`
}

// UsageDay is one UTC day of a UsageReport.
type UsageDay struct {
	Date          string  `json:"date"` // 2006-01-02
	CPUSeconds    float64 `json:"cpu_seconds"`
	MemoryGiBSecs float64 `json:"memory_gib_secs"`
	DiskGiBHours  float64 `json:"disk_gib_hours"`
	BytesIn       int64   `json:"bytes_in"`
	BytesOut      int64   `json:"bytes_out"`
	CostUSD       float64 `json:"cost_usd"`
	// Models is the model use of the runs made that day.
	Models *ModelUsage `json:"models,omitempty"`
}

// SandboxUsage is the metered use of one sandbox (or the total).
// CPUSeconds is the CPU time used while running, as the runtime measures
// it (before, and still on a runtime that cannot measure or a server set
// to, the CPU limit x running seconds); MemoryGiBSecs the memory limit in
// GiB x running seconds; DiskGiBHours the disk limit x stopped hours.
type SandboxUsage struct {
	SandboxID     string  `json:"sandbox_id,omitempty"`
	CPUSeconds    float64 `json:"cpu_seconds"`
	MemoryGiBSecs float64 `json:"memory_gib_secs"`
	DiskGiBHours  float64 `json:"disk_gib_hours"`
	BytesIn       int64   `json:"bytes_in"`
	BytesOut      int64   `json:"bytes_out"`
	CostUSD       float64 `json:"cost_usd"`
}

// CreateKey is the body of POST /v1/keys (admin keys may name a team).
type CreateKey struct {
	Name string `json:"name"`
	// Team is the team id; "" is the caller's team. A new team is made
	// when NewTeam is set (admin only).
	Team    string `json:"team,omitempty"`
	NewTeam string `json:"new_team,omitempty"`
	Admin   bool   `json:"admin,omitempty"`
	// Format is the secret's form: "cove" (cove_..., the default) or
	// "e2b" (e2b_..., for E2B SDKs and tools that check the form).
	Format string `json:"format,omitempty"`
}

// Key describes an API key. Secret is set only in the response that made
// it.
type Key struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Team      string    `json:"team"`
	Prefix    string    `json:"prefix"`
	Admin     bool      `json:"admin,omitempty"`
	Secret    string    `json:"secret,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// LastUsedAt is when the key last authenticated a request (kept to
	// the minute); absent if never.
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// Quota is a team's limits on what it runs at once (PUT and GET
// /v1/teams/{team}/quota). Zero means unlimited.
type Quota struct {
	Sandboxes   int     `json:"sandboxes"`
	CPUs        float64 `json:"cpus"`
	MemoryBytes int64   `json:"memory_bytes"`
}
