package postgres

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// migrations are the schema, as steps applied in order, each once; the
// number of steps applied is the schema's version. Only ever append.
var migrations = []string{
	// 1: the schema of store/sqlite's versions 1 to 4 at once. Times are
	// unix nanoseconds UTC, NULL for none.
	`
CREATE TABLE teams (
	id                 TEXT COLLATE "C" PRIMARY KEY,
	name               TEXT NOT NULL,
	quota_sandboxes    BIGINT NOT NULL,
	quota_cpus         DOUBLE PRECISION NOT NULL,
	quota_memory_bytes BIGINT NOT NULL,
	created_at         BIGINT
);

CREATE TABLE api_keys (
	id           TEXT COLLATE "C" PRIMARY KEY,
	team_id      TEXT COLLATE "C" NOT NULL REFERENCES teams (id),
	name         TEXT NOT NULL,
	prefix       TEXT NOT NULL,
	hash         TEXT NOT NULL UNIQUE,
	admin        BOOLEAN NOT NULL,
	created_at   BIGINT,
	last_used_at BIGINT,
	revoked_at   BIGINT
);
CREATE INDEX api_keys_by_team ON api_keys (team_id, created_at, id);

CREATE TABLE sandboxes (
	id            TEXT COLLATE "C" PRIMARY KEY,
	team_id       TEXT COLLATE "C" NOT NULL REFERENCES teams (id),
	spec          TEXT NOT NULL, -- sandbox.Spec as JSON
	state         TEXT NOT NULL CHECK (state IN ('running', 'stopped')),
	size          TEXT NOT NULL,
	created_at    BIGINT NOT NULL,
	started_at    BIGINT,
	stopped_at    BIGINT,
	deadline      BIGINT,
	idle_timeout  BIGINT NOT NULL,
	on_expire     TEXT NOT NULL,
	last_activity BIGINT
);
CREATE INDEX sandboxes_by_team ON sandboxes (team_id, created_at, id);
CREATE INDEX sandboxes_by_time ON sandboxes (created_at, id);

CREATE TABLE sandbox_labels (
	sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	key        TEXT COLLATE "C" NOT NULL,
	value      TEXT COLLATE "C" NOT NULL,
	PRIMARY KEY (sandbox_id, key)
);
CREATE INDEX sandbox_labels_by_pair ON sandbox_labels (key, value, sandbox_id);

CREATE TABLE deleted_sandboxes (
	id         TEXT COLLATE "C" PRIMARY KEY,
	team_id    TEXT COLLATE "C" NOT NULL,
	created_at BIGINT NOT NULL,
	deleted_at BIGINT NOT NULL
);
CREATE INDEX deleted_sandboxes_by_age ON deleted_sandboxes (deleted_at);

CREATE TABLE snapshots (
	id         TEXT COLLATE "C" PRIMARY KEY,
	team_id    TEXT COLLATE "C" NOT NULL REFERENCES teams (id),
	sandbox_id TEXT COLLATE "C" NOT NULL,
	size       BIGINT NOT NULL,
	created_at BIGINT
);
CREATE INDEX snapshots_by_team ON snapshots (team_id, created_at, id);

CREATE TABLE ports (
	sandbox_id TEXT COLLATE "C" NOT NULL REFERENCES sandboxes (id) ON DELETE CASCADE,
	port       INTEGER NOT NULL CHECK (port BETWEEN 1 AND 65535),
	public     BOOLEAN NOT NULL,
	token      TEXT NOT NULL,
	created_at BIGINT,
	PRIMARY KEY (sandbox_id, port)
);

CREATE TABLE usage (
	id              BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
	team_id         TEXT COLLATE "C" NOT NULL REFERENCES teams (id),
	sandbox_id      TEXT COLLATE "C" NOT NULL,
	start_at        BIGINT NOT NULL,
	end_at          BIGINT NOT NULL CHECK (end_at > start_at),
	cpu_seconds     DOUBLE PRECISION NOT NULL,
	memory_gib_secs DOUBLE PRECISION NOT NULL,
	disk_gib_hours  DOUBLE PRECISION NOT NULL,
	bytes_in        BIGINT NOT NULL,
	bytes_out       BIGINT NOT NULL
);
CREATE INDEX usage_by_team ON usage (team_id, end_at);

CREATE TABLE runs (
	id            TEXT COLLATE "C" PRIMARY KEY,
	team_id       TEXT COLLATE "C" NOT NULL REFERENCES teams (id),
	sandbox_id    TEXT NOT NULL,
	status        TEXT NOT NULL,
	config        TEXT NOT NULL,
	state         TEXT,
	input         TEXT NOT NULL,
	messages      BIGINT NOT NULL,
	output        TEXT NOT NULL,
	error         TEXT NOT NULL,
	usage         TEXT,
	last_event_id BIGINT NOT NULL,
	created_at    BIGINT NOT NULL,
	updated_at    BIGINT NOT NULL,
	finished_at   BIGINT
);
CREATE INDEX runs_by_team ON runs (team_id, created_at DESC, id DESC);
CREATE INDEX runs_by_status ON runs (status);
CREATE TABLE run_events (
	run_id TEXT COLLATE "C" NOT NULL REFERENCES runs (id) ON DELETE CASCADE,
	seq    BIGINT NOT NULL,
	type   TEXT NOT NULL,
	data   TEXT NOT NULL,
	PRIMARY KEY (run_id, seq)
);
CREATE TABLE secrets (
	team_id    TEXT COLLATE "C" NOT NULL REFERENCES teams (id),
	name       TEXT COLLATE "C" NOT NULL,
	value      BYTEA NOT NULL,
	updated_at BIGINT NOT NULL,
	PRIMARY KEY (team_id, name)
);

-- Leases (store.Leaser): expires_at is the database's clock, in unix
-- nanoseconds.
CREATE TABLE leases (
	name       TEXT COLLATE "C" PRIMARY KEY,
	holder     TEXT NOT NULL,
	expires_at BIGINT NOT NULL
);
`,

	// 2: idempotency keys (store.Idempotency), as store/sqlite's version
	// 5: held_until is the database's clock, expires_at the store's.
	`
CREATE TABLE idempotency_keys (
	team_id      TEXT COLLATE "C" NOT NULL,
	key          TEXT COLLATE "C" NOT NULL,
	request_hash TEXT NOT NULL,
	holder       TEXT NOT NULL,
	result_id    TEXT NOT NULL,
	held_until   BIGINT NOT NULL,
	expires_at   BIGINT NOT NULL,
	PRIMARY KEY (team_id, key)
);
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys (expires_at);
`,

	// 3: blobs (store.Blobs): snapshot tars in the database, in chunks,
	// so every replica finds them. A blob's row is written with its
	// chunks in one transaction.
	`
CREATE TABLE blobs (
	name       TEXT COLLATE "C" PRIMARY KEY,
	size       BIGINT NOT NULL,
	chunks     INTEGER NOT NULL,
	created_at BIGINT NOT NULL
);
CREATE TABLE blob_chunks (
	name TEXT COLLATE "C" NOT NULL REFERENCES blobs (name) ON DELETE CASCADE,
	seq  INTEGER NOT NULL,
	data BYTEA NOT NULL,
	PRIMARY KEY (name, seq)
);
`,
}

// errNewerSchema: the database was written by a newer cove.
var errNewerSchema = errors.New("database schema is newer than this cove")

// migrateLock is the advisory lock key that serializes migrations of
// replicas starting at once ("cove" in ASCII).
const migrateLock = 0x636f7665

// migrate applies the steps the database has not had yet, all in one
// transaction under an advisory lock: replicas that open the database
// at once migrate one after the other, and the later ones find nothing
// left to do. A failed step leaves the database as it was.
func migrate(ctx context.Context, pool *pgxpool.Pool, steps []string) error {
	return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, `SELECT pg_advisory_xact_lock($1)`, int64(migrateLock)); err != nil {
			return fmt.Errorf("migrating: taking the migration lock: %w", err)
		}
		if _, err := tx.Exec(ctx, `CREATE TABLE IF NOT EXISTS schema_migrations (
			version    INTEGER PRIMARY KEY,
			applied_at BIGINT NOT NULL
		)`); err != nil {
			return fmt.Errorf("migrating: %w", err)
		}
		var v int
		if err := tx.QueryRow(ctx, `SELECT coalesce(max(version), 0) FROM schema_migrations`).Scan(&v); err != nil {
			return fmt.Errorf("migrating: reading the schema version: %w", err)
		}
		if v > len(steps) {
			return fmt.Errorf("%w: the database is at schema version %d, this cove knows versions up to %d; run a newer cove, or restore a backup made by this one", errNewerSchema, v, len(steps))
		}
		for i := v; i < len(steps); i++ {
			if _, err := tx.Exec(ctx, steps[i]); err != nil {
				return fmt.Errorf("migrating to schema version %d: %w", i+1, err)
			}
			if _, err := tx.Exec(ctx, `INSERT INTO schema_migrations (version, applied_at) VALUES ($1, $2)`, i+1, time.Now().UnixNano()); err != nil {
				return fmt.Errorf("migrating to schema version %d: %w", i+1, err)
			}
		}
		return nil
	})
}
