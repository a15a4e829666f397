package fleet

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// BenchmarkUpdateReplicas is a read-modify-write of a sandbox record
// (SetOwnLabels) by a fleet sharing a PostgreSQL store with replicas (a
// Lease set), one at a time: what a label change, a stop's record or a
// TTL change costs in store round trips.
func BenchmarkUpdateReplicas(b *testing.B) {
	ctx := context.Background()
	db, err := postgres.Open(ctx, pgtest.NewDatabase(b))
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { db.Close() })
	if err := db.CreateTeam(ctx, store.Team{ID: "t", Name: "t", CreatedAt: time.Now()}); err != nil {
		b.Fatal(err)
	}
	f, err := New(Config{Runtime: fake.New(), Store: db, DataDir: b.TempDir(), Lease: db, Holder: "bench", NoLifecycle: true})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { f.Close() })
	rec, _, err := f.Create(ctx, "t", api.CreateSandbox{})
	if err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		i++
		v := fmt.Sprint(i)
		if _, err := f.SetOwnLabels(ctx, "t", rec.ID, func(l map[string]string) { l["cove.bench"] = v }); err != nil {
			b.Fatal(err)
		}
	}
}
