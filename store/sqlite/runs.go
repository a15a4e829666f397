package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

// Runs.

const runCols = `id, team_id, sandbox_id, status, config, state, input, messages, output, error, usage, last_event_id, created_at, updated_at, finished_at`

func scanRun(row scanner) (store.Run, error) {
	var r store.Run
	var state, usage sql.NullString
	var config string
	var created, updated, finished sql.NullInt64
	err := row.Scan(&r.ID, &r.TeamID, &r.SandboxID, &r.Status, &config, &state, &r.Input, &r.Messages,
		&r.Output, &r.Error, &usage, &r.LastEventID, &created, &updated, &finished)
	r.Config = []byte(config)
	if state.Valid {
		r.State = []byte(state.String)
	}
	if usage.Valid {
		r.Usage = []byte(usage.String)
	}
	r.CreatedAt, r.UpdatedAt, r.FinishedAt = fromNanos(created), fromNanos(updated), fromNanos(finished)
	return r, err
}

// nullJSON stores an empty raw JSON value as NULL.
func nullJSON(b []byte) any {
	if len(b) == 0 {
		return nil
	}
	return string(b)
}

// PutRun creates or replaces a run record.
func (s *Store) PutRun(ctx context.Context, r store.Run) error {
	switch {
	case r.ID == "":
		return check.Invalid("run id is empty")
	case r.TeamID == "":
		return check.Invalid("run %s: team id is empty", r.ID)
	case r.Status == "":
		return check.Invalid("run %s: status is empty", r.ID)
	case len(r.Config) == 0:
		return check.Invalid("run %s: config is empty", r.ID)
	case r.Messages < 0 || r.LastEventID < 0:
		return check.Invalid("run %s: negative count", r.ID)
	}
	for what, t := range map[string]time.Time{"created_at": r.CreatedAt, "updated_at": r.UpdatedAt, "finished_at": r.FinishedAt} {
		if err := check.Time("run "+r.ID+" "+what, t); err != nil {
			return err
		}
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := teamExists(ctx, tx, r.TeamID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO runs (`+runCols+`) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET
				sandbox_id = excluded.sandbox_id, status = excluded.status, config = excluded.config,
				state = excluded.state, input = excluded.input, messages = excluded.messages,
				output = excluded.output, error = excluded.error, usage = excluded.usage,
				last_event_id = max(runs.last_event_id, excluded.last_event_id), updated_at = excluded.updated_at,
				finished_at = excluded.finished_at
			WHERE runs.team_id = excluded.team_id`,
			r.ID, r.TeamID, r.SandboxID, r.Status, string(r.Config), nullJSON(r.State), r.Input, r.Messages,
			r.Output, r.Error, nullJSON(r.Usage), r.LastEventID, nanos(r.CreatedAt), nanos(r.UpdatedAt), nanos(r.FinishedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return check.Exists("run " + r.ID)
		}
		return nil
	})
	return wrap(err, "putting run %s", r.ID)
}

// GetRun returns a run of the team ("" for any team).
func (s *Store) GetRun(ctx context.Context, teamID, id string) (store.Run, error) {
	if id == "" {
		return store.Run{}, check.Invalid("run id is empty")
	}
	cond, args := teamClause(teamID)
	r, err := scanRun(s.queryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = ?`+cond, append([]any{id}, args...)...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Run{}, check.NotFound("run " + id)
	}
	if err != nil {
		return store.Run{}, wrap(err, "getting run %s", id)
	}
	return r, nil
}

// ListRuns returns a page of runs, newest first.
func (s *Store) ListRuns(ctx context.Context, f store.RunFilter) ([]store.Run, string, error) {
	limit, err := check.PageLimit(f.Limit)
	if err != nil {
		return nil, "", err
	}
	var where []string
	var args []any
	if f.TeamID != "" {
		where, args = append(where, "team_id = ?"), append(args, f.TeamID)
	}
	if f.Status != "" {
		where, args = append(where, "status = ?"), append(args, f.Status)
	}
	if f.After != "" {
		var created int64
		cond, targs := teamClause(f.TeamID)
		err := s.queryRow(ctx, `SELECT created_at FROM runs WHERE id = ?`+cond, append([]any{f.After}, targs...)...).Scan(&created)
		if errors.Is(err, sql.ErrNoRows) {
			return nil, "", check.Invalid("page cursor %q is not a run: list again from the start", f.After)
		}
		if err != nil {
			return nil, "", wrap(err, "listing runs")
		}
		where = append(where, "(created_at < ? OR (created_at = ? AND id < ?))")
		args = append(args, created, created, f.After)
	}
	q := `SELECT ` + runCols + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ?`
	rows, err := s.query(ctx, q, append(args, limit+1)...)
	if err != nil {
		return nil, "", wrap(err, "listing runs")
	}
	defer rows.Close()
	runs := []store.Run{}
	for rows.Next() {
		r, err := scanRun(rows)
		if err != nil {
			return nil, "", wrap(err, "listing runs")
		}
		runs = append(runs, r)
	}
	if err := rows.Err(); err != nil {
		return nil, "", wrap(err, "listing runs")
	}
	next := ""
	if len(runs) > limit {
		runs = runs[:limit]
		next = runs[limit-1].ID
	}
	return runs, next, nil
}

// DeleteRun removes a run of the team ("" for any team) and its events.
func (s *Store) DeleteRun(ctx context.Context, teamID, id string) error {
	if id == "" {
		return check.Invalid("run id is empty")
	}
	cond, args := teamClause(teamID)
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM runs WHERE id = ?`+cond, append([]any{id}, args...)...)
		return mustChange(res, err, "run "+id)
	})
	return wrap(err, "deleting run %s", id)
}

// AppendRunEvents adds events to their runs' logs, all or none, and
// raises each run's last_event_id to its last event.
func (s *Store) AppendRunEvents(ctx context.Context, evs []store.RunEvent) error {
	if len(evs) == 0 {
		return nil
	}
	last := map[string]int64{}
	for _, e := range evs {
		switch {
		case e.RunID == "":
			return check.Invalid("run event: run id is empty")
		case e.Seq < 1:
			return check.Invalid("run %s event %d: sequence numbers start at 1", e.RunID, e.Seq)
		case e.Type == "" || len(e.Data) == 0:
			return check.Invalid("run %s event %d: type or data is empty", e.RunID, e.Seq)
		}
		last[e.RunID] = max(last[e.RunID], e.Seq)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		st, err := tx.PrepareContext(ctx, `INSERT INTO run_events (run_id, seq, type, data) VALUES (?, ?, ?, ?)`)
		if err != nil {
			return err
		}
		defer st.Close()
		for _, e := range evs {
			if _, err := st.ExecContext(ctx, e.RunID, e.Seq, e.Type, string(e.Data)); err != nil {
				return err
			}
		}
		for id, seq := range last {
			if _, err := tx.ExecContext(ctx, `UPDATE runs SET last_event_id = max(last_event_id, ?) WHERE id = ?`, seq, id); err != nil {
				return err
			}
		}
		return nil
	})
	return wrap(err, "appending %d events of run %s", len(evs), evs[0].RunID)
}

// RunEvents returns a run's events after a sequence number, in order.
func (s *Store) RunEvents(ctx context.Context, runID string, after int64, limit int) ([]store.RunEvent, error) {
	if runID == "" {
		return nil, check.Invalid("run id is empty")
	}
	limit, err := check.PageLimit(limit)
	if err != nil {
		return nil, err
	}
	rows, err := s.query(ctx, `SELECT seq, type, data FROM run_events WHERE run_id = ? AND seq > ? ORDER BY seq LIMIT ?`, runID, after, limit)
	if err != nil {
		return nil, wrap(err, "reading the events of run %s", runID)
	}
	defer rows.Close()
	evs := []store.RunEvent{}
	for rows.Next() {
		e := store.RunEvent{RunID: runID}
		var data string
		if err := rows.Scan(&e.Seq, &e.Type, &data); err != nil {
			return nil, wrap(err, "reading the events of run %s", runID)
		}
		e.Data = []byte(data)
		evs = append(evs, e)
	}
	return evs, wrap(rows.Err(), "reading the events of run %s", runID)
}

// Secrets.

// PutSecret creates or replaces a team's secret.
func (s *Store) PutSecret(ctx context.Context, sec store.Secret) error {
	switch {
	case sec.TeamID == "":
		return check.Invalid("secret: team id is empty")
	case sec.Name == "":
		return check.Invalid("secret name is empty")
	case len(sec.Value) == 0:
		return check.Invalid("secret %s: value is empty", sec.Name)
	}
	if err := check.Time("secret "+sec.Name+" updated_at", sec.UpdatedAt); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := teamExists(ctx, tx, sec.TeamID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO secrets (team_id, name, value, updated_at) VALUES (?, ?, ?, ?)
			ON CONFLICT (team_id, name) DO UPDATE SET value = excluded.value, updated_at = excluded.updated_at`,
			sec.TeamID, sec.Name, sec.Value, nanos(sec.UpdatedAt))
		return err
	})
	return wrap(err, "putting secret %s of team %s", sec.Name, sec.TeamID)
}

// GetSecret returns a secret of the team.
func (s *Store) GetSecret(ctx context.Context, teamID, name string) (store.Secret, error) {
	if teamID == "" || name == "" {
		return store.Secret{}, check.Invalid("secret: team id or name is empty")
	}
	sec := store.Secret{TeamID: teamID, Name: name}
	var updated sql.NullInt64
	err := s.queryRow(ctx, `SELECT value, updated_at FROM secrets WHERE team_id = ? AND name = ?`, teamID, name).Scan(&sec.Value, &updated)
	if errors.Is(err, sql.ErrNoRows) {
		return store.Secret{}, check.NotFound("secret " + name)
	}
	if err != nil {
		return store.Secret{}, wrap(err, "getting secret %s", name)
	}
	sec.UpdatedAt = fromNanos(updated)
	return sec, nil
}

// ListSecrets lists a team's secrets by name, without their values.
func (s *Store) ListSecrets(ctx context.Context, teamID string) ([]store.Secret, error) {
	if teamID == "" {
		return nil, check.Invalid("secrets: team id is empty")
	}
	rows, err := s.query(ctx, `SELECT name, updated_at FROM secrets WHERE team_id = ? ORDER BY name`, teamID)
	if err != nil {
		return nil, wrap(err, "listing secrets")
	}
	defer rows.Close()
	out := []store.Secret{}
	for rows.Next() {
		sec := store.Secret{TeamID: teamID}
		var updated sql.NullInt64
		if err := rows.Scan(&sec.Name, &updated); err != nil {
			return nil, wrap(err, "listing secrets")
		}
		sec.UpdatedAt = fromNanos(updated)
		out = append(out, sec)
	}
	return out, wrap(rows.Err(), "listing secrets")
}

// DeleteSecret removes a team's secret: ErrNotFound if none.
func (s *Store) DeleteSecret(ctx context.Context, teamID, name string) error {
	if teamID == "" || name == "" {
		return check.Invalid("secret: team id or name is empty")
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM secrets WHERE team_id = ? AND name = ?`, teamID, name)
		return mustChange(res, err, "secret "+name)
	})
	return wrap(err, "deleting secret %s", name)
}
