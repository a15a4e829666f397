package sqlite

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

var _ store.Idempotency = (*Store)(nil)

// ClaimIdempotencyKey claims key of team for the request requestHash
// (store.Idempotency). One write transaction: writes to the file are
// serialized, so of racing claims exactly one finds the key free.
func (s *Store) ClaimIdempotencyKey(ctx context.Context, teamID, key, requestHash, holder string, hold time.Duration) (store.Claim, error) {
	if err := check.IdempotencyKey(teamID, key, holder); err != nil {
		return store.Claim{}, err
	}
	if err := check.Hold(key, hold); err != nil {
		return store.Claim{}, err
	}
	if requestHash == "" {
		return store.Claim{}, check.Invalid("idempotency key %s: request hash is empty", key)
	}
	now := s.now()
	s.sweepIdempotencyKeys(ctx, now)
	var c store.Claim
	err := s.write(ctx, func(tx *sql.Tx) error {
		var hash, oldHolder, result string
		var lapsed bool
		var expires int64
		err := tx.QueryRowContext(ctx, `SELECT request_hash, holder, result_id, held_until <= `+dbNow+`, expires_at
			FROM idempotency_keys WHERE team_id = ? AND key = ?`, teamID, key).Scan(&hash, &oldHolder, &result, &lapsed, &expires)
		switch {
		case errors.Is(err, sql.ErrNoRows) || (err == nil && expires <= now.UnixNano()):
			c.Status = store.ClaimNew
			_, err = tx.ExecContext(ctx, `INSERT OR REPLACE INTO idempotency_keys
				(team_id, key, request_hash, holder, result_id, held_until, expires_at)
				VALUES (?, ?, ?, ?, '', `+dbNow+` + ?, ?)`,
				teamID, key, requestHash, holder, int64(hold), now.Add(store.IdempotencyKeyTTL).UnixNano())
			return err
		case err != nil:
			return err
		case hash != requestHash:
			c.Status = store.ClaimMismatch
		case result != "":
			c.Status, c.ResultID = store.ClaimDone, result
		case !lapsed && oldHolder != holder:
			c.Status = store.ClaimInFlight
		default:
			c.Status = store.ClaimTakenOver
			_, err = tx.ExecContext(ctx, `UPDATE idempotency_keys SET holder = ?, held_until = `+dbNow+` + ?
				WHERE team_id = ? AND key = ?`, holder, int64(hold), teamID, key)
		}
		return err
	})
	if err != nil {
		return store.Claim{}, wrap(err, "claiming idempotency key %s", key)
	}
	return c, nil
}

// sweepIdempotencyKeys deletes the keys past their TTL, at most once per
// check.SweepEvery in this process. A failure is left for the next one.
func (s *Store) sweepIdempotencyKeys(ctx context.Context, now time.Time) {
	last := s.swept.Load()
	if now.UnixNano()-last < int64(check.SweepEvery) || !s.swept.CompareAndSwap(last, now.UnixNano()) {
		return
	}
	s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys WHERE expires_at <= ?`, now.UnixNano())
		return err
	})
}

// RenewIdempotencyKey extends holder's unfinished claim to hold from now.
func (s *Store) RenewIdempotencyKey(ctx context.Context, teamID, key, holder string, hold time.Duration) (bool, error) {
	if err := check.IdempotencyKey(teamID, key, holder); err != nil {
		return false, err
	}
	if err := check.Hold(key, hold); err != nil {
		return false, err
	}
	var got bool
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET held_until = `+dbNow+` + ?
			WHERE team_id = ? AND key = ? AND holder = ? AND result_id = ''`, int64(hold), teamID, key, holder)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		got = n > 0
		return err
	})
	if err != nil {
		return false, wrap(err, "renewing idempotency key %s", key)
	}
	return got, nil
}

// FinishIdempotencyKey records resultID as the key's result if holder
// still holds its unfinished claim; ErrState otherwise.
func (s *Store) FinishIdempotencyKey(ctx context.Context, teamID, key, holder, resultID string) error {
	if err := check.IdempotencyKey(teamID, key, holder); err != nil {
		return err
	}
	if resultID == "" {
		return check.Invalid("idempotency key %s: result is empty", key)
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		res, err := tx.ExecContext(ctx, `UPDATE idempotency_keys SET result_id = ?
			WHERE team_id = ? AND key = ? AND holder = ? AND result_id = ''`, resultID, teamID, key, holder)
		if err != nil {
			return err
		}
		if n, err := res.RowsAffected(); err != nil || n == 0 {
			return errors.Join(err, fmt.Errorf("idempotency key %s is no longer held by %s: %w", key, holder, sandbox.ErrState))
		}
		return nil
	})
	return wrap(err, "finishing idempotency key %s", key)
}

// ReleaseIdempotencyKey forgets holder's unfinished claim.
func (s *Store) ReleaseIdempotencyKey(ctx context.Context, teamID, key, holder string) error {
	if err := check.IdempotencyKey(teamID, key, holder); err != nil {
		return err
	}
	err := s.write(ctx, func(tx *sql.Tx) error {
		_, err := tx.ExecContext(ctx, `DELETE FROM idempotency_keys
			WHERE team_id = ? AND key = ? AND holder = ? AND result_id = ''`, teamID, key, holder)
		return err
	})
	return wrap(err, "releasing idempotency key %s", key)
}
