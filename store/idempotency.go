package store

import (
	"context"
	"time"
)

// IdempotencyKeyTTL is how long a finished idempotency key answers with
// its result; after it the key is forgotten (swept) and may make
// something new.
const IdempotencyKeyTTL = 24 * time.Hour

// ClaimStatus is what a claim of an idempotency key found.
type ClaimStatus int

const (
	// ClaimNew: the key was free (or forgotten); the caller holds it. It
	// does the work, renewing its hold while the work lasts, then
	// finishes the key with the result, or releases it if it made
	// nothing.
	ClaimNew ClaimStatus = iota + 1
	// ClaimDone: a request with the key finished; ResultID is what it
	// made.
	ClaimDone
	// ClaimInFlight: another holder's request with the key is still
	// working (its hold has not lapsed).
	ClaimInFlight
	// ClaimMismatch: the key was used with a different request (another
	// request hash).
	ClaimMismatch
	// ClaimTakenOver: a holder claimed the key and stopped renewing
	// before it finished (it died, perhaps after making something). The
	// caller holds the key now and must first look for what the dead
	// holder made (the server marks its work with the key) before
	// making it again.
	ClaimTakenOver
)

// Claim is the outcome of claiming an idempotency key.
type Claim struct {
	Status ClaimStatus
	// ResultID is the finished key's result (ClaimDone).
	ResultID string
}

// Idempotency keeps the idempotency keys of requests that make
// something (POST /v1/sandboxes, E2B's POST /sandboxes), so that a
// client retrying a request whose answer it lost gets the first
// request's result, not a second sandbox. A key is scoped to its team:
// another team's same key is another key. Holds run on the database's
// clock (as leases), so replicas with skewed clocks cannot take a claim
// that is still held; a finished key's IdempotencyKeyTTL runs on the
// store's own clock. store/sqlite and store/postgres implement it;
// callers find it by type assertion on a Store.
type Idempotency interface {
	// ClaimIdempotencyKey claims key of team for the request whose hash
	// is requestHash, held by holder for hold unless renewed. Of callers
	// racing for a free key exactly one gets ClaimNew (or
	// ClaimTakenOver). ErrInvalid for an empty team, key, hash or holder
	// or a hold not positive.
	ClaimIdempotencyKey(ctx context.Context, teamID, key, requestHash, holder string, hold time.Duration) (Claim, error)
	// RenewIdempotencyKey extends holder's unfinished claim to hold from
	// now: false when holder no longer holds it (it lapsed and another
	// took it over).
	RenewIdempotencyKey(ctx context.Context, teamID, key, holder string, hold time.Duration) (bool, error)
	// FinishIdempotencyKey records resultID as the key's result.
	// ErrState (sandbox.ErrState) when holder no longer holds the key's
	// unfinished claim: its result must not be reported as the key's.
	FinishIdempotencyKey(ctx context.Context, teamID, key, holder, resultID string) error
	// ReleaseIdempotencyKey forgets holder's unfinished claim (its
	// request failed having made nothing), so the next request with the
	// key starts afresh. Nothing when holder does not hold it.
	ReleaseIdempotencyKey(ctx context.Context, teamID, key, holder string) error
}
