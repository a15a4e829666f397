package postgres

import (
	"context"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/store/internal/check"
)

// dbNow is the database's clock in unix nanoseconds (microsecond
// precision). clock_timestamp(), not now(): now() is the start of the
// transaction, and a retried or slow transaction must not see an old
// time.
const dbNow = `(extract(epoch FROM clock_timestamp()) * 1000000000)::bigint`

// AcquireLease takes the lease name for holder until the database's
// clock reaches now+ttl, or renews it: true when it was free, expired or
// already holder's; false when another holds it. One conditional upsert,
// so of replicas racing for a free lease exactly one wins. The caller's
// clock plays no part: a replica with a wrong clock cannot take a lease
// early nor keep one late.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if err := check.Lease(name, holder); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, check.Invalid("lease %s: ttl %v is not positive", name, ttl)
	}
	var got bool
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES ($1, $2, `+dbNow+` + $3)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
			WHERE leases.holder = excluded.holder OR leases.expires_at <= `+dbNow,
			name, holder, int64(ttl))
		got = tag.RowsAffected() > 0
		return err
	})
	if err != nil {
		return false, wrap(err, "acquiring lease %s", name)
	}
	return got, nil
}

// ReleaseLease gives the lease up if holder holds it; nothing otherwise.
func (s *Store) ReleaseLease(ctx context.Context, name, holder string) error {
	if err := check.Lease(name, holder); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM leases WHERE name = $1 AND holder = $2`, name, holder)
		return err
	})
	return wrap(err, "releasing lease %s", name)
}
