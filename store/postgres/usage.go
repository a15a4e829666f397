package postgres

import (
	"context"
	"math"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

// AddUsage records a metered interval [Start, End): ErrNotFound if its
// team does not exist. Its sandbox need not exist any more.
func (s *Store) AddUsage(ctx context.Context, u store.Usage) error {
	switch {
	case u.TeamID == "":
		return check.Invalid("usage: team id is empty")
	case u.SandboxID == "":
		return check.Invalid("usage of team %s: sandbox id is empty", u.TeamID)
	case u.Start.IsZero() || u.End.IsZero():
		return check.Invalid("usage of sandbox %s: start and end must be set", u.SandboxID)
	case !u.End.After(u.Start):
		return check.Invalid("usage of sandbox %s: end %s is not after start %s", u.SandboxID, u.End.Format(time.RFC3339Nano), u.Start.Format(time.RFC3339Nano))
	case u.CPUSeconds < 0 || u.MemoryGiBSecs < 0 || u.DiskGiBHours < 0 || u.BytesIn < 0 || u.BytesOut < 0,
		badFloat(u.CPUSeconds) || badFloat(u.MemoryGiBSecs) || badFloat(u.DiskGiBHours):
		return check.Invalid("usage of sandbox %s: amounts must be finite and not negative", u.SandboxID)
	}
	for _, t := range []time.Time{u.Start, u.End} {
		if err := check.Time("usage of sandbox "+u.SandboxID, t); err != nil {
			return err
		}
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		if err := teamExists(ctx, tx, u.TeamID); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `INSERT INTO usage (team_id, sandbox_id, start_at, end_at,
				cpu_seconds, memory_gib_secs, disk_gib_hours, bytes_in, bytes_out)
			VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)`,
			u.TeamID, u.SandboxID, u.Start.UnixNano(), u.End.UnixNano(),
			u.CPUSeconds, u.MemoryGiBSecs, u.DiskGiBHours, u.BytesIn, u.BytesOut)
		return err
	})
	return wrap(err, "adding usage of sandbox %s", u.SandboxID)
}

func badFloat(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

// UsageByTeam sums a team's usage ("" for every team's) per sandbox over
// [from, to), pro rata for intervals that straddle the range, exactly as
// store/sqlite does (see its doc). Bytes are rounded half away from zero,
// as SQLite's round().
func (s *Store) UsageByTeam(ctx context.Context, teamID string, from, to time.Time) ([]store.Usage, error) {
	switch {
	case from.IsZero() || to.IsZero():
		return nil, check.Invalid("usage range: from and to must be set")
	case !to.After(from):
		return nil, check.Invalid("usage range: to %s is not after from %s", to.Format(time.RFC3339Nano), from.Format(time.RFC3339Nano))
	}
	for _, t := range []time.Time{from, to} {
		if err := check.Time("usage range", t); err != nil {
			return nil, err
		}
	}
	a := args{from.UnixNano(), to.UnixNano()}
	cond := a.teamClause(teamID)
	// numeric's round() rounds half away from zero; float8's rounds half
	// to even.
	rows, err := s.pool.Query(ctx, `
		SELECT team_id, sandbox_id, min(greatest(start_at, $1)), max(least(end_at, $2)),
			sum(cpu_seconds * share), sum(memory_gib_secs * share), sum(disk_gib_hours * share),
			round(sum(bytes_in * share)::numeric)::bigint, round(sum(bytes_out * share)::numeric)::bigint
		FROM (
			SELECT *, (least(end_at, $2) - greatest(start_at, $1))::float8 / (end_at - start_at) AS share
			FROM usage
			WHERE end_at > $1 AND start_at < $2`+cond+`
		) AS u
		GROUP BY team_id, sandbox_id
		ORDER BY team_id, sandbox_id`, a...)
	if err != nil {
		return nil, wrap(err, "summing the usage of team %s", teamID)
	}
	usage, err := collect(rows, func(row scanner) (store.Usage, error) {
		var u store.Usage
		var start, end *int64
		err := row.Scan(&u.TeamID, &u.SandboxID, &start, &end, &u.CPUSeconds, &u.MemoryGiBSecs, &u.DiskGiBHours, &u.BytesIn, &u.BytesOut)
		u.Start, u.End = fromNanos(start), fromNanos(end)
		return u, err
	})
	if err != nil {
		return nil, wrap(err, "summing the usage of team %s", teamID)
	}
	return usage, nil
}
