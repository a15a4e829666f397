package storetest

import (
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// testLease: two holders on two stores sharing one database (two
// replicas): one holds, the other is refused; the holder renews;
// release frees it for the other; bad arguments are ErrInvalid.
func (h *harness) testLease(t *testing.T) {
	db := h.tg.NewDB(t)
	a, b := h.openAt(t, db), h.openAt(t, db)
	ctx := t.Context()
	const ttl = time.Hour
	acquire := func(s *testStore, name, holder string, want bool) {
		t.Helper()
		got, err := s.AcquireLease(ctx, name, holder, ttl)
		checkErr(t, err, nil)
		if got != want {
			t.Fatalf("AcquireLease(%q, %q): got %v, want %v", name, holder, got, want)
		}
	}
	acquire(a, "lifecycle", "replica-a", true)
	acquire(b, "lifecycle", "replica-b", false)
	acquire(a, "lifecycle", "replica-a", true) // renew
	acquire(b, "lifecycle", "replica-b", false)
	// Another lease is independent.
	acquire(b, "runs", "replica-b", true)
	acquire(a, "runs", "replica-a", false)

	// Releasing someone else's lease does nothing.
	checkErr(t, b.ReleaseLease(ctx, "lifecycle", "replica-b"), nil)
	acquire(b, "lifecycle", "replica-b", false)
	// The holder's release frees it at once, not at the ttl.
	checkErr(t, a.ReleaseLease(ctx, "lifecycle", "replica-a"), nil)
	acquire(b, "lifecycle", "replica-b", true)
	acquire(a, "lifecycle", "replica-a", false)
	// Releasing a lease no one holds is fine.
	checkErr(t, a.ReleaseLease(ctx, "never", "replica-a"), nil)

	for _, tc := range []struct {
		name, lease, holder string
		ttl                 time.Duration
	}{
		{"empty name", "", "x", ttl},
		{"empty holder", "x", "", ttl},
		{"zero ttl", "x", "y", 0},
		{"negative ttl", "x", "y", -time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := a.AcquireLease(ctx, tc.lease, tc.holder, tc.ttl)
			checkErr(t, err, sandbox.ErrInvalid)
			if got {
				t.Errorf("got the lease with the error")
			}
		})
	}
	checkErr(t, a.ReleaseLease(ctx, "", "x"), sandbox.ErrInvalid)
	checkErr(t, a.ReleaseLease(ctx, "x", ""), sandbox.ErrInvalid)
}

// testLeaseExpires: a holder that stops renewing (it died) loses the
// lease once its ttl passes, and another takes it; a renewal keeps it
// past the first ttl. The test waits on the real clock (the database's),
// polling, with no bound on how late expiry may come but the test's.
func (h *harness) testLeaseExpires(t *testing.T) {
	db := h.tg.NewDB(t)
	a, b := h.openAt(t, db), h.openAt(t, db)
	ctx := t.Context()
	const ttl = 300 * time.Millisecond
	got, err := a.AcquireLease(ctx, "lifecycle", "dead", ttl)
	checkErr(t, err, nil)
	if !got {
		t.Fatal("the first holder did not get a free lease")
	}
	// Whatever the timing, a second holder eventually gets it.
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, err := b.AcquireLease(ctx, "lifecycle", "alive", time.Hour)
		checkErr(t, err, nil)
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease of a holder that stopped renewing never expired")
		}
		time.Sleep(50 * time.Millisecond)
	}
	// And, holding it for an hour, keeps it from the old holder.
	got, err = a.AcquireLease(ctx, "lifecycle", "dead", ttl)
	checkErr(t, err, nil)
	if got {
		t.Error("the expired holder took the lease back from the new one")
	}
}

// testLeaseUntrustedClock: a replica whose clock is an hour (or a day)
// ahead or behind cannot take a lease another holds, nor keep one past
// its ttl: leases run on the database's clock, not the store's.
func (h *harness) testLeaseUntrustedClock(t *testing.T) {
	db := h.tg.NewDB(t)
	honest, skewed := h.openAt(t, db), h.openAt(t, db)
	ctx := t.Context()
	got, err := honest.AcquireLease(ctx, "lifecycle", "honest", time.Hour)
	checkErr(t, err, nil)
	if !got {
		t.Fatal("no lease for the first holder")
	}
	for _, skew := range []time.Duration{2 * time.Hour, 48 * time.Hour, -48 * time.Hour} {
		skewed.setNow(func() time.Time { return time.Now().Add(skew) })
		got, err := skewed.AcquireLease(ctx, "lifecycle", "skewed", time.Minute)
		checkErr(t, err, nil)
		if got {
			t.Fatalf("a holder whose clock is %v off took a lease another holds for an hour", skew)
		}
	}
	// A holder with a clock behind does not keep its lease longer.
	skewed.setNow(func() time.Time { return time.Now().Add(-48 * time.Hour) })
	got, err = skewed.AcquireLease(ctx, "other", "skewed", 200*time.Millisecond)
	checkErr(t, err, nil)
	if !got {
		t.Fatal("no free lease for the skewed holder")
	}
	for deadline := time.Now().Add(30 * time.Second); ; {
		got, err := honest.AcquireLease(ctx, "other", "honest", time.Hour)
		checkErr(t, err, nil)
		if got {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the lease of a holder whose clock is behind did not expire")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// testLeaseRace: 8 holders on two stores race for a free lease, many
// rounds; each round exactly one wins.
func (h *harness) testLeaseRace(t *testing.T) {
	db := h.tg.NewDB(t)
	stores := []*testStore{h.openAt(t, db), h.openAt(t, db)}
	ctx := t.Context()
	for round := range 10 {
		name := fmt.Sprintf("round-%d", round)
		var winners atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				got, err := stores[i%2].AcquireLease(ctx, name, fmt.Sprintf("holder-%d", i), time.Hour)
				if err != nil {
					t.Errorf("AcquireLease: %v", err)
				}
				if got {
					winners.Add(1)
				}
			})
		}
		wg.Wait()
		if n := winners.Load(); n != 1 {
			t.Fatalf("round %d: %d holders got the lease, want 1", round, n)
		}
	}
}
