package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"
)

// migrations are the schema, as steps applied in order, each once; the
// number of steps applied is the schema's version. Only ever append: a
// released step may already have run on someone's database, so a change
// to it would never reach them. To change a table, add a step.
var migrations = []string{
	// 1: the first schema. Times are unix nanoseconds UTC, NULL for none
	// (see the package doc). Tables are STRICT so a wrong type is an error,
	// not a silent conversion.
	`
CREATE TABLE teams (
	id                 TEXT PRIMARY KEY,
	name               TEXT NOT NULL,
	quota_sandboxes    INTEGER NOT NULL,
	quota_cpus         REAL NOT NULL,
	quota_memory_bytes INTEGER NOT NULL,
	created_at         INTEGER
) STRICT;

CREATE TABLE api_keys (
	id           TEXT PRIMARY KEY,
	team_id      TEXT NOT NULL REFERENCES teams (id),
	name         TEXT NOT NULL,
	prefix       TEXT NOT NULL,
	hash         TEXT NOT NULL UNIQUE,
	admin        INTEGER NOT NULL,
	created_at   INTEGER,
	last_used_at INTEGER,
	revoked_at   INTEGER
) STRICT;
CREATE INDEX api_keys_by_team ON api_keys (team_id, created_at, id);

CREATE TABLE sandboxes (
	id            TEXT PRIMARY KEY,
	team_id       TEXT NOT NULL REFERENCES teams (id),
	spec          TEXT NOT NULL, -- sandbox.Spec as JSON
	state         TEXT NOT NULL CHECK (state IN ('running', 'stopped')),
	size          TEXT NOT NULL,
	created_at    INTEGER NOT NULL, -- NOT NULL: pages are ordered by it
	started_at    INTEGER,
	stopped_at    INTEGER,
	deadline      INTEGER,
	idle_timeout  INTEGER NOT NULL, -- nanoseconds
	on_expire     TEXT NOT NULL,
	last_activity INTEGER
) STRICT;
-- Pages are (created_at, id) ranges, of one team or of all.
CREATE INDEX sandboxes_by_team ON sandboxes (team_id, created_at, id);
CREATE INDEX sandboxes_by_time ON sandboxes (created_at, id);

-- A copy of each sandbox's Spec.Labels (the spec stays the truth), so
-- that a label filter is an index lookup, not a JSON parse of every spec.
CREATE TABLE sandbox_labels (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	key        TEXT NOT NULL,
	value      TEXT NOT NULL,
	PRIMARY KEY (sandbox_id, key)
) STRICT, WITHOUT ROWID;
CREATE INDEX sandbox_labels_by_pair ON sandbox_labels (key, value, sandbox_id);

-- sandbox_id is not a foreign key: a snapshot outlives its sandbox (a new
-- sandbox starts from it).
CREATE TABLE snapshots (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL REFERENCES teams (id),
	sandbox_id TEXT NOT NULL,
	size       INTEGER NOT NULL,
	created_at INTEGER
) STRICT;
CREATE INDEX snapshots_by_team ON snapshots (team_id, created_at, id);

CREATE TABLE ports (
	sandbox_id TEXT NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
	public     INTEGER NOT NULL,
	token      TEXT NOT NULL,
	created_at INTEGER,
	PRIMARY KEY (sandbox_id, port)
) STRICT;

-- sandbox_id is not a foreign key: usage is billed after the sandbox is
-- gone.
CREATE TABLE usage (
	id              INTEGER PRIMARY KEY,
	team_id         TEXT NOT NULL REFERENCES teams (id),
	sandbox_id      TEXT NOT NULL,
	start_at        INTEGER NOT NULL,
	end_at          INTEGER NOT NULL CHECK (end_at > start_at),
	cpu_seconds     REAL NOT NULL,
	memory_gib_secs REAL NOT NULL,
	disk_gib_hours  REAL NOT NULL,
	bytes_in        INTEGER NOT NULL,
	bytes_out       INTEGER NOT NULL
) STRICT;
-- A range query keeps intervals ending after its start; ranges are mostly
-- recent, so this reads the tail of the index.
CREATE INDEX usage_by_team ON usage (team_id, end_at);
`,

	// 2: where deleted sandboxes were in the listing order, so that a page
	// cursor naming one still says where the next page starts. The
	// server's reconciliation deletes records as it pages through them,
	// the last of a page included.
	`
CREATE TABLE deleted_sandboxes (
	id         TEXT PRIMARY KEY,
	team_id    TEXT NOT NULL,
	created_at INTEGER NOT NULL,
	deleted_at INTEGER NOT NULL
) STRICT;
CREATE INDEX deleted_sandboxes_by_age ON deleted_sandboxes (deleted_at);
`,

	// 3: agent runs, their event logs (replayed to reconnecting clients)
	// and team secrets (model API keys, sealed by the server). A run's
	// sandbox is not a foreign key: the sandbox may be deleted while the
	// run's record and log stay readable.
	`
CREATE TABLE runs (
	id            TEXT PRIMARY KEY,
	team_id       TEXT NOT NULL REFERENCES teams (id),
	sandbox_id    TEXT NOT NULL,
	status        TEXT NOT NULL,
	config        TEXT NOT NULL,
	state         TEXT,
	input         TEXT NOT NULL,
	messages      INTEGER NOT NULL,
	output        TEXT NOT NULL,
	error         TEXT NOT NULL,
	usage         TEXT,
	last_event_id INTEGER NOT NULL,
	created_at    INTEGER NOT NULL,
	updated_at    INTEGER NOT NULL,
	finished_at   INTEGER
) STRICT;
CREATE INDEX runs_by_team ON runs (team_id, created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status);
CREATE TABLE run_events (
	run_id TEXT NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	seq    INTEGER NOT NULL,
	type   TEXT NOT NULL,
	data   TEXT NOT NULL,
	PRIMARY KEY (run_id, seq)
) STRICT, WITHOUT ROWID;
CREATE TABLE secrets (
	team_id    TEXT NOT NULL REFERENCES teams (id),
	name       TEXT NOT NULL,
	value      BLOB NOT NULL,
	updated_at INTEGER NOT NULL,
	PRIMARY KEY (team_id, name)
) STRICT;
`,

	// 4: leases (store.Leaser), so processes sharing the file elect one
	// holder of a loop. expires_at is SQLite's clock (the host's: every
	// process on one file is on one host), in unix nanoseconds.
	`
CREATE TABLE leases (
	name       TEXT PRIMARY KEY,
	holder     TEXT NOT NULL,
	expires_at INTEGER NOT NULL
) STRICT;
`,

	// 5: idempotency keys (store.Idempotency): what a create with a key
	// made, so a retry gets it again. held_until is SQLite's clock (as
	// leases'); expires_at the store's (IdempotencyKeyTTL after the
	// claim). result_id is '' until the request finishes.
	`
CREATE TABLE idempotency_keys (
	team_id      TEXT NOT NULL,
	key          TEXT NOT NULL,
	request_hash TEXT NOT NULL,
	holder       TEXT NOT NULL,
	result_id    TEXT NOT NULL,
	held_until   INTEGER NOT NULL,
	expires_at   INTEGER NOT NULL,
	PRIMARY KEY (team_id, key)
) STRICT, WITHOUT ROWID;
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
`,
}

// errNewerSchema: the database was written by a newer cove. Opening it
// anyway could misread its rows or break the newer cove's invariants.
var errNewerSchema = errors.New("database schema is newer than this cove")

// migrate applies the steps the database has not had yet, all in one
// transaction: a failed step leaves the database as it was. The
// transaction begins IMMEDIATE (the writer's _txlock), so two processes
// opening the same old file migrate one after the other, and the second
// finds nothing left to do.
func migrate(ctx context.Context, db *sql.DB, steps []string) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	defer tx.Rollback()
	if _, err := tx.ExecContext(ctx, `CREATE TABLE IF NOT EXISTS schema_version (
		version    INTEGER PRIMARY KEY,
		applied_at INTEGER NOT NULL
	) STRICT`); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	var v int
	if err := tx.QueryRowContext(ctx, `SELECT coalesce(max(version), 0) FROM schema_version`).Scan(&v); err != nil {
		return fmt.Errorf("migrating: reading the schema version: %w", err)
	}
	if v > len(steps) {
		return fmt.Errorf("%w: the database is at schema version %d, this cove knows versions up to %d; run a newer cove, or restore a backup made by this one", errNewerSchema, v, len(steps))
	}
	for i := v; i < len(steps); i++ {
		if _, err := tx.ExecContext(ctx, steps[i]); err != nil {
			return fmt.Errorf("migrating to schema version %d: %w", i+1, err)
		}
		if _, err := tx.ExecContext(ctx, `INSERT INTO schema_version (version, applied_at) VALUES (?, ?)`, i+1, time.Now().UnixNano()); err != nil {
			return fmt.Errorf("migrating to schema version %d: %w", i+1, err)
		}
	}
	if err := tx.Commit(); err != nil {
		return fmt.Errorf("migrating: %w", err)
	}
	return nil
}
