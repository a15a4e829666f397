package postgres

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

const teamCols = `id, name, quota_sandboxes, quota_cpus, quota_memory_bytes, created_at`

func scanTeam(row scanner) (store.Team, error) {
	var t store.Team
	var created *int64
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO teams (`+teamCols+`) VALUES ($1, $2, $3, $4, $5, $6)
			ON CONFLICT DO NOTHING`,
			t.ID, t.Name, t.Quota.Sandboxes, t.Quota.CPUs, t.Quota.MemoryBytes, nanos(t.CreatedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
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
	t, err := scanTeam(s.pool.QueryRow(ctx, `SELECT `+teamCols+` FROM teams WHERE id = $1`, id))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Team{}, check.NotFound("team " + id)
	}
	if err != nil {
		return store.Team{}, wrap(err, "getting team %s", id)
	}
	return t, nil
}

// ListTeams returns every team, oldest first.
func (s *Store) ListTeams(ctx context.Context) ([]store.Team, error) {
	rows, err := s.pool.Query(ctx, `SELECT `+teamCols+` FROM teams ORDER BY created_at, id`)
	if err != nil {
		return nil, wrap(err, "listing teams")
	}
	teams, err := collect(rows, scanTeam)
	return teams, wrap(err, "listing teams")
}

// collect scans every row with scan into a non-nil slice.
func collect[T any](rows pgx.Rows, scan func(scanner) (T, error)) ([]T, error) {
	defer rows.Close()
	out := []T{}
	for rows.Next() {
		v, err := scan(rows)
		if err != nil {
			return nil, err
		}
		out = append(out, v)
	}
	if err := rows.Err(); err != nil {
		return nil, err
	}
	return out, nil
}

// SetQuota replaces a team's quota: ErrNotFound if there is no such team.
func (s *Store) SetQuota(ctx context.Context, teamID string, q store.Quota) error {
	if teamID == "" {
		return check.Invalid("team id is empty")
	}
	if err := check.Quota(q); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE teams SET quota_sandboxes = $1, quota_cpus = $2, quota_memory_bytes = $3 WHERE id = $4`,
			q.Sandboxes, q.CPUs, q.MemoryBytes, teamID)
		return mustChange(tag, err, "team "+teamID)
	})
	return wrap(err, "setting the quota of team %s", teamID)
}

// API keys.

const keyCols = `id, team_id, name, prefix, hash, admin, created_at, last_used_at, revoked_at`

func scanKey(row scanner) (store.APIKey, error) {
	var k store.APIKey
	var created, used, revoked *int64
	err := row.Scan(&k.ID, &k.TeamID, &k.Name, &k.Prefix, &k.Hash, &k.Admin, &created, &used, &revoked)
	k.CreatedAt = fromNanos(created)
	k.LastUsedAt = fromNanosPtr(used)
	k.RevokedAt = fromNanosPtr(revoked)
	return k, err
}

// lastUsedEvery is how stale a key's last use may get before KeyByHash
// writes it again (see store/sqlite: a write per request would cost
// every request a commit).
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		if err := teamExists(ctx, tx, k.TeamID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO api_keys (`+keyCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)
			ON CONFLICT DO NOTHING`,
			k.ID, k.TeamID, k.Name, k.Prefix, k.Hash, k.Admin, nanos(k.CreatedAt), nanosPtr(k.LastUsedAt), nanosPtr(k.RevokedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
			return check.Exists("api key " + k.ID + " (or one with the same secret)")
		}
		return nil
	})
	return wrap(err, "creating api key %s", k.ID)
}

// KeyByHash finds the unrevoked key with this hash and records its use,
// at most once a minute. ErrNotFound when there is none. The error does
// not repeat the hash: it is derived from a secret.
func (s *Store) KeyByHash(ctx context.Context, hash string) (store.APIKey, error) {
	if hash == "" {
		return store.APIKey{}, check.Invalid("api key hash is empty")
	}
	k, err := scanKey(s.pool.QueryRow(ctx, `SELECT `+keyCols+` FROM api_keys WHERE hash = $1 AND revoked_at IS NULL`, hash))
	if errors.Is(err, pgx.ErrNoRows) {
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
	// The condition repeats the check: of many requests (on any replica)
	// racing with the same stale key, one writes. A last use in the
	// future (the clock went back) is overwritten.
	var updated int64
	err = s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE api_keys SET last_used_at = $1
			WHERE id = $2 AND (last_used_at IS NULL OR last_used_at <= $3 OR last_used_at > $1)`,
			now.UnixNano(), k.ID, now.Add(-lastUsedEvery).UnixNano())
		updated = tag.RowsAffected()
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
	var a args
	cond := a.teamClause(teamID)
	rows, err := s.pool.Query(ctx, `SELECT `+keyCols+` FROM api_keys WHERE true`+cond+` ORDER BY created_at, id`, a...)
	if err != nil {
		return nil, wrap(err, "listing api keys")
	}
	keys, err := collect(rows, scanKey)
	return keys, wrap(err, "listing api keys")
}

// RevokeKey revokes a key of the team ("" for any team): ErrNotFound if
// the team has no such key. Revoking a revoked key keeps the first
// revocation time.
func (s *Store) RevokeKey(ctx context.Context, teamID, id string) error {
	if id == "" {
		return check.Invalid("api key id is empty")
	}
	now := s.now().UTC()
	err := s.write(ctx, func(tx pgx.Tx) error {
		var a args
		q := `UPDATE api_keys SET revoked_at = coalesce(revoked_at, ` + a.add(now.UnixNano()) + `) WHERE id = ` + a.add(id) + a.teamClause(teamID)
		tag, err := tx.Exec(ctx, q, a...)
		return mustChange(tag, err, "api key "+id)
	})
	return wrap(err, "revoking api key %s", id)
}
