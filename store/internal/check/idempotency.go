package check

import "time"

// SweepEvery is how often a store deletes the idempotency keys past
// their TTL (at most once per interval per process, on a claim).
const SweepEvery = time.Minute

// IdempotencyKey refuses a claim of an idempotency key the stores cannot
// keep: every part is needed, and the hold must be positive.
func IdempotencyKey(team, key, holder string) error {
	switch {
	case team == "":
		return Invalid("idempotency key: team is empty")
	case key == "":
		return Invalid("idempotency key is empty")
	case holder == "":
		return Invalid("idempotency key %s: holder is empty", key)
	}
	return nil
}

// Hold refuses a hold that is not positive.
func Hold(key string, hold time.Duration) error {
	if hold <= 0 {
		return Invalid("idempotency key %s: hold %v is not positive", key, hold)
	}
	return nil
}
