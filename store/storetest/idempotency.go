package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// idem is s's store.Idempotency; the test fails if it has none.
func idem(t *testing.T, s *testStore) store.Idempotency {
	t.Helper()
	i, ok := s.Store.(store.Idempotency)
	if !ok {
		t.Fatalf("%T does not implement store.Idempotency", s.Store)
	}
	return i
}

// claimWant claims and checks the outcome.
func claimWant(t *testing.T, i store.Idempotency, team, key, hash, holder string, hold time.Duration, want store.Claim) {
	t.Helper()
	got, err := i.ClaimIdempotencyKey(t.Context(), team, key, hash, holder, hold)
	checkErr(t, err, nil)
	if got != want {
		t.Fatalf("ClaimIdempotencyKey(%s, %s, %s, %s): got %+v, want %+v", team, key, hash, holder, got, want)
	}
}

// testIdempotency: a key's life on two stores sharing one database (two
// replicas): claimed, in flight for the others, finished with its
// result for everyone; the same key with another request is a
// mismatch; another team's same key is its own; a released key is
// free again; only the holder renews, finishes or releases.
func (h *harness) testIdempotency(t *testing.T) {
	db := h.tg.NewDB(t)
	a, b := idem(t, h.openAt(t, db)), idem(t, h.openAt(t, db))
	ctx := t.Context()
	const hold = time.Hour
	claimWant(t, a, "t1", "k1", "h1", "ra", hold, store.Claim{Status: store.ClaimNew})
	claimWant(t, b, "t1", "k1", "h1", "rb", hold, store.Claim{Status: store.ClaimInFlight})
	claimWant(t, b, "t1", "k1", "h2", "rb", hold, store.Claim{Status: store.ClaimMismatch})
	// Another team's same key is independent.
	claimWant(t, b, "t2", "k1", "h9", "rb", hold, store.Claim{Status: store.ClaimNew})

	renewed, err := b.RenewIdempotencyKey(ctx, "t1", "k1", "rb", hold)
	checkErr(t, err, nil)
	if renewed {
		t.Error("a replica that does not hold the key renewed it")
	}
	renewed, err = a.RenewIdempotencyKey(ctx, "t1", "k1", "ra", hold)
	checkErr(t, err, nil)
	if !renewed {
		t.Error("the holder could not renew its claim")
	}
	checkErr(t, b.FinishIdempotencyKey(ctx, "t1", "k1", "rb", "sb-wrong"), sandbox.ErrState)
	checkErr(t, b.ReleaseIdempotencyKey(ctx, "t1", "k1", "rb"), nil) // not its own: nothing
	claimWant(t, b, "t1", "k1", "h1", "rb", hold, store.Claim{Status: store.ClaimInFlight})

	checkErr(t, a.FinishIdempotencyKey(ctx, "t1", "k1", "ra", "sb-1"), nil)
	claimWant(t, b, "t1", "k1", "h1", "rb", hold, store.Claim{Status: store.ClaimDone, ResultID: "sb-1"})
	claimWant(t, a, "t1", "k1", "h1", "ra", hold, store.Claim{Status: store.ClaimDone, ResultID: "sb-1"})
	claimWant(t, b, "t1", "k1", "h2", "rb", hold, store.Claim{Status: store.ClaimMismatch})
	// Finished: no more renewing, finishing or releasing it.
	checkErr(t, a.FinishIdempotencyKey(ctx, "t1", "k1", "ra", "sb-2"), sandbox.ErrState)
	checkErr(t, a.ReleaseIdempotencyKey(ctx, "t1", "k1", "ra"), nil)
	claimWant(t, b, "t1", "k1", "h1", "rb", hold, store.Claim{Status: store.ClaimDone, ResultID: "sb-1"})
	// The other team's is still in flight.
	claimWant(t, a, "t2", "k1", "h9", "ra", hold, store.Claim{Status: store.ClaimInFlight})

	// A request that failed having made nothing releases its key: the
	// next one, even with another body, starts afresh.
	checkErr(t, b.ReleaseIdempotencyKey(ctx, "t2", "k1", "rb"), nil)
	claimWant(t, a, "t2", "k1", "h10", "ra", hold, store.Claim{Status: store.ClaimNew})

	for _, tc := range []struct {
		name, team, key, hash, holder string
		hold                          time.Duration
	}{
		{"empty team", "", "k", "h", "r", hold},
		{"empty key", "t", "", "h", "r", hold},
		{"empty hash", "t", "k", "", "r", hold},
		{"empty holder", "t", "k", "h", "", hold},
		{"zero hold", "t", "k", "h", "r", 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := a.ClaimIdempotencyKey(ctx, tc.team, tc.key, tc.hash, tc.holder, tc.hold)
			checkErr(t, err, sandbox.ErrInvalid)
		})
	}
	checkErr(t, a.FinishIdempotencyKey(ctx, "t1", "k1", "ra", ""), sandbox.ErrInvalid)
}

// testIdempotencyTakeover: a holder that stops renewing (it died) loses
// its claim once the hold passes: another replica takes it over (to
// look for what the dead one made), and the dead one can no longer
// finish or renew it.
func (h *harness) testIdempotencyTakeover(t *testing.T) {
	db := h.tg.NewDB(t)
	a, b := idem(t, h.openAt(t, db)), idem(t, h.openAt(t, db))
	ctx := t.Context()
	claimWant(t, a, "t", "k", "h", "dead", 300*time.Millisecond, store.Claim{Status: store.ClaimNew})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got, err := b.ClaimIdempotencyKey(ctx, "t", "k", "h", "alive", time.Hour)
		checkErr(t, err, nil)
		if got.Status == store.ClaimTakenOver {
			break
		}
		if got.Status != store.ClaimInFlight {
			t.Fatalf("claiming a held key: got %+v, want in flight, then taken over", got)
		}
		if time.Now().After(deadline) {
			t.Fatal("the claim of a holder that stopped renewing never lapsed")
		}
	}
	renewed, err := a.RenewIdempotencyKey(ctx, "t", "k", "dead", time.Hour)
	checkErr(t, err, nil)
	if renewed {
		t.Error("the lapsed holder renewed a claim taken over")
	}
	checkErr(t, a.FinishIdempotencyKey(ctx, "t", "k", "dead", "sb-late"), sandbox.ErrState)
	claimWant(t, a, "t", "k", "h", "dead", time.Hour, store.Claim{Status: store.ClaimInFlight})
	checkErr(t, b.FinishIdempotencyKey(ctx, "t", "k", "alive", "sb-1"), nil)
	claimWant(t, a, "t", "k", "h", "dead", time.Hour, store.Claim{Status: store.ClaimDone, ResultID: "sb-1"})
}

// testIdempotencyExpires: a finished key is kept IdempotencyKeyTTL (on
// the store's clock), then forgotten: the same key makes something new,
// even with another request.
func (h *harness) testIdempotencyExpires(t *testing.T) {
	ts := h.newStore(t)
	s := idem(t, ts)
	ctx := t.Context()
	now := time.Now()
	ts.setNow(func() time.Time { return now })
	claimWant(t, s, "t", "k", "h", "r", time.Hour, store.Claim{Status: store.ClaimNew})
	checkErr(t, s.FinishIdempotencyKey(ctx, "t", "k", "r", "sb-1"), nil)
	ts.setNow(func() time.Time { return now.Add(store.IdempotencyKeyTTL - time.Minute) })
	claimWant(t, s, "t", "k", "h", "r", time.Hour, store.Claim{Status: store.ClaimDone, ResultID: "sb-1"})
	ts.setNow(func() time.Time { return now.Add(store.IdempotencyKeyTTL + time.Minute) })
	claimWant(t, s, "t", "k", "other", "r", time.Hour, store.Claim{Status: store.ClaimNew})
	// Swept keys are gone too: another key claimed long ago.
	ts.setNow(func() time.Time { return now })
	claimWant(t, s, "t", "old", "h", "r", time.Hour, store.Claim{Status: store.ClaimNew})
	checkErr(t, s.FinishIdempotencyKey(ctx, "t", "old", "r", "sb-old"), nil)
	ts.setNow(func() time.Time { return now.Add(3 * store.IdempotencyKeyTTL) })
	claimWant(t, s, "t", "another", "h", "r", time.Hour, store.Claim{Status: store.ClaimNew}) // sweeps
	claimWant(t, s, "t", "old", "h", "r", time.Hour, store.Claim{Status: store.ClaimNew})
}

// testIdempotencyRace: 8 claimers on two stores race for a free key,
// many rounds; each round exactly one gets it, and the others see it in
// flight.
func (h *harness) testIdempotencyRace(t *testing.T) {
	db := h.tg.NewDB(t)
	stores := []store.Idempotency{idem(t, h.openAt(t, db)), idem(t, h.openAt(t, db))}
	ctx := t.Context()
	for round := range 10 {
		key := fmt.Sprintf("key-%d", round)
		var winners, inFlight atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				got, err := stores[i%2].ClaimIdempotencyKey(ctx, "t", key, "h", fmt.Sprintf("r%d", i), time.Hour)
				if err != nil {
					t.Errorf("ClaimIdempotencyKey: %v", err)
				}
				switch got.Status {
				case store.ClaimNew:
					winners.Add(1)
				case store.ClaimInFlight:
					inFlight.Add(1)
				}
			})
		}
		wg.Wait()
		if w, f := winners.Load(), inFlight.Load(); w != 1 || f != 7 {
			t.Fatalf("round %d: %d claimers got the key and %d saw it in flight, want 1 and 7", round, w, f)
		}
	}
}
