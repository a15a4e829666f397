package sqlite

import (
	"context"
	"database/sql"
	"math"
	"time"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

// AddUsage records a metered interval [Start, End): ErrNotFound if its
// team does not exist. Its sandbox need not exist any more (usage is
// billed after a sandbox is deleted).
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
	err := s.write(ctx, func(tx *sql.Tx) error {
		if err := teamExists(ctx, tx, u.TeamID); err != nil {
			return err
		}
		_, err := tx.ExecContext(ctx, `INSERT INTO usage (team_id, sandbox_id, start_at, end_at,
				cpu_seconds, memory_gib_secs, disk_gib_hours, bytes_in, bytes_out)
			VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)`,
			u.TeamID, u.SandboxID, u.Start.UnixNano(), u.End.UnixNano(),
			u.CPUSeconds, u.MemoryGiBSecs, u.DiskGiBHours, u.BytesIn, u.BytesOut)
		return err
	})
	return wrap(err, "adding usage of sandbox %s", u.SandboxID)
}

func badFloat(f float64) bool { return math.IsNaN(f) || math.IsInf(f, 0) }

// UsageByTeam sums a team's usage ("" for every team's) per sandbox over
// [from, to), ordered by team then sandbox. Start and End of each sum are
// the part of [from, to) its intervals cover.
//
// An interval that straddles from or to counts pro rata, by the share of
// its time inside the range, as if used evenly over the interval. So
// adjacent ranges (this month, next month) add up to the whole, and no
// interval is billed twice or dropped at the boundary, which counting
// only the intervals fully inside would do. Bytes are prorated too and
// rounded to whole bytes. Intervals fully inside count exactly (their
// share is 1).
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
	cond, args := teamClause(teamID)
	// ?1 is from, ?2 is to; share is the part of each interval inside them.
	rows, err := s.query(ctx, `
		SELECT team_id, sandbox_id, min(max(start_at, ?1)), max(min(end_at, ?2)),
			sum(cpu_seconds * share), sum(memory_gib_secs * share), sum(disk_gib_hours * share),
			CAST(round(sum(bytes_in * share)) AS INTEGER), CAST(round(sum(bytes_out * share)) AS INTEGER)
		FROM (
			SELECT *, (min(end_at, ?2) - max(start_at, ?1)) * 1.0 / (end_at - start_at) AS share
			FROM usage
			WHERE end_at > ?1 AND start_at < ?2`+cond+`
		)
		GROUP BY team_id, sandbox_id
		ORDER BY team_id, sandbox_id`,
		append([]any{from.UnixNano(), to.UnixNano()}, args...)...)
	if err != nil {
		return nil, wrap(err, "summing the usage of team %s", teamID)
	}
	defer rows.Close()
	usage := []store.Usage{}
	for rows.Next() {
		var u store.Usage
		var start, end sql.NullInt64
		if err := rows.Scan(&u.TeamID, &u.SandboxID, &start, &end, &u.CPUSeconds, &u.MemoryGiBSecs, &u.DiskGiBHours, &u.BytesIn, &u.BytesOut); err != nil {
			return nil, wrap(err, "summing the usage of team %s", teamID)
		}
		u.Start, u.End = fromNanos(start), fromNanos(end)
		usage = append(usage, u)
	}
	return usage, wrap(rows.Err(), "summing the usage of team %s", teamID)
}
