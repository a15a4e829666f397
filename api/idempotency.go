package api

// Idempotency keys: a create (POST /v1/sandboxes, E2B's POST /sandboxes)
// that carries IdempotencyKeyHeader is done at most once per team and
// key: a retry with the same key and body gets the first one's sandbox,
// with IdempotentReplayedHeader "true".
const (
	IdempotencyKeyHeader     = "Idempotency-Key"
	IdempotentReplayedHeader = "Idempotent-Replayed"
	// MaxIdempotencyKeyLen bounds a key; its characters are letters,
	// digits and -_.:+/=~ (a UUID, a ULID, base64).
	MaxIdempotencyKeyLen = 255

	// CodeIdempotencyInFlight (409): the first request with the key is
	// still working; retry after a moment.
	CodeIdempotencyInFlight = "idempotency_in_flight"
	// CodeIdempotencyMismatch (422): the key was used with another
	// request body; a key names one request.
	CodeIdempotencyMismatch = "idempotency_key_reused"
)
