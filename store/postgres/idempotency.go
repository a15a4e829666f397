package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

var _ store.Idempotency = (*Store)(nil)

// ClaimIdempotencyKey claims key of team for the request requestHash
// (store.Idempotency). An insert that does nothing on conflict, then the
// row locked (FOR UPDATE): of replicas racing for a free key exactly one
// inserts it, and the others wait for its commit and see it held.
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		c = store.Claim{}
		tag, err := tx.Exec(ctx, `INSERT INTO idempotency_keys
			(team_id, key, request_hash, holder, result_id, held_until, expires_at)
			VALUES ($1, $2, $3, $4, '', `+dbNow+` + $5, $6) ON CONFLICT (team_id, key) DO NOTHING`,
			teamID, key, requestHash, holder, int64(hold), now.Add(store.IdempotencyKeyTTL).UnixNano())
		if err != nil {
			return err
		}
		if tag.RowsAffected() > 0 {
			c.Status = store.ClaimNew
			return nil
		}
		var hash, oldHolder, result string
		var lapsed bool
		var expires int64
		if err := tx.QueryRow(ctx, `SELECT request_hash, holder, result_id, held_until <= `+dbNow+`, expires_at
			FROM idempotency_keys WHERE team_id = $1 AND key = $2 FOR UPDATE`, teamID, key).Scan(&hash, &oldHolder, &result, &lapsed, &expires); err != nil {
			return err
		}
		switch {
		case expires <= now.UnixNano():
			c.Status = store.ClaimNew
			_, err = tx.Exec(ctx, `UPDATE idempotency_keys SET request_hash = $3, holder = $4, result_id = '',
				held_until = `+dbNow+` + $5, expires_at = $6 WHERE team_id = $1 AND key = $2`,
				teamID, key, requestHash, holder, int64(hold), now.Add(store.IdempotencyKeyTTL).UnixNano())
		case hash != requestHash:
			c.Status = store.ClaimMismatch
		case result != "":
			c.Status, c.ResultID = store.ClaimDone, result
		case !lapsed && oldHolder != holder:
			c.Status = store.ClaimInFlight
		default:
			c.Status = store.ClaimTakenOver
			_, err = tx.Exec(ctx, `UPDATE idempotency_keys SET holder = $3, held_until = `+dbNow+` + $4
				WHERE team_id = $1 AND key = $2`, teamID, key, holder, int64(hold))
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
	s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM idempotency_keys WHERE expires_at <= $1`, now.UnixNano())
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE idempotency_keys SET held_until = `+dbNow+` + $4
			WHERE team_id = $1 AND key = $2 AND holder = $3 AND result_id = ''`, teamID, key, holder, int64(hold))
		got = tag.RowsAffected() > 0
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
	err := s.write(ctx, func(tx pgx.Tx) error {
		tag, err := tx.Exec(ctx, `UPDATE idempotency_keys SET result_id = $4
			WHERE team_id = $1 AND key = $2 AND holder = $3 AND result_id = ''`, teamID, key, holder, resultID)
		if err == nil && tag.RowsAffected() == 0 {
			err = fmt.Errorf("idempotency key %s is no longer held by %s: %w", key, holder, sandbox.ErrState)
		}
		return err
	})
	return wrap(err, "finishing idempotency key %s", key)
}

// ReleaseIdempotencyKey forgets holder's unfinished claim.
func (s *Store) ReleaseIdempotencyKey(ctx context.Context, teamID, key, holder string) error {
	if err := check.IdempotencyKey(teamID, key, holder); err != nil {
		return err
	}
	err := s.write(ctx, func(tx pgx.Tx) error {
		_, err := tx.Exec(ctx, `DELETE FROM idempotency_keys
			WHERE team_id = $1 AND key = $2 AND holder = $3 AND result_id = ''`, teamID, key, holder)
		return err
	})
	return wrap(err, "releasing idempotency key %s", key)
}
