package postgres

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

const sandboxCols = `id, team_id, spec, state, size, created_at, started_at, stopped_at, deadline, idle_timeout, on_expire, last_activity`

func scanSandbox(row scanner) (store.Sandbox, error) {
	var sb store.Sandbox
	var spec string
	var created, started, stopped, deadline, active *int64
	var idle int64
	if err := row.Scan(&sb.ID, &sb.TeamID, &spec, &sb.State, &sb.Size, &created, &started, &stopped, &deadline, &idle, &sb.OnExpire, &active); err != nil {
		return store.Sandbox{}, err
	}
	if err := json.Unmarshal([]byte(spec), &sb.Spec); err != nil {
		return store.Sandbox{}, fmt.Errorf("decoding the spec of sandbox %s: %w", sb.ID, err)
	}
	sb.CreatedAt = fromNanos(created)
	sb.StartedAt = fromNanos(started)
	sb.StoppedAt = fromNanos(stopped)
	sb.Deadline = fromNanos(deadline)
	sb.IdleTimeout = time.Duration(idle)
	sb.LastActivity = fromNanos(active)
	return sb, nil
}

// PutSandbox creates or replaces a sandbox record. ErrNotFound if its
// team does not exist; ErrExist if the id belongs to a sandbox of
// another team. The upsert locks the sandbox's row until the commit, so
// two replicas putting the same sandbox rewrite its labels one after the
// other: the labels always match the spec that won.
func (s *Store) PutSandbox(ctx context.Context, sb store.Sandbox) error {
	if err := check.Sandbox(sb); err != nil {
		return err
	}
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return check.Invalid("sandbox %s: encoding its spec: %v", sb.ID, err)
	}
	err = s.write(ctx, func(tx pgx.Tx) error { return putSandbox(ctx, tx, sb, spec) })
	return wrap(err, "putting sandbox %s", sb.ID)
}

// putSandbox writes a checked record and its label copy in tx.
func putSandbox(ctx context.Context, tx pgx.Tx, sb store.Sandbox, spec []byte) error {
	if err := teamExists(ctx, tx, sb.TeamID); err != nil {
		return err
	}
	tag, err := tx.Exec(ctx, `INSERT INTO sandboxes (`+sandboxCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
		ON CONFLICT (id) DO UPDATE SET
			spec = excluded.spec, state = excluded.state, size = excluded.size,
			created_at = excluded.created_at, started_at = excluded.started_at,
			stopped_at = excluded.stopped_at, deadline = excluded.deadline,
			idle_timeout = excluded.idle_timeout, on_expire = excluded.on_expire,
			last_activity = excluded.last_activity
		WHERE sandboxes.team_id = excluded.team_id`,
		sb.ID, sb.TeamID, string(spec), sb.State, sb.Size, nanos(sb.CreatedAt), nanos(sb.StartedAt),
		nanos(sb.StoppedAt), nanos(sb.Deadline), int64(sb.IdleTimeout), sb.OnExpire, nanos(sb.LastActivity))
	if err != nil {
		return err
	}
	if tag.RowsAffected() == 0 {
		return check.Exists("sandbox " + sb.ID)
	}
	if _, err := tx.Exec(ctx, `DELETE FROM sandbox_labels WHERE sandbox_id = $1`, sb.ID); err != nil {
		return err
	}
	if len(sb.Spec.Labels) == 0 {
		return nil
	}
	keys := slices.Sorted(maps.Keys(sb.Spec.Labels))
	vals := make([]string, len(keys))
	for i, k := range keys {
		vals[i] = sb.Spec.Labels[k]
	}
	_, err = tx.Exec(ctx, `INSERT INTO sandbox_labels (sandbox_id, key, value)
		SELECT $1, k, v FROM unnest($2::text[], $3::text[]) AS l (k, v)`, sb.ID, keys, vals)
	return err
}

// UpdateSandbox is a read-modify-write of a sandbox record of the team
// ("" for any team) that no other writer, in this process or another,
// can interleave with: the record is read with its row locked (SELECT
// ... FOR UPDATE), change edits it, and it is written in the same
// transaction. ErrNotFound if there is none; change's error is returned
// as it is and nothing is written. change must only edit the record (no
// I/O: the row stays locked while it runs) and may run more than once
// (a transaction retried after a deadlock). The id and team may not
// change. It returns the record written.
func (s *Store) UpdateSandbox(ctx context.Context, teamID, id string, change func(*store.Sandbox) error) (store.Sandbox, error) {
	if id == "" {
		return store.Sandbox{}, check.Invalid("sandbox id is empty")
	}
	var out store.Sandbox
	err := s.write(ctx, func(tx pgx.Tx) error {
		a := args{id}
		sb, err := scanSandbox(tx.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = $1`+a.teamClause(teamID)+` FOR UPDATE`, a...))
		if errors.Is(err, pgx.ErrNoRows) {
			return check.NotFound("sandbox " + id)
		}
		if err != nil {
			return err
		}
		team := sb.TeamID
		if err := change(&sb); err != nil {
			return err
		}
		spec, err := checkUpdate(sb, id, team)
		if err != nil {
			return err
		}
		out = sb
		return putSandbox(ctx, tx, sb, spec)
	})
	if err != nil {
		return store.Sandbox{}, wrap(err, "updating sandbox %s", id)
	}
	return out, nil
}

// checkUpdate checks a record UpdateSandbox's change made, and encodes
// its spec.
func checkUpdate(sb store.Sandbox, id, team string) ([]byte, error) {
	if sb.ID != id || sb.TeamID != team {
		return nil, check.Invalid("sandbox %s: an update may not change its id or team", id)
	}
	if err := check.Sandbox(sb); err != nil {
		return nil, err
	}
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return nil, check.Invalid("sandbox %s: encoding its spec: %v", sb.ID, err)
	}
	return spec, nil
}

// GetSandbox returns a sandbox of the team ("" for any team):
// ErrNotFound also when it belongs to another team.
func (s *Store) GetSandbox(ctx context.Context, teamID, id string) (store.Sandbox, error) {
	if id == "" {
		return store.Sandbox{}, check.Invalid("sandbox id is empty")
	}
	a := args{id}
	sb, err := scanSandbox(s.pool.QueryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = $1`+a.teamClause(teamID), a...))
	if errors.Is(err, pgx.ErrNoRows) {
		return store.Sandbox{}, check.NotFound("sandbox " + id)
	}
	if err != nil {
		return store.Sandbox{}, wrap(err, "getting sandbox %s", id)
	}
	return sb, nil
}

// ListSandboxes returns a page of sandboxes, ordered by creation time
// then id, and the cursor of the next page ("" at the end); as
// store/sqlite's, a cursor may name a sandbox deleted in the last day.
func (s *Store) ListSandboxes(ctx context.Context, f store.SandboxFilter) ([]store.Sandbox, string, error) {
	limit, err := check.PageLimit(f.Limit)
	if err != nil {
		return nil, "", err
	}
	if f.State != "" {
		if err := check.State(f.State); err != nil {
			return nil, "", err
		}
	}
	var page []store.Sandbox
	var next string
	// One snapshot (repeatable read): the cursor's place and the page
	// agree.
	err = pgx.BeginTxFunc(ctx, s.pool, pgx.TxOptions{IsoLevel: pgx.RepeatableRead, AccessMode: pgx.ReadOnly}, func(tx pgx.Tx) error {
		var err error
		page, next, err = listSandboxes(ctx, tx, f, limit)
		return err
	})
	if err != nil {
		return nil, "", wrap(err, "listing sandboxes")
	}
	return page, next, nil
}

func listSandboxes(ctx context.Context, tx pgx.Tx, f store.SandboxFilter, limit int) ([]store.Sandbox, string, error) {
	var q strings.Builder
	var a args
	q.WriteString(`SELECT ` + sandboxCols + ` FROM sandboxes WHERE true`)
	q.WriteString(a.teamClause(f.TeamID))
	if f.State != "" {
		q.WriteString(` AND state = ` + a.add(f.State))
	}
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		q.WriteString(` AND id IN (SELECT sandbox_id FROM sandbox_labels WHERE key = ` + a.add(k) + ` AND value = ` + a.add(f.Labels[k]) + `)`)
	}
	if f.After != "" {
		created, err := cursorPlace(ctx, tx, f.After, f.TeamID)
		if err != nil {
			return nil, "", err
		}
		q.WriteString(` AND (created_at, id) > (` + a.add(created) + `, ` + a.add(f.After) + `)`)
	}
	q.WriteString(` ORDER BY created_at, id LIMIT ` + a.add(limit+1))
	rows, err := tx.Query(ctx, q.String(), a...)
	if err != nil {
		return nil, "", err
	}
	page, err := collect(rows, scanSandbox)
	if err != nil {
		return nil, "", err
	}
	if len(page) <= limit {
		return page, "", nil
	}
	page = page[:limit]
	return page, page[limit-1].ID, nil
}

// cursorPlace is the creation time of the sandbox a page cursor names,
// live or deleted in the last day, of the team ("" any).
func cursorPlace(ctx context.Context, tx pgx.Tx, after, teamID string) (int64, error) {
	a := args{after}
	cond := a.teamClause(teamID)
	var created int64
	err := tx.QueryRow(ctx, `SELECT created_at FROM sandboxes WHERE id = $1`+cond, a...).Scan(&created)
	if errors.Is(err, pgx.ErrNoRows) {
		err = tx.QueryRow(ctx, `SELECT created_at FROM deleted_sandboxes WHERE id = $1`+cond, a...).Scan(&created)
	}
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, check.Invalid("page cursor %q is not a sandbox, nor one deleted in the last %v: list again from the start", after, keepDeleted)
	}
	return created, err
}

// touchEvery: see store/sqlite. A touch within a second of the recorded
// activity is not written.
const touchEvery = time.Second

// TouchSandbox records activity at t: ErrNotFound if there is no such
// sandbox. LastActivity never moves back.
func (s *Store) TouchSandbox(ctx context.Context, id string, t time.Time) error {
	switch {
	case id == "":
		return check.Invalid("sandbox id is empty")
	case t.IsZero():
		return check.Invalid("sandbox %s: activity time is not set", id)
	}
	if err := check.Time("sandbox "+id+" activity", t); err != nil {
		return err
	}
	var last *int64
	err := s.pool.QueryRow(ctx, `SELECT last_activity FROM sandboxes WHERE id = $1`, id).Scan(&last)
	if errors.Is(err, pgx.ErrNoRows) {
		return check.NotFound("sandbox " + id)
	}
	if err != nil {
		return wrap(err, "touching sandbox %s", id)
	}
	if last != nil && t.UnixNano()-*last < int64(touchEvery) {
		return nil
	}
	err = s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE sandboxes SET last_activity = $1
			WHERE id = $2 AND (last_activity IS NULL OR last_activity < $1)`, t.UnixNano(), id)
		if err != nil || tag.RowsAffected() > 0 {
			return err
		}
		var one int
		err = tx.QueryRow(ctx, `SELECT 1 FROM sandboxes WHERE id = $1`, id).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return check.NotFound("sandbox " + id)
		}
		return err
	})
	return wrap(err, "touching sandbox %s", id)
}

// keepDeleted is how long a deleted sandbox's place in the listing order
// is kept, for page cursors that name it.
const keepDeleted = 24 * time.Hour

// DeleteSandbox removes the record with its ports and labels:
// ErrNotFound if there is none.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	if id == "" {
		return check.Invalid("sandbox id is empty")
	}
	now := s.now().UnixNano()
	err := s.write(ctx, func(tx pgx.Tx) error {
		var teamID string
		var created int64
		err := tx.QueryRow(ctx, `DELETE FROM sandboxes WHERE id = $1 RETURNING team_id, created_at`, id).Scan(&teamID, &created)
		if errors.Is(err, pgx.ErrNoRows) {
			return check.NotFound("sandbox " + id)
		}
		if err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `INSERT INTO deleted_sandboxes (id, team_id, created_at, deleted_at) VALUES ($1, $2, $3, $4)
			ON CONFLICT (id) DO UPDATE SET
				team_id = excluded.team_id, created_at = excluded.created_at, deleted_at = excluded.deleted_at`,
			id, teamID, created, now); err != nil {
			return err
		}
		// Pruned here, where they are made, so they never pile up.
		_, err = tx.Exec(ctx, `DELETE FROM deleted_sandboxes WHERE deleted_at < $1`, now-int64(keepDeleted))
		return err
	})
	return wrap(err, "deleting sandbox %s", id)
}
