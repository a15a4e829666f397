package postgres

import (
	"context"
	"errors"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

// Runs.

const runCols = `id, team_id, sandbox_id, status, config, state, input, messages, output, error, usage, last_event_id, created_at, updated_at, finished_at`

func scanRun(row scanner) (store.Run, error) {
	var r store.Run
	var state, usage *string
	var config string
	var created, updated, finished *int64
	err := row.Scan(&r.ID, &r.TeamID, &r.SandboxID, &r.Status, &config, &state, &r.Input, &r.Messages,
		&r.Output, &r.Error, &usage, &r.LastEventID, &created, &updated, &finished)
	r.Config = []byte(config)
	if state != nil {
		r.State = []byte(*state)
	}
	if usage != nil {
		r.Usage = []byte(*usage)
	}
	r.CreatedAt, r.UpdatedAt, r.FinishedAt = fromNanos(created), fromNanos(updated), fromNanos(finished)
	return r, err
}

// nullJSON stores an empty raw JSON value as NULL.
func nullJSON(b []byte) *string {
	if len(b) == 0 {
		return nil
	}
	s := string(b)
	return &s
}

// PutRun creates or replaces a run record; its last_event_id only rises.
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		if err := teamExists(ctx, tx, r.TeamID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO runs (`+runCols+`) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)
			ON CONFLICT (id) DO UPDATE SET
				sandbox_id = excluded.sandbox_id, status = excluded.status, config = excluded.config,
				state = excluded.state, input = excluded.input, messages = excluded.messages,
				output = excluded.output, error = excluded.error, usage = excluded.usage,
				last_event_id = greatest(runs.last_event_id, excluded.last_event_id), updated_at = excluded.updated_at,
				finished_at = excluded.finished_at
			WHERE runs.team_id = excluded.team_id`,
			r.ID, r.TeamID, r.SandboxID, r.Status, string(r.Config), nullJSON(r.State), r.Input, r.Messages,
			r.Output, r.Error, nullJSON(r.Usage), r.LastEventID, nanos(r.CreatedAt), nanos(r.UpdatedAt), nanos(r.FinishedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
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
	a := args{id}
	r, err := scanRun(s.pool.QueryRow(ctx, `SELECT `+runCols+` FROM runs WHERE id = $1`+a.teamClause(teamID), a...))
	if errors.Is(err, pgx.ErrNoRows) {
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
	var a args
	if f.TeamID != "" {
		where = append(where, "team_id = "+a.add(f.TeamID))
	}
	if f.Status != "" {
		where = append(where, "status = "+a.add(f.Status))
	}
	if f.After != "" {
		var created int64
		ca := args{f.After}
		err := s.pool.QueryRow(ctx, `SELECT created_at FROM runs WHERE id = $1`+ca.teamClause(f.TeamID), ca...).Scan(&created)
		if errors.Is(err, pgx.ErrNoRows) {
			return nil, "", check.Invalid("page cursor %q is not a run: list again from the start", f.After)
		}
		if err != nil {
			return nil, "", wrap(err, "listing runs")
		}
		where = append(where, "(created_at, id) < ("+a.add(created)+", "+a.add(f.After)+")")
	}
	q := `SELECT ` + runCols + ` FROM runs`
	if len(where) > 0 {
		q += ` WHERE ` + strings.Join(where, " AND ")
	}
	q += ` ORDER BY created_at DESC, id DESC LIMIT ` + a.add(limit+1)
	rows, err := s.pool.Query(ctx, q, a...)
	if err != nil {
		return nil, "", wrap(err, "listing runs")
	}
	runs, err := collect(rows, scanRun)
	if err != nil {
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		a := args{id}
		tag, err := tx.Exec(ctx, `DELETE FROM runs WHERE id = $1`+a.teamClause(teamID), a...)
		return mustChange(tag, err, "run "+id)
	})
	return wrap(err, "deleting run %s", id)
}

// AppendRunEvents adds events to their runs' logs, all or none, and
// raises each run's last_event_id to its last event. Runs are updated in
// id order, so two replicas appending to the same runs cannot deadlock.
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		var b pgx.Batch
		for _, e := range evs {
			b.Queue(`INSERT INTO run_events (run_id, seq, type, data) VALUES ($1, $2, $3, $4)`, e.RunID, e.Seq, e.Type, string(e.Data))
		}
		for _, id := range slices.Sorted(maps.Keys(last)) {
			b.Queue(`UPDATE runs SET last_event_id = greatest(last_event_id, $1) WHERE id = $2`, last[id], id)
		}
		return tx.SendBatch(ctx, &b).Close()
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
	rows, err := s.pool.Query(ctx, `SELECT seq, type, data FROM run_events WHERE run_id = $1 AND seq > $2 ORDER BY seq LIMIT $3`, runID, after, limit)
	if err != nil {
		return nil, wrap(err, "reading the events of run %s", runID)
	}
	evs, err := collect(rows, func(row scanner) (store.RunEvent, error) {
		e := store.RunEvent{RunID: runID}
		var data string
		err := row.Scan(&e.Seq, &e.Type, &data)
		e.Data = []byte(data)
		return e, err
	})
	if err != nil {
		return nil, wrap(err, "reading the events of run %s", runID)
	}
	return evs, nil
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		if err := teamExists(ctx, tx, sec.TeamID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO secrets (team_id, name, value, updated_at) VALUES ($1, $2, $3, $4)
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
	var updated *int64
	err := s.pool.QueryRow(ctx, `SELECT value, updated_at FROM secrets WHERE team_id = $1 AND name = $2`, teamID, name).Scan(&sec.Value, &updated)
	if errors.Is(err, pgx.ErrNoRows) {
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
	rows, err := s.pool.Query(ctx, `SELECT name, updated_at FROM secrets WHERE team_id = $1 ORDER BY name`, teamID)
	if err != nil {
		return nil, wrap(err, "listing secrets")
	}
	out, err := collect(rows, func(row scanner) (store.Secret, error) {
		sec := store.Secret{TeamID: teamID}
		var updated *int64
		err := row.Scan(&sec.Name, &updated)
		sec.UpdatedAt = fromNanos(updated)
		return sec, err
	})
	if err != nil {
		return nil, wrap(err, "listing secrets")
	}
	return out, nil
}

// DeleteSecret removes a team's secret: ErrNotFound if none.
func (s *Store) DeleteSecret(ctx context.Context, teamID, name string) error {
	if teamID == "" || name == "" {
		return check.Invalid("secret: team id or name is empty")
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM secrets WHERE team_id = $1 AND name = $2`, teamID, name)
		return mustChange(tag, err, "secret "+name)
	})
	return wrap(err, "deleting secret %s", name)
}
