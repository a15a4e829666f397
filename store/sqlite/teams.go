package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"time"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

const teamCols = `id, name, quota_sandboxes, quota_cpus, quota_memory_bytes, created_at`

func scanTeam(row scanner) (store.Team, error) {
	var t store.Team
	var created sql.NullInt64
	err := row.Scan(&t.ID, &t.Name, &t.Quota.Sandboxes, &t.Quota.CPUs, &t.Quota.MemoryBytes, &created)
	t.CreatedAt = fromNanos(created)
	return t, err
}

// CreateTeam adds a team: ErrExist if the id is taken.
func (s *Store) CreateTeam(ctx context.Context, t store.Team) error {
	if t.ID == "" {
		return check.Invalid("team id is empty")
	}
	if err := check.Quota(t.Quota); err != nil {
		return err
	}
	if err := check.Time("team created_at", t.CreatedAt); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO teams (`+teamCols+`) VALUES (?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`,
			t.ID, t.Name, t.Quota.Sandboxes, t.Quota.CPUs, t.Quota.MemoryBytes, nanos(t.CreatedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return check.Exists("team " + t.ID)
		}
		return nil
	})
	return wrap(err, "creating team %s", t.ID)
}

// GetTeam returns a team: ErrNotFound if there is none.
func (s *Store) GetTeam(ctx context.Context, id string) (store.Team, error) {
	if id == "" {
		return store.Team{}, check.Invalid("team id is empty")
	}
	t, err := scanTeam(s.queryRow(ctx, `SELECT `+teamCols+` FROM teams WHERE id = ?`, id))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Team{}, check.NotFound("team " + id)
	}
	if err != nil {
		return store.Team{}, wrap(err, "getting team %s", id)
	}
	return t, nil
}

// ListTeams returns every team, oldest first.
func (s *Store) ListTeams(ctx context.Context) ([]store.Team, error) {
	rows, err := s.query(ctx, `SELECT `+teamCols+` FROM teams ORDER BY created_at, id`)
	if err != nil {
		return nil, wrap(err, "listing teams")
	}
	defer rows.Close()
	teams := []store.Team{}
	for rows.Next() {
		t, err := scanTeam(rows)
		if err != nil {
			return nil, wrap(err, "listing teams")
		}
		teams = append(teams, t)
	}
	return teams, wrap(rows.Err(), "listing teams")
}

// SetQuota replaces a team's quota: ErrNotFound if there is no such team.
func (s *Store) SetQuota(ctx context.Context, teamID string, q store.Quota) error {
	if teamID == "" {
		return check.Invalid("team id is empty")
	}
	if err := check.Quota(q); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE teams SET quota_sandboxes = ?, quota_cpus = ?, quota_memory_bytes = ? WHERE id = ?`,
			q.Sandboxes, q.CPUs, q.MemoryBytes, teamID)
		return mustChange(res, err, "team "+teamID)
	})
	return wrap(err, "setting the quota of team %s", teamID)
}

// mustChange turns an UPDATE or DELETE that matched no row into
// ErrNotFound for what.
func mustChange(res sql.Result, err error, what string) error {
	if err != nil {
		return err
	}
	n, err := res.RowsAffected()
	if err != nil {
		return err
	}
	if n == 0 {
		return check.NotFound(what)
	}
	return nil
}

// teamExists returns ErrNotFound if there is no team id. Writes check
// this first so the error names the team; the foreign key alone would
// only say that some constraint failed.
func teamExists(ctx context.Context, tx *sql.Tx, id string) error {
	var one int
	err := tx.QueryRowContext(ctx, `SELECT 1 FROM teams WHERE id = ?`, id).Scan(&one)
	if errors.Is(err, sql.ErrNoRows) {
		return check.NotFound("team " + id)
	}
	return err
}

// API keys.

const keyCols = `id, team_id, name, prefix, hash, admin, created_at, last_used_at, revoked_at`

func scanKey(row scanner) (store.APIKey, error) {
	var k store.APIKey
	var created, used, revoked sql.NullInt64
	err := row.Scan(&k.ID, &k.TeamID, &k.Name, &k.Prefix, &k.Hash, &k.Admin, &created, &used, &revoked)
	k.CreatedAt = fromNanos(created)
	k.LastUsedAt = fromNanosPtr(used)
	k.RevokedAt = fromNanosPtr(revoked)
	return k, err
}

// lastUsedEvery is how stale a key's last use may get before KeyByHash
// writes it again. KeyByHash runs on every authenticated request,
// status polls and proxied port traffic included; a write each time
// would queue every request behind the single writer and cost an fsync.
// The time is for people ("used 3 minutes ago"), so a minute is precise
// enough.
const lastUsedEvery = time.Minute

// CreateKey adds a key: ErrNotFound if its team does not exist, ErrExist
// if its id or its hash is taken.
func (s *Store) CreateKey(ctx context.Context, k store.APIKey) error {
	switch {
	case k.ID == "":
		return check.Invalid("api key id is empty")
	case k.TeamID == "":
		return check.Invalid("api key %s: team id is empty", k.ID)
	case k.Hash == "":
		return check.Invalid("api key %s: hash is empty", k.ID)
	}
	for _, c := range []struct {
		what string
		t    *time.Time
	}{{"created_at", &k.CreatedAt}, {"last_used_at", k.LastUsedAt}, {"revoked_at", k.RevokedAt}} {
		if c.t != nil {
			if err := check.Time("api key "+c.what, *c.t); err != nil {
				return err
			}
		}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := teamExists(ctx, tx, k.TeamID); err != nil {
			return err
		}
		// DO NOTHING on either unique column (id, hash).
		res, err := tx.ExecContext(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT DO NOTHING`,
			k.ID, k.TeamID, k.Name, k.Prefix, k.Hash, k.Admin, nanos(k.CreatedAt), nanosPtr(k.LastUsedAt), nanosPtr(k.RevokedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return check.Exists("api key " + k.ID + " (or one with the same secret)")
		}
		return nil
	})
	return wrap(err, "creating api key %s", k.ID)
}

// KeyByHash finds the unrevoked key with this hash and records its use,
// at most once a minute (lastUsedEvery). ErrNotFound when there is none.
// The error does not repeat the hash: it is derived from a secret.
func (s *Store) KeyByHash(ctx context.Context, hash string) (store.APIKey, error) {
	if hash == "" {
		return store.APIKey{}, check.Invalid("api key hash is empty")
	}
	k, err := scanKey(s.queryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = ? AND revoked_at IS NULL`, hash))
	if errors.Is(err, sql.ErrNoRows) {
		return store.APIKey{}, check.NotFound("api key")
	}
	if err != nil {
		return store.APIKey{}, wrap(err, "finding api key")
	}
	now := s.now().UTC()
	if k.LastUsedAt != nil {
		if d := now.Sub(*k.LastUsedAt); d >= 0 && d < lastUsedEvery {
			return k, nil
		}
	}
	// The condition repeats the check so that of many requests racing
	// with the same stale key, one writes and the rest change nothing
	// (and SQLite skips the fsync of a commit that changed no page).
	// A last use in the future (the clock went back) is overwritten.
	var updated int64
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET last_used_at = ?1
			WHERE id = ?2 AND (last_used_at IS NULL OR last_used_at <= ?3 OR last_used_at > ?1)`,
			now.UnixNano(), k.ID, now.Add(-lastUsedEvery).UnixNano())
		if err != nil {
			return err
		}
		updated, err = res.RowsAffected()
		return err
	})
	if err != nil {
		return store.APIKey{}, wrap(err, "recording the use of api key %s", k.ID)
	}
	if updated > 0 {
		k.LastUsedAt = &now
	}
	return k, nil
}

// ListKeys lists a team's keys ("" lists every team's), revoked ones too,
// oldest first.
func (s *Store) ListKeys(ctx context.Context, teamID string) ([]store.APIKey, error) {
	cond, args := teamClause(teamID)
	rows, err := s.query(ctx, `SELECT `+keyCols+` FROM api_keys WHERE 1`+cond+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, wrap(err, "listing api keys")
	}
	defer rows.Close()
	keys := []store.APIKey{}
	for rows.Next() {
		k, err := scanKey(rows)
		if err != nil {
			return nil, wrap(err, "listing api keys")
		}
		keys = append(keys, k)
	}
	return keys, wrap(rows.Err(), "listing api keys")
}

// RevokeKey revokes a key of the team ("" for any team): ErrNotFound if
// the team has no such key. Revoking a revoked key keeps the first
// revocation time.
func (s *Store) RevokeKey(ctx context.Context, teamID, id string) error {
	if id == "" {
		return check.Invalid("api key id is empty")
	}
	now := s.now().UTC()
	cond, args := teamClause(teamID)
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ?) WHERE id = ?`+cond,
			append([]any{now.UnixNano(), id}, args...)...)
		return mustChange(res, err, "api key "+id)
	})
	return wrap(err, "revoking api key %s", id)
}
