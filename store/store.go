// Package store is the Cove server's record of truth: teams, API keys,
// sandboxes, snapshots, exposed ports and usage. It holds the types and
// the Store interface; store/sqlite and store/postgres implement it. Errors wrap the sandbox package's sentinels
// (sandbox.ErrNotFound, sandbox.ErrExist, sandbox.ErrInvalid) so the API
// maps them to HTTP statuses in one place.
package store

import (
	"context"
	"encoding/json"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Team owns API keys and sandboxes; nothing of one team is visible to
// another.
type Team struct {
	ID        string    `json:"id"`
	Name      string    `json:"name"`
	Quota     Quota     `json:"quota"`
	CreatedAt time.Time `json:"created_at"`
}

// Quota caps what a team may run at once. Zero means unlimited.
type Quota struct {
	Sandboxes   int     `json:"sandboxes,omitempty"`    // running sandboxes
	CPUs        float64 `json:"cpus,omitempty"`         // total CPUs of running sandboxes
	MemoryBytes int64   `json:"memory_bytes,omitempty"` // total memory of running sandboxes
}

// APIKey authenticates a caller as its team. Only a hash of the secret
// is stored; the secret is shown once when the key is made.
type APIKey struct {
	ID     string `json:"id"`
	TeamID string `json:"team_id"`
	Name   string `json:"name"`
	// Prefix is the start of the secret ("cove_ab12"), to tell keys apart.
	Prefix string `json:"prefix"`
	// Hash is the SHA-256 of the secret, hex.
	Hash string `json:"-"`
	// Admin keys may manage teams and keys.
	Admin      bool       `json:"admin,omitempty"`
	CreatedAt  time.Time  `json:"created_at"`
	LastUsedAt *time.Time `json:"last_used_at,omitempty"`
	RevokedAt  *time.Time `json:"revoked_at,omitempty"`
}

// Sandbox states as the store records them. A sandbox the runtime lost
// (its supervisor died) is recorded stopped.
const (
	StateRunning = string(sandbox.StateRunning)
	StateStopped = string(sandbox.StateStopped)
)

// Expiry actions: what happens when a sandbox's TTL or idle timeout
// passes.
const (
	ExpireStop   = "stop"   // stop, keep the disk (resume later)
	ExpireDelete = "delete" // delete everything
)

// Sandbox is the server's record of one sandbox.
type Sandbox struct {
	ID     string       `json:"id"`
	TeamID string       `json:"team_id"`
	Spec   sandbox.Spec `json:"spec"`
	State  string       `json:"state"`
	// Size is the preset it was made with ("small", ...), or "".
	Size      string    `json:"size,omitempty"`
	CreatedAt time.Time `json:"created_at"`
	// StartedAt is when it last started (create or resume).
	StartedAt time.Time `json:"started_at"`
	// StoppedAt is when it last stopped (zero while running).
	StoppedAt time.Time `json:"stopped_at,omitempty"`
	// Deadline is when its TTL ends (zero: none).
	Deadline time.Time `json:"deadline,omitempty"`
	// IdleTimeout stops or deletes it after this long without activity.
	IdleTimeout time.Duration `json:"idle_timeout,omitempty"`
	// OnExpire is ExpireStop or ExpireDelete.
	OnExpire string `json:"on_expire"`
	// LastActivity is the last exec, stream, file operation or port
	// connection (not status polling).
	LastActivity time.Time `json:"last_activity"`
}

// SandboxFilter selects sandboxes of one team.
type SandboxFilter struct {
	TeamID string
	// State, when set, keeps only sandboxes in that state.
	State string
	// Labels keeps only sandboxes whose Spec.Labels has every pair.
	Labels map[string]string
	// After is a cursor: the id of the last sandbox of the previous page
	// (sandboxes are listed by creation, then id).
	After string
	// Limit caps the page; 0 means 100.
	Limit int
}

// Snapshot is a saved workspace (a tar file the server keeps).
type Snapshot struct {
	ID        string    `json:"id"`
	TeamID    string    `json:"team_id"`
	SandboxID string    `json:"sandbox_id"`
	Size      int64     `json:"size"`
	CreatedAt time.Time `json:"created_at"`
}

// Port is a sandbox port exposed through the server's proxy.
type Port struct {
	SandboxID string `json:"sandbox_id"`
	Port      int    `json:"port"`
	// Public ports need no token.
	Public bool `json:"public"`
	// Token must come with requests to a private port.
	Token     string    `json:"-"`
	CreatedAt time.Time `json:"created_at"`
}

// Usage is metered use of one sandbox over [Start, End).
type Usage struct {
	TeamID        string    `json:"team_id"`
	SandboxID     string    `json:"sandbox_id"`
	Start         time.Time `json:"start"`
	End           time.Time `json:"end"`
	CPUSeconds    float64   `json:"cpu_seconds"`     // CPU time used while running
	MemoryGiBSecs float64   `json:"memory_gib_secs"` // memory limit (GiB) x running seconds
	DiskGiBHours  float64   `json:"disk_gib_hours"`  // disk kept while stopped
	BytesIn       int64     `json:"bytes_in"`        // bytes into the sandbox through the API
	BytesOut      int64     `json:"bytes_out"`
}

// Run is an agent run the server holds (its API form is api.Run).
type Run struct {
	ID        string `json:"id"`
	TeamID    string `json:"team_id"`
	SandboxID string `json:"sandbox_id,omitempty"`
	Status    string `json:"status"`
	// Config is how the run was asked for (the server's JSON), kept to
	// rebuild the agent after a restart.
	Config json.RawMessage `json:"config"`
	// State is the harness's RunState JSON at the last turn boundary
	// (or interruption): what a resume, a follow-up or a restarted server
	// goes on from.
	State    json.RawMessage `json:"state,omitempty"`
	Input    string          `json:"input"`
	Messages int             `json:"messages"`
	Output   string          `json:"output,omitempty"`
	Error    string          `json:"error,omitempty"`
	// Usage is the tokens used so far (the server's JSON).
	Usage json.RawMessage `json:"usage,omitempty"`
	// LastEventID is the Seq of the run's latest event, never below that
	// of an event in the store: AppendRunEvents raises it and PutRun does
	// not lower it, so a server that crashed between the two numbers its
	// next events after the stored ones.
	LastEventID int64     `json:"last_event_id"`
	CreatedAt   time.Time `json:"created_at"`
	UpdatedAt   time.Time `json:"updated_at"`
	FinishedAt  time.Time `json:"finished_at,omitempty"`
}

// RunFilter selects runs of one team.
type RunFilter struct {
	TeamID string
	// Status, when set, keeps only runs in that status.
	Status string
	// After is a cursor: the id of the last run of the previous page.
	After string
	// Limit caps the page; 0 means 100.
	Limit int
}

// RunEvent is one event of a run's log: Seq counts from 1 per run, Data
// is the event's JSON.
type RunEvent struct {
	RunID string          `json:"run_id"`
	Seq   int64           `json:"seq"`
	Type  string          `json:"type"`
	Data  json.RawMessage `json:"data"`
}

// Secret is a named value of a team (a model API key). Value is sealed
// by the server before it is stored; the store never sees it in clear.
type Secret struct {
	TeamID    string    `json:"team_id"`
	Name      string    `json:"name"`
	Value     []byte    `json:"-"`
	UpdatedAt time.Time `json:"updated_at"`
}

// Store keeps the server's records. Implementations are safe for
// concurrent use and survive a crash at any point without losing a
// committed write.
type Store interface {
	// CreateTeam adds a team. ErrExist if the id is taken.
	CreateTeam(ctx context.Context, t Team) error
	GetTeam(ctx context.Context, id string) (Team, error)
	ListTeams(ctx context.Context) ([]Team, error)
	SetQuota(ctx context.Context, teamID string, q Quota) error

	// CreateKey adds a key. ErrNotFound if its team does not exist.
	CreateKey(ctx context.Context, k APIKey) error
	// KeyByHash finds an unrevoked key by the hash of its secret, and
	// records its use. ErrNotFound when there is none.
	KeyByHash(ctx context.Context, hash string) (APIKey, error)
	// ListKeys lists a team's keys ("" lists all), revoked ones too.
	ListKeys(ctx context.Context, teamID string) ([]APIKey, error)
	// RevokeKey revokes a key of the team ("" for any team).
	RevokeKey(ctx context.Context, teamID, id string) error

	// Ping checks that the store answers a cheap query within ctx (a
	// server's readiness). Its error may name the database's host: it is
	// for the log, not for a client.
	Ping(ctx context.Context) error

	// PutSandbox creates or replaces a sandbox record.
	PutSandbox(ctx context.Context, s Sandbox) error
	// GetSandbox returns a sandbox of the team ("" for any team):
	// ErrNotFound also when it belongs to another team.
	GetSandbox(ctx context.Context, teamID, id string) (Sandbox, error)
	// UpdateSandbox is a read-modify-write of a sandbox record of the
	// team ("" for any team) that no other writer, in this process or
	// another sharing the store, can interleave with: the record is read
	// and written in one transaction, so a peer's change is never lost
	// and a deleted record is never put back. change edits the record it
	// is given; it must do no I/O (writers wait while it runs) and may
	// run more than once (a retried transaction); the id and team may
	// not change (ErrInvalid). ErrNotFound if there is no such record;
	// change's error is returned (errors.Is finds it) and nothing is
	// written. It returns the record written.
	UpdateSandbox(ctx context.Context, teamID, id string, change func(*Sandbox) error) (Sandbox, error)
	// ListSandboxes returns a page of sandboxes and the cursor of the
	// next page ("" at the end). An empty TeamID lists every team's.
	ListSandboxes(ctx context.Context, f SandboxFilter) ([]Sandbox, string, error)
	// TouchSandbox records activity at t.
	TouchSandbox(ctx context.Context, id string, t time.Time) error
	// DeleteSandbox removes the record (and its ports). ErrNotFound if
	// none.
	DeleteSandbox(ctx context.Context, id string) error

	PutSnapshot(ctx context.Context, s Snapshot) error
	GetSnapshot(ctx context.Context, teamID, id string) (Snapshot, error)
	ListSnapshots(ctx context.Context, teamID string) ([]Snapshot, error)
	DeleteSnapshot(ctx context.Context, teamID, id string) error

	// PutPort exposes (or updates) a port of a sandbox.
	PutPort(ctx context.Context, p Port) error
	GetPort(ctx context.Context, sandboxID string, port int) (Port, error)
	ListPorts(ctx context.Context, sandboxID string) ([]Port, error)
	DeletePort(ctx context.Context, sandboxID string, port int) error

	// AddUsage records a metered interval.
	AddUsage(ctx context.Context, u Usage) error
	// UsageByTeam sums a team's usage per sandbox over [from, to).
	UsageByTeam(ctx context.Context, teamID string, from, to time.Time) ([]Usage, error)

	// PutRun creates or replaces a run record (its LastEventID only
	// rises). ErrNotFound if its team does not exist; ErrExist if the id
	// is another team's run.
	PutRun(ctx context.Context, r Run) error
	// GetRun returns a run of the team ("" for any team).
	GetRun(ctx context.Context, teamID, id string) (Run, error)
	// ListRuns returns a page of runs, newest first, and the cursor of
	// the next page ("" at the end).
	ListRuns(ctx context.Context, f RunFilter) ([]Run, string, error)
	// DeleteRun removes a run of the team and its events: ErrNotFound if
	// the team has none with this id.
	DeleteRun(ctx context.Context, teamID, id string) error
	// AppendRunEvents adds events to their runs' logs and raises the
	// runs' LastEventID to them; an event whose (run, seq) is already
	// there is ErrExist and nothing is added.
	AppendRunEvents(ctx context.Context, evs []RunEvent) error
	// RunEvents returns up to limit events of a run with Seq > after, in
	// order.
	RunEvents(ctx context.Context, runID string, after int64, limit int) ([]RunEvent, error)

	// PutSecret creates or replaces a team's secret.
	PutSecret(ctx context.Context, s Secret) error
	// GetSecret returns a secret of the team: ErrNotFound if none.
	GetSecret(ctx context.Context, teamID, name string) (Secret, error)
	// ListSecrets lists a team's secrets by name.
	ListSecrets(ctx context.Context, teamID string) ([]Secret, error)
	DeleteSecret(ctx context.Context, teamID, name string) error

	// Leaser elects one holder of a loop among processes sharing the
	// store.
	Leaser

	Close() error
}

// Leaser elects one holder of a named lease at a time among the
// processes that share a store: several `cove serve` replicas on one
// PostgreSQL run one lifecycle loop, the holder's. A holder renews its
// lease well before the ttl passes; a holder that dies loses it when the
// ttl passes, and another takes it.
type Leaser interface {
	// AcquireLease takes the lease name for holder until now+ttl, or
	// renews it, and reports whether holder holds it: true when it was
	// free, expired or already holder's; false when another holds it.
	AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error)
	// ReleaseLease gives the lease up if holder holds it, so a peer need
	// not wait for the ttl (a replica shutting down cleanly).
	ReleaseLease(ctx context.Context, name, holder string) error
}
