package sqlite

import (
	"context"
	"database/sql"
	"errors"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

const snapshotCols = `id, team_id, sandbox_id, size, created_at`

func scanSnapshot(row scanner) (store.Snapshot, error) {
	var sn store.Snapshot
	var created sql.NullInt64
	err := row.Scan(&sn.ID, &sn.TeamID, &sn.SandboxID, &sn.Size, &created)
	sn.CreatedAt = fromNanos(created)
	return sn, err
}

// PutSnapshot creates or replaces a snapshot record. ErrNotFound if its
// team does not exist; ErrExist if the id belongs to another team's
// snapshot. Its sandbox need not exist any more.
func (s *Store) PutSnapshot(ctx context.Context, sn store.Snapshot) error {
	switch {
	case sn.ID == "":
		return check.Invalid("snapshot id is empty")
	case sn.TeamID == "":
		return check.Invalid("snapshot %s: team id is empty", sn.ID)
	case sn.SandboxID == "":
		return check.Invalid("snapshot %s: sandbox id is empty", sn.ID)
	case sn.Size < 0:
		return check.Invalid("snapshot %s: negative size %d", sn.ID, sn.Size)
	}
	if err := check.Time("snapshot "+sn.ID+" created_at", sn.CreatedAt); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := teamExists(ctx, tx, sn.TeamID); err != nil {
			return err
		}
		res, err := tx.ExecContext(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (id) DO UPDATE SET
				sandbox_id = excluded.sandbox_id, size = excluded.size, created_at = excluded.created_at
			WHERE snapshots.team_id = excluded.team_id`,
			sn.ID, sn.TeamID, sn.SandboxID, sn.Size, nanos(sn.CreatedAt))
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil {
			return err
		} else if n == 0 {
			return check.Exists("snapshot " + sn.ID)
		}
		return nil
	})
	return wrap(err, "putting snapshot %s", sn.ID)
}

// GetSnapshot returns a snapshot of the team ("" for any team):
// ErrNotFound also when it belongs to another team.
func (s *Store) GetSnapshot(ctx context.Context, teamID, id string) (store.Snapshot, error) {
	if id == "" {
		return store.Snapshot{}, check.Invalid("snapshot id is empty")
	}
	cond, args := teamClause(teamID)
	sn, err := scanSnapshot(s.queryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = ?`+cond, append([]any{id}, args...)...))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Snapshot{}, check.NotFound("snapshot " + id)
	}
	if err != nil {
		return store.Snapshot{}, wrap(err, "getting snapshot %s", id)
	}
	return sn, nil
}

// ListSnapshots lists a team's snapshots ("" for every team's), oldest
// first.
func (s *Store) ListSnapshots(ctx context.Context, teamID string) ([]store.Snapshot, error) {
	cond, args := teamClause(teamID)
	rows, err := s.query(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE 1`+cond+` ORDER BY created_at, id`, args...)
	if err != nil {
		return nil, wrap(err, "listing snapshots")
	}
	defer rows.Close()
	snaps := []store.Snapshot{}
	for rows.Next() {
		sn, err := scanSnapshot(rows)
		if err != nil {
			return nil, wrap(err, "listing snapshots")
		}
		snaps = append(snaps, sn)
	}
	return snaps, wrap(rows.Err(), "listing snapshots")
}

// DeleteSnapshot removes a snapshot record of the team ("" for any
// team): ErrNotFound if the team has none with this id.
func (s *Store) DeleteSnapshot(ctx context.Context, teamID, id string) error {
	if id == "" {
		return check.Invalid("snapshot id is empty")
	}
	cond, args := teamClause(teamID)
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM snapshots WHERE id = ?`+cond, append([]any{id}, args...)...)
		return mustChange(res, err, "snapshot "+id)
	})
	return wrap(err, "deleting snapshot %s", id)
}

// Ports. They take no team: the server finds the sandbox of the caller's
// team first, and a port is reached through its sandbox.

const portCols = `sandbox_id, port, public, token, created_at`

func scanPort(row scanner) (store.Port, error) {
	var p store.Port
	var created sql.NullInt64
	err := row.Scan(&p.SandboxID, &p.Port, &p.Public, &p.Token, &created)
	p.CreatedAt = fromNanos(created)
	return p, err
}

// PutPort exposes a port of a sandbox, or updates it: ErrNotFound if
// there is no such sandbox.
func (s *Store) PutPort(ctx context.Context, p store.Port) error {
	if err := check.Port(p.SandboxID, p.Port); err != nil {
		return err
	}
	if err := check.Time(check.PortName(p.SandboxID, p.Port)+" created_at", p.CreatedAt); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		var one int
		err := tx.QueryRowContext(ctx, `SELECT 1 FROM sandboxes WHERE id = ?`, p.SandboxID).Scan(&one)
		if errors.Is(err, sql.ErrNoRows) {
			return check.NotFound("sandbox " + p.SandboxID)
		}
		if err != nil {
			return err
		}
		_, err = tx.ExecContext(ctx, `INSERT INTO ports (`+portCols+`) VALUES (?, ?, ?, ?, ?)
			ON CONFLICT (sandbox_id, port) DO UPDATE SET
				public = excluded.public, token = excluded.token, created_at = excluded.created_at`,
			p.SandboxID, p.Port, p.Public, p.Token, nanos(p.CreatedAt))
		return err
	})
	return wrap(err, "putting %s", check.PortName(p.SandboxID, p.Port))
}

// GetPort returns an exposed port: ErrNotFound if it is not exposed.
func (s *Store) GetPort(ctx context.Context, sandboxID string, port int) (store.Port, error) {
	if err := check.Port(sandboxID, port); err != nil {
		return store.Port{}, err
	}
	p, err := scanPort(s.queryRow(ctx, `SELECT `+portCols+` FROM ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port))
	if errors.Is(err, sql.ErrNoRows) {
		return store.Port{}, check.NotFound(check.PortName(sandboxID, port))
	}
	if err != nil {
		return store.Port{}, wrap(err, "getting %s", check.PortName(sandboxID, port))
	}
	return p, nil
}

// ListPorts lists a sandbox's exposed ports by number; none (not an
// error) for a sandbox that does not exist.
func (s *Store) ListPorts(ctx context.Context, sandboxID string) ([]store.Port, error) {
	if sandboxID == "" {
		return nil, check.Invalid("sandbox id is empty")
	}
	rows, err := s.query(ctx, `SELECT `+portCols+` FROM ports WHERE sandbox_id = ? ORDER BY port`, sandboxID)
	if err != nil {
		return nil, wrap(err, "listing the ports of sandbox %s", sandboxID)
	}
	defer rows.Close()
	ports := []store.Port{}
	for rows.Next() {
		p, err := scanPort(rows)
		if err != nil {
			return nil, wrap(err, "listing the ports of sandbox %s", sandboxID)
		}
		ports = append(ports, p)
	}
	return ports, wrap(rows.Err(), "listing the ports of sandbox %s", sandboxID)
}

// DeletePort stops exposing a port: ErrNotFound if it is not exposed.
func (s *Store) DeletePort(ctx context.Context, sandboxID string, port int) error {
	if err := check.Port(sandboxID, port); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `DELETE FROM ports WHERE sandbox_id = ? AND port = ?`, sandboxID, port)
		return mustChange(res, err, check.PortName(sandboxID, port))
	})
	return wrap(err, "deleting %s", check.PortName(sandboxID, port))
}
