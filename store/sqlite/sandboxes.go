package sqlite

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

const sandboxCols = `id, team_id, spec, state, size, created_at, started_at, stopped_at, deadline, idle_timeout, on_expire, last_activity`

func scanSandbox(row scanner) (store.Sandbox, error) {
	var sb store.Sandbox
	var spec string
	var created, started, stopped, deadline, active sql.NullInt64
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
// another team, which a record may never move to.
func (s *Store) PutSandbox(ctx context.Context, sb store.Sandbox) error {
	if err := check.Sandbox(sb); err != nil {
		return err
	}
	spec, err := json.Marshal(sb.Spec)
	if err != nil {
		return check.Invalid("sandbox %s: encoding its spec: %v", sb.ID, err)
	}
	err = s.write(ctx, func(tx *sql.Tx) error { return putSandbox(ctx, tx, sb, spec) })
	return wrap(err, "putting sandbox %s", sb.ID)
}

// putSandbox writes a checked record and its label copy in tx.
func putSandbox(ctx context.Context, tx *sql.Tx, sb store.Sandbox, spec []byte) error {
	if err := teamExists(ctx, tx, sb.TeamID); err != nil {
		return err
	}
	// The WHERE of DO UPDATE keeps a record in its team: a put from
	// another team changes no row.
	res, err := tx.ExecContext(ctx, `INSERT INTO sandboxes (`+sandboxCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
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
	if n, err := res.RowsAffected(); err != nil {
		return err
	} else if n == 0 {
		return check.Exists("sandbox " + sb.ID)
	}
	if _, err := tx.ExecContext(ctx, `DELETE FROM sandbox_labels WHERE sandbox_id = ?`, sb.ID); err != nil {
		return err
	}
	for k, v := range sb.Spec.Labels {
		if _, err := tx.ExecContext(ctx, `INSERT INTO sandbox_labels (sandbox_id, key, value) VALUES (?, ?, ?)`, sb.ID, k, v); err != nil {
			return err
		}
	}
	return nil
}

// UpdateSandbox is a read-modify-write of a sandbox record of the team
// ("" for any team) that no other writer, in this process or another,
// can interleave with: the record is read and written in one write
// transaction (BEGIN IMMEDIATE holds SQLite's write lock from the
// start). ErrNotFound if there is none; change's error is returned as it
// is and nothing is written. change must only edit the record (no I/O:
// every writer waits while it runs). The id and team may not change. It
// returns the record written.
func (s *Store) UpdateSandbox(ctx context.Context, teamID, id string, change func(*store.Sandbox) error) (store.Sandbox, error) {
	if id == "" {
		return store.Sandbox{}, check.Invalid("sandbox id is empty")
	}
	var out store.Sandbox
	err := s.write(ctx, func(tx *sql.Tx) error {
		cond, args := teamClause(teamID)
		sb, err := scanSandbox(tx.QueryRowContext(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`+cond, append([]any{id}, args...)...))
		if errors.Is(err, sql.ErrNoRows) {
			return check.NotFound("sandbox " + id)
		}
		if err != nil {
			return err
		}
		team := sb.TeamID
		if err := change(&sb); err != nil {
			return err
		}
		if sb.ID != id || sb.TeamID != team {
			return check.Invalid("sandbox %s: an update may not change its id or team", id)
		}
		if err := check.Sandbox(sb); err != nil {
			return err
		}
		spec, err := json.Marshal(sb.Spec)
		if err != nil {
			return check.Invalid("sandbox %s: encoding its spec: %v", sb.ID, err)
		}
		out = sb
		return putSandbox(ctx, tx, sb, spec)
	})
	if err != nil {
		return store.Sandbox{}, wrap(err, "updating sandbox %s", id)
	}
	return out, nil
}

// GetSandbox returns a sandbox of the team ("" for any team):
// ErrNotFound also when it belongs to another team.
func (s *Store) GetSandbox(ctx context.Context, teamID, id string) (store.Sandbox, error) {
	if id == "" {
		return store.Sandbox{}, check.Invalid("sandbox id is empty")
	}
	cond, args := teamClause(teamID)
	sb, err := scanSandbox(s.queryRow(ctx, `SELECT `+sandboxCols+` FROM sandboxes WHERE id = ?`+cond, append([]any{id}, args...)...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Sandbox{}, check.NotFound("sandbox " + id)
	}
	if err != nil {
		return store.Sandbox{}, wrap(err, "getting sandbox %s", id)
	}
	return sb, nil
}

// ListSandboxes returns a page of sandboxes, ordered by creation time
// then id, and the cursor of the next page ("" at the end). Limit 0
// means 100 and is capped at 1000.
//
// The cursor is the id of the last sandbox of the page (the contract of
// SandboxFilter.After), so its place is looked up, among the sandboxes
// deleted in the last day too (keepDeleted): callers delete records as
// they page through them. A cursor that is none of these, or not of
// f.TeamID, is ErrInvalid rather than a guess at where the page was.
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
	page, next, err := s.listSandboxes(ctx, f, limit)
	return page, next, wrap(err, "listing sandboxes")
}

func (s *Store) listSandboxes(ctx context.Context, f store.SandboxFilter, limit int) ([]store.Sandbox, string, error) {
	// One read transaction: the cursor's place and the page come from the
	// same snapshot.
	tx, err := s.r.BeginTx(ctx, &sql.TxOptions{ReadOnly: true})
	if err != nil {
		return nil, "", err
	}
	defer tx.Rollback()

	var q strings.Builder
	var args []any
	q.WriteString(`SELECT ` + sandboxCols + ` FROM sandboxes WHERE 1`)
	cond, targs := teamClause(f.TeamID)
	q.WriteString(cond)
	args = append(args, targs...)
	if f.State != "" {
		q.WriteString(` AND state = ?`)
		args = append(args, f.State)
	}
	// Sorted so the same filter is the same statement.
	for _, k := range slices.Sorted(maps.Keys(f.Labels)) {
		q.WriteString(` AND id IN (SELECT sandbox_id FROM sandbox_labels WHERE key = ? AND value = ?)`)
		args = append(args, k, f.Labels[k])
	}
	if f.After != "" {
		// A live sandbox first: an id can be deleted and used again.
		var created int64
		cargs := append([]any{f.After}, targs...)
		err := tx.QueryRowContext(ctx, `SELECT created_at FROM sandboxes WHERE id = ?`+cond, cargs...).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			err = tx.QueryRowContext(ctx, `SELECT created_at FROM deleted_sandboxes WHERE id = ?`+cond, cargs...).Scan(&created)
		}
		if errors.Is(err, sql.ErrNoRows) {
			return nil, "", check.Invalid("page cursor %q is not a sandbox, nor one deleted in the last %v: list again from the start", f.After, keepDeleted)
		}
		if err != nil {
			return nil, "", err
		}
		q.WriteString(` AND (created_at, id) > (?, ?)`)
		args = append(args, created, f.After)
	}
	// One more than the page, to know whether there is a next page.
	q.WriteString(` ORDER BY created_at, id LIMIT ?`)
	args = append(args, limit+1)

	rows, err := tx.QueryContext(ctx, q.String(), args...)
	if err != nil {
		return nil, "", err
	}
	defer rows.Close()
	page := []store.Sandbox{}
	for rows.Next() {
		sb, err := scanSandbox(rows)
		if err != nil {
			return nil, "", err
		}
		page = append(page, sb)
	}
	if err := rows.Err(); err != nil {
		return nil, "", err
	}
	if len(page) <= limit {
		return page, "", nil
	}
	page = page[:limit]
	return page, page[limit-1].ID, nil
}

// touchEvery is how much later than the recorded activity a touch must
// be to be written. Touches come with every exec, file operation and
// port connection, and each write costs the single writer an fsync (about
// half a millisecond): written every time, a few busy sandboxes would
// queue every other write behind theirs. Idle timeouts are minutes; a
// second of slack in them is nothing.
const touchEvery = time.Second

// TouchSandbox records activity at t: ErrNotFound if there is no such
// sandbox. LastActivity lags the latest touch by less than touchEvery,
// and never moves back: requests finish out of order, and the idle timer
// must run from the latest.
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
	// Most touches change nothing; find out on a reader, without the
	// writer.
	var last sql.NullInt64
	err := s.queryRow(ctx, `SELECT last_activity FROM sandboxes WHERE id = ?`, id).Scan(&last)
	if errors.Is(err, sql.ErrNoRows) {
		return check.NotFound("sandbox " + id)
	}
	if err != nil {
		return wrap(err, "touching sandbox %s", id)
	}
	if last.Valid && t.UnixNano()-last.Int64 < int64(touchEvery) {
		return nil
	}
	err = s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE sandboxes SET last_activity = ?1
			WHERE id = ?2 AND (last_activity IS NULL OR last_activity < ?1)`, t.UnixNano(), id)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n > 0 {
			return err
		}
		// Nothing changed: a later touch won the race, or the sandbox
		// was deleted since the read.
		var one int
		err = tx.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, id).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return check.NotFound("sandbox " + id)
		}
		return err
	})
	return wrap(err, "touching sandbox %s", id)
}

// keepDeleted is how long a deleted sandbox's place in the listing order
// is kept, for page cursors that name it. A day is longer than anyone
// pages through a list.
const keepDeleted = 24 * time.Hour

// DeleteSandbox removes the record with its ports and labels:
// ErrNotFound if there is none. It takes no team, so callers acting for
// a team check with GetSandbox first; a record never changes team
// (PutSandbox), so the check stays true. The sandbox's place in the
// listing order is kept a while (keepDeleted) for page cursors.
func (s *Store) DeleteSandbox(ctx context.Context, id string) error {
	if id == "" {
		return check.Invalid("sandbox id is empty")
	}
	now := s.now().UnixNano()
	err := s.write(ctx, func(tx *sql.Tx) error {
		if _, err := tx.ExecContext(ctx, `INSERT INTO deleted_sandboxes (id, team_id, created_at, deleted_at)
			SELECT id, team_id, created_at, ? FROM sandboxes WHERE id = ?
			ON CONFLICT (id) DO UPDATE SET
				team_id = excluded.team_id, created_at = excluded.created_at, deleted_at = excluded.deleted_at`,
			now, id); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `DELETE FROM sandboxes WHERE id = ?`, id)
		if err := mustChange(res, err, "sandbox "+id); err != nil {
			return err
		}
		// Pruned here, where they are made, so they never pile up.
		_, err = tx.ExecContext(ctx, `DELETE FROM deleted_sandboxes WHERE deleted_at < ?`, now-int64(keepDeleted))
		return err
	})
	return wrap(err, "deleting sandbox %s", id)
}
