// Package storetest is the contract suite every store.Store passes:
// store/sqlite and store/postgres run it from their tests with Run. It
// checks what callers rely on (errors wrapping the sandbox sentinels,
// tenancy, exact time round trips, page cursors, the lease) against a
// real store, and two stores on one database as two processes would
// share it.
package storetest

import (
	"context"
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Target is the store implementation under test.
type Target struct {
	// NewDB makes a new, empty database and returns where it is (a file
	// path, a URL); it is removed when t ends.
	NewDB func(t *testing.T) string
	// Open opens a store on the database at db whose own clock (the
	// times it makes itself: a key's last use, a revocation, a deletion)
	// is now. Run closes it when the test ends.
	Open func(t *testing.T, db string, now func() time.Time) (store.Store, error)
	// KeptDeleted, if set, counts the deleted sandboxes whose place in
	// the listing order s keeps for page cursors (to check they are
	// pruned).
	KeptDeleted func(t *testing.T, s store.Store) int
}

// Contract values the stores share.
const (
	// touchEvery: TouchSandbox writes only a touch this much later than
	// the recorded activity.
	touchEvery = time.Second
	// keepDeleted: how long a deleted sandbox's place is kept for cursors.
	keepDeleted = 24 * time.Hour
	// defaultLimit and maxLimit: pages of ListSandboxes and ListRuns.
	defaultLimit = 100
	maxLimit     = 1000
)

// t0 has nanoseconds and a zone other than UTC, to show that times
// round-trip exactly (time.Equal) and not only to the second or in UTC.
var t0 = time.Date(2026, 3, 1, 12, 0, 0, 123456789, time.FixedZone("CET", 3600))

type harness struct{ tg Target }

// Run runs the contract suite against tg, each test in parallel on a
// new database.
func Run(t *testing.T, tg Target) {
	h := &harness{tg: tg}
	for _, c := range []struct {
		name string
		fn   func(*testing.T)
	}{
		{"Teams", h.testTeams},
		{"ListTeamsEmpty", h.testListTeamsEmpty},
		{"Keys", h.testKeys},
		{"PutGetSandbox", h.testPutGetSandbox},
		{"TouchSandbox", h.testTouchSandbox},
		{"DeleteSandbox", h.testDeleteSandbox},
		{"ListSandboxes", h.testListSandboxes},
		{"ListSandboxesPages", h.testListSandboxesPages},
		{"ListSandboxesDefaultLimit", h.testListSandboxesDefaultLimit},
		{"Snapshots", h.testSnapshots},
		{"Ports", h.testPorts},
		{"AddUsage", h.testAddUsage},
		{"UsageByTeam", h.testUsageByTeam},
		{"Runs", h.testRuns},
		{"RunEvents", h.testRunEvents},
		{"Secrets", h.testSecrets},
		{"Tenancy", h.testTenancy},
		{"Ping", h.testPing},
		{"CancelledContext", h.testCancelledContext},
		{"DurableAcrossReopen", h.testDurableAcrossReopen},
		{"ConcurrentWriters", h.testConcurrentWriters},
		{"ConcurrentPutSandbox", h.testConcurrentPutSandbox},
		{"UpdateSandbox", h.testUpdateSandbox},
		{"UpdateSandboxNoLostUpdate", h.testUpdateSandboxNoLostUpdate},
		{"Lease", h.testLease},
		{"LeaseExpires", h.testLeaseExpires},
		{"LeaseUntrustedClock", h.testLeaseUntrustedClock},
		{"LeaseRace", h.testLeaseRace},
		{"Idempotency", h.testIdempotency},
		{"IdempotencyTakeover", h.testIdempotencyTakeover},
		{"IdempotencyExpires", h.testIdempotencyExpires},
		{"IdempotencyRace", h.testIdempotencyRace},
	} {
		t.Run(c.name, func(t *testing.T) {
			t.Parallel()
			c.fn(t)
		})
	}
}

// testStore is a store with the clock it was opened with.
type testStore struct {
	store.Store
	clock *clock
}

// setNow sets the store's own clock; nil puts back the real one.
func (s *testStore) setNow(now func() time.Time) { s.clock.set(now) }

type clock struct {
	mu  sync.Mutex
	now func() time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	now := c.now
	c.mu.Unlock()
	if now == nil {
		return time.Now()
	}
	return now()
}

func (c *clock) set(now func() time.Time) {
	c.mu.Lock()
	c.now = now
	c.mu.Unlock()
}

// newStore returns a store on a new database.
func (h *harness) newStore(t *testing.T) *testStore {
	t.Helper()
	return h.openAt(t, h.tg.NewDB(t))
}

// openAt opens a store on db and closes it when the test ends.
func (h *harness) openAt(t *testing.T, db string) *testStore {
	t.Helper()
	c := &clock{}
	s, err := h.tg.Open(t, db, c.Now)
	if err != nil {
		t.Fatalf("opening the store: %v", err)
	}
	ts := &testStore{Store: s, clock: c}
	var once sync.Once
	t.Cleanup(func() {
		once.Do(func() {
			if err := s.Close(); err != nil {
				t.Errorf("Close: %v", err)
			}
		})
	})
	return ts
}

// checkErr fails the test unless err wraps want (nil: no error) and its
// message has every part of msg.
func checkErr(t *testing.T, err, want error, msg ...string) {
	t.Helper()
	if want == nil {
		if err != nil {
			t.Fatalf("got error %v, want none", err)
		}
		return
	}
	if !errors.Is(err, want) {
		t.Fatalf("got error %v, want one wrapping %q", err, want)
	}
	for _, m := range msg {
		if !strings.Contains(err.Error(), m) {
			t.Errorf("got error %q, want it to mention %q", err, m)
		}
	}
}

// ctxCancelled is a context already cancelled.
func ctxCancelled(t *testing.T) context.Context {
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	return ctx
}

func (h *harness) testCancelledContext(t *testing.T) {
	s := h.newStore(t)
	err := s.CreateTeam(ctxCancelled(t), teamA)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("CreateTeam with a cancelled ctx: got %v, want context.Canceled", err)
	}
	if _, err := s.GetTeam(t.Context(), teamA.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("after a cancelled CreateTeam: got %v, want no team", err)
	}
}
