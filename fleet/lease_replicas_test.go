package fleet

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// TestMain shares one PostgreSQL server among the tests' databases.
func TestMain(m *testing.M) { pgtest.Main(m) }

// cutLeaser is one replica's way to the shared leases: cut, every call
// fails, as for a replica that lost its store (or was killed: it renews
// nothing and releases nothing).
type cutLeaser struct {
	store.Leaser
	cut atomic.Bool
}

func (c *cutLeaser) AcquireLease(ctx context.Context, name, holder string, ttl time.Duration) (bool, error) {
	if c.cut.Load() {
		return false, errors.New("cut off from the store")
	}
	return c.Leaser.AcquireLease(ctx, name, holder, ttl)
}

func (c *cutLeaser) ReleaseLease(ctx context.Context, name, holder string) error {
	if c.cut.Load() {
		return errors.New("cut off from the store")
	}
	return c.Leaser.ReleaseLease(ctx, name, holder)
}

// leasedReplica is one of the fleets of leasedReplicas.
type leasedReplica struct {
	*Fleet
	leaser *cutLeaser
}

// opener makes a new empty store for a test.
type opener func(t *testing.T) store.Store

// stores are the stores replicas share: SQLite (one host) and
// PostgreSQL (pgtest's real server; skipped only where it is absent).
var stores = map[string]opener{
	"sqlite": func(t *testing.T) store.Store {
		db, err := sqlite.Open(context.Background(), filepath.Join(t.TempDir(), "cove.db"))
		if err != nil {
			t.Fatal(err)
		}
		return db
	},
	"postgres": func(t *testing.T) store.Store {
		db, err := postgres.Open(context.Background(), pgtest.NewDatabase(t))
		if err != nil {
			t.Fatal(err)
		}
		return db
	},
}

// onEachStore runs test on each of stores.
func onEachStore(t *testing.T, test func(t *testing.T, open opener)) {
	for name, open := range stores {
		t.Run(name, func(t *testing.T) { test(t, open) })
	}
}

// leasedReplicas are n fleets over one store and one runtime, electing
// their lifecycle loop through the store's own lease: n `cove serve`
// replicas over one store. The loop's lease lives 2 s past a renew
// (short, so failover comes soon); nothing asserts how soon.
func leasedReplicas(t *testing.T, open opener, n int) ([]leasedReplica, store.Store) {
	t.Helper()
	dir := t.TempDir()
	db := open(t)
	t.Cleanup(func() { db.Close() })
	if err := db.CreateTeam(context.Background(), store.Team{ID: "t", Name: "t", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	shared := store.Leaser(db) // the store's own lease, as replicas use it
	rt := fake.New()
	var reps []leasedReplica
	for i := range n {
		l := &cutLeaser{Leaser: shared}
		f, err := New(Config{Runtime: rt, Store: db, DataDir: dir, Lease: l, Holder: fmt.Sprintf("replica-%d", i),
			LeaseTTL: 2 * time.Second, LifecycleInterval: 20 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { f.Close() })
		reps = append(reps, leasedReplica{f, l})
	}
	return reps, db
}

// eventually polls cond until it holds; after a minute the test fails.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for end := time.Now().Add(time.Minute); time.Now().Before(end); time.Sleep(10 * time.Millisecond) {
		if cond() {
			return
		}
	}
	t.Fatalf("a minute passed and still not: %s", what)
}

// holders returns the replicas that run the lifecycle loop now.
func holders(reps []leasedReplica) []int {
	var in []int
	for i, r := range reps {
		if r.LeaseHeld() {
			in = append(in, i)
		}
	}
	return in
}

// TestLeaseOneLoop: of three replicas started at once, one runs the
// lifecycle loop and the others do not, all along.
func TestLeaseOneLoop(t *testing.T) {
	onEachStore(t, func(t *testing.T, open opener) {
		reps, _ := leasedReplicas(t, open, 3)
		for _, r := range reps {
			if err := r.Reconcile(context.Background()); err != nil {
				t.Fatal(err)
			}
			r.Start()
		}
		eventually(t, "one replica runs the loop", func() bool { return len(holders(reps)) == 1 })
		holder := holders(reps)[0]
		start := reps[holder].ticks.Load()
		// Many renews and many retries of the others later, still the one.
		for range 200 {
			if h := holders(reps); len(h) > 1 {
				t.Fatalf("replicas %v run the loop at once", h)
			}
			time.Sleep(5 * time.Millisecond)
		}
		for i, r := range reps {
			if i != holder && r.ticks.Load() != 0 {
				t.Errorf("replica %d, not the holder, ran %d rounds of the loop", i, r.ticks.Load())
			}
		}
		eventually(t, "the holder's loop goes round", func() bool { return reps[holder].ticks.Load() > start+2 })
	})
}

// TestLeaseFailover: the holder cut off from the store stops its loop
// (its renew fails) and another replica takes the lease once it expires
// and does the loop's work: a sandbox past its deadline is stopped. A
// replica that closes cleanly hands the lease on too.
func TestLeaseFailover(t *testing.T) {
	onEachStore(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		reps, st := leasedReplicas(t, open, 2)
		for _, r := range reps {
			r.Start()
		}
		eventually(t, "one replica runs the loop", func() bool { return len(holders(reps)) == 1 })
		first := holders(reps)[0]
		other := reps[1-first]

		rec, _, err := other.Create(ctx, "t", api.CreateSandbox{})
		if err != nil {
			t.Fatal(err)
		}
		reps[first].leaser.cut.Store(true) // as killed: no renew, no release
		eventually(t, "the cut holder stops its loop", func() bool { return !reps[first].LeaseHeld() })
		eventually(t, "the other replica takes the lease", func() bool { return other.LeaseHeld() })

		// Past its deadline now: the new holder's loop stops it.
		got, err := st.GetSandbox(ctx, "", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		got.Deadline = time.Now().Add(-time.Second)
		if err := st.PutSandbox(ctx, got); err != nil {
			t.Fatal(err)
		}
		eventually(t, "the new holder stops the expired sandbox", func() bool {
			r, err := st.GetSandbox(ctx, "", rec.ID)
			return err == nil && r.State == store.StateStopped
		})

		// Back again, the first replica never runs the loop beside the other.
		reps[first].leaser.cut.Store(false)
		for range 100 {
			if h := holders(reps); len(h) > 1 {
				t.Fatalf("replicas %v run the loop at once", h)
			}
			time.Sleep(5 * time.Millisecond)
		}
		// A clean close releases it, and the first takes it.
		eventually(t, "the other replica holds the lease", func() bool { return other.LeaseHeld() })
		other.Close()
		eventually(t, "the first replica takes the released lease", func() bool { return reps[first].LeaseHeld() })
	})
}

// TestLeaseNoLostUpdate: replicas changing one record at once (each
// its own label) lose none of the other's changes: every read-modify-
// write is one transaction of the store.
func TestLeaseNoLostUpdate(t *testing.T) {
	onEachStore(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		reps, st := leasedReplicas(t, open, 2)
		rec, _, err := reps[0].Create(ctx, "t", api.CreateSandbox{})
		if err != nil {
			t.Fatal(err)
		}
		const each = 25
		var wg sync.WaitGroup
		errs := make(chan error, 2*each)
		for i, r := range reps {
			wg.Go(func() {
				for j := range each {
					key := fmt.Sprintf("cove.test-%d-%d", i, j)
					if _, err := r.SetOwnLabels(ctx, "t", rec.ID, func(l map[string]string) { l[key] = "1" }); err != nil {
						errs <- err
					}
				}
			})
		}
		wg.Wait()
		close(errs)
		for err := range errs {
			t.Fatal(err)
		}
		got, err := st.GetSandbox(ctx, "", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		for i := range reps {
			for j := range each {
				if key := fmt.Sprintf("cove.test-%d-%d", i, j); got.Spec.Labels[key] != "1" {
					t.Errorf("replica %d's label %s was lost", i, key)
				}
			}
		}
	})
}

// TestLeaseQuotaAcrossReplicas: creates racing on two replicas pass a
// team's quota only as far as it goes.
func TestLeaseQuotaAcrossReplicas(t *testing.T) {
	onEachStore(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		reps, st := leasedReplicas(t, open, 2)
		if err := st.SetQuota(ctx, "t", store.Quota{Sandboxes: 3}); err != nil {
			t.Fatal(err)
		}
		var made atomic.Int64
		var wg sync.WaitGroup
		for _, r := range reps {
			for range 5 {
				wg.Go(func() {
					_, _, err := r.Create(ctx, "t", api.CreateSandbox{})
					switch {
					case err == nil:
						made.Add(1)
					case !errors.Is(err, ErrQuota):
						t.Errorf("a create over the quota: %v, want ErrQuota", err)
					}
				})
			}
		}
		wg.Wait()
		running, _, err := st.ListSandboxes(ctx, store.SandboxFilter{TeamID: "t", State: store.StateRunning})
		if err != nil {
			t.Fatal(err)
		}
		if made.Load() != 3 || len(running) != 3 {
			t.Errorf("%d creates passed and %d sandboxes run, with a quota of 3", made.Load(), len(running))
		}
	})
}

// TestLeaseMeterHere: bytes through a replica that does not run the
// lifecycle loop are billed too, once.
func TestLeaseMeterHere(t *testing.T) {
	onEachStore(t, func(t *testing.T, open opener) {
		ctx := context.Background()
		reps, st := leasedReplicas(t, open, 2)
		for _, r := range reps {
			r.Start()
		}
		eventually(t, "one replica runs the loop", func() bool { return len(holders(reps)) == 1 })
		other := reps[1-holders(reps)[0]]
		rec, _, err := other.Create(ctx, "t", api.CreateSandbox{})
		if err != nil {
			t.Fatal(err)
		}
		other.CountIn(rec.ID, 1000)
		other.CountOut(rec.ID, 300)
		other.meterHere(ctx)
		other.meterHere(ctx) // nothing new: nothing more billed
		sums, err := st.UsageByTeam(ctx, "t", rec.CreatedAt.Add(-time.Hour), time.Now().Add(time.Hour))
		if err != nil {
			t.Fatal(err)
		}
		var in, out int64
		for _, u := range sums {
			if u.SandboxID == rec.ID {
				in, out = u.BytesIn, u.BytesOut
			}
		}
		if in != 1000 || out != 300 {
			t.Errorf("billed %d bytes in and %d out through the replica not running the loop, want 1000 and 300", in, out)
		}
	})
}
