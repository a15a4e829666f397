package sqlite

import (
	"context"
	"database/sql"
	"time"

	"github.com/cove-sandbox/cove/store/internal/check"
)

// dbNow is SQLite's clock ('now', millisecond precision) in unix
// nanoseconds. It is the host's clock, not the store's own (now), which
// tests move: every process sharing the file runs on this host.
const dbNow = `CAST(round((julianday('now') - 2440587.5) * 86400000.0) AS INTEGER) * 1000000`

// AcquireLease takes the lease name for holder until SQLite's clock
// reaches now+ttl, or renews it: true when it was free, expired or
// already holder's; false when another holds it. One conditional upsert
// in a write transaction, so of processes racing for a free lease
// exactly one wins.
func (s *Store) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if err := check.Lease(name, holder); err != nil {
		return false, err
	}
	if ttl <= 0 {
		return false, check.Invalid("lease %s: ttl %v is not positive", name, ttl)
	}
	var got bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `INSERT INTO leases (name, holder, expires_at) VALUES (?1, ?2, `+dbNow+` + ?3)
			ON CONFLICT (name) DO UPDATE SET holder = excluded.holder, expires_at = excluded.expires_at
			WHERE leases.holder = excluded.holder OR leases.expires_at <= `+dbNow,
			name, holder, int64(ttl))
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		got = n > 0
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
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM leases WHERE name = ? AND holder = ?`, name, holder)
		return err
	})
	return wrap(err, "releasing lease %s", name)
}
