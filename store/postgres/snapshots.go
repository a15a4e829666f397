package postgres

import (
	"context"
	"errors"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

const snapshotCols = `id, team_id, sandbox_id, size, created_at`

func scanSnapshot(row scanner) (store.Snapshot, error) {
	var sn store.Snapshot
	var created *int64
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		if err := teamExists(ctx, tx, sn.TeamID); err != nil {
			return err
		}
		tag, err := tx.Exec(ctx, `INSERT INTO snapshots (`+snapshotCols+`) VALUES ($1, $2, $3, $4, $5)
			ON CONFLICT (id) DO UPDATE SET
				sandbox_id = excluded.sandbox_id, size = excluded.size, created_at = excluded.created_at
			WHERE snapshots.team_id = excluded.team_id`,
			sn.ID, sn.TeamID, sn.SandboxID, sn.Size, nanos(sn.CreatedAt))
		if err != nil {
			return err
		}
		if tag.RowsAffected() == 0 {
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
	a := args{id}
	sn, err := scanSnapshot(s.pool.QueryRow(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE id = $1`+a.teamClause(teamID), a...))
	if errors.Is(err, pgx.ErrNoRows) {
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
	var a args
	rows, err := s.pool.Query(ctx, `SELECT `+snapshotCols+` FROM snapshots WHERE true`+a.teamClause(teamID)+` ORDER BY created_at, id`, a...)
	if err != nil {
		return nil, wrap(err, "listing snapshots")
	}
	snaps, err := collect(rows, scanSnapshot)
	return snaps, wrap(err, "listing snapshots")
}

// DeleteSnapshot removes a snapshot record of the team ("" for any
// team): ErrNotFound if the team has none with this id.
func (s *Store) DeleteSnapshot(ctx context.Context, teamID, id string) error {
	if id == "" {
		return check.Invalid("snapshot id is empty")
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		a := args{id}
		tag, err := tx.Exec(ctx, `DELETE FROM snapshots WHERE id = $1`+a.teamClause(teamID), a...)
		return mustChange(tag, err, "snapshot "+id)
	})
	return wrap(err, "deleting snapshot %s", id)
}

// Ports.

const portCols = `sandbox_id, port, public, token, created_at`

func scanPort(row scanner) (store.Port, error) {
	var p store.Port
	var created *int64
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		// FOR KEY SHARE: the sandbox cannot be deleted until this commits
		// (the foreign key would catch it too; this names it).
		var one int
		err := tx.QueryRow(ctx, `SELECT 1 FROM sandboxes WHERE id = $1 FOR KEY SHARE`, p.SandboxID).Scan(&one)
		if errors.Is(err, pgx.ErrNoRows) {
			return check.NotFound("sandbox " + p.SandboxID)
		}
		if err != nil {
			return err
		}
		_, err = tx.Exec(ctx, `INSERT INTO ports (`+portCols+`) VALUES ($1, $2, $3, $4, $5)
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
	p, err := scanPort(s.pool.QueryRow(ctx, `SELECT `+portCols+` FROM ports WHERE sandbox_id = $1 AND port = $2`, sandboxID, port))
	if errors.Is(err, pgx.ErrNoRows) {
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
	rows, err := s.pool.Query(ctx, `SELECT `+portCols+` FROM ports WHERE sandbox_id = $1 ORDER BY port`, sandboxID)
	if err != nil {
		return nil, wrap(err, "listing the ports of sandbox %s", sandboxID)
	}
	ports, err := collect(rows, scanPort)
	return ports, wrap(err, "listing the ports of sandbox %s", sandboxID)
}

// DeletePort stops exposing a port: ErrNotFound if it is not exposed.
func (s *Store) DeletePort(ctx context.Context, sandboxID string, port int) error {
	if err := check.Port(sandboxID, port); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `DELETE FROM ports WHERE sandbox_id = $1 AND port = $2`, sandboxID, port)
		return mustChange(tag, err, check.PortName(sandboxID, port))
	})
	return wrap(err, "deleting %s", check.PortName(sandboxID, port))
}
