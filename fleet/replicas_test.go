package fleet

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// twoReplicas are two fleets over one store and one runtime, as two
// `cove serve` replicas over one PostgreSQL would be.
func twoReplicas(t *testing.T) (a, b *Fleet, st store.Store) {
	t.Helper()
	dir := t.TempDir()
	db, err := sqlite.Open(context.Background(), filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	if err := db.CreateTeam(context.Background(), store.Team{ID: "t", Name: "t", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	rt := fake.New()
	for _, f := range []**Fleet{&a, &b} {
		*f, err = New(Config{Runtime: rt, Store: db, DataDir: dir, NoLifecycle: true})
		if err != nil {
			t.Fatal(err)
		}
	}
	return a, b, db
}

// TestReplicasSeeEachOther: what one replica does to a sandbox, the other
// sees at its next call: nothing it keeps can answer for the store.
func TestReplicasSeeEachOther(t *testing.T) {
	ctx := context.Background()
	a, b, st := twoReplicas(t)
	rec, _, err := a.Create(ctx, "t", api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Session(ctx, "t", rec.ID); err != nil {
		t.Fatalf("b's session of a's sandbox: %v", err)
	}
	if _, _, err := b.Session(ctx, "other", rec.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team's session: %v, want ErrNotFound", err)
	}

	if _, err := a.Stop(ctx, "t", rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Session(ctx, "t", rec.ID); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("b's session after a stopped it: %v, want ErrState", err)
	}
	resumed, err := a.Resume(ctx, "t", rec.ID)
	if err != nil {
		t.Fatal(err)
	}
	got, sess, err := b.Session(ctx, "t", rec.ID)
	if err != nil || !got.StartedAt.Equal(resumed.StartedAt) {
		t.Fatalf("b's session after a resumed it: %+v %v", got, err)
	}
	if _, err := sess.Info(ctx); err != nil {
		t.Errorf("b's session after a resumed it does not answer: %v", err)
	}

	if _, err := b.SetOwnLabels(ctx, "t", rec.ID, func(l map[string]string) { l["cove.test"] = "b" }); err != nil {
		t.Fatal(err)
	}
	if got, err := a.Get(ctx, "t", rec.ID); err != nil || got.Spec.Labels["cove.test"] != "b" {
		t.Errorf("a's read after b labelled: %v %v", got.Spec.Labels, err)
	}
	if _, err := b.SetOwnLabels(ctx, "t", rec.ID, func(l map[string]string) { l["mine"] = "x" }); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("setting a tenant's label as the server's own: %v, want ErrInvalid", err)
	}

	// A stream open on a is activity the store hears of at a's flush,
	// so b's lifecycle loop would not take the sandbox for idle.
	before, _ := st.GetSandbox(ctx, "", rec.ID)
	a.cfg.Now = func() time.Time { return before.LastActivity.Add(time.Hour) }
	end := a.Begin(rec.ID)
	a.mu.Lock()
	clear(a.touched) // as if flushed already: only the open stream is left
	a.mu.Unlock()
	a.flushTouches()
	if after, _ := st.GetSandbox(ctx, "", rec.ID); !after.LastActivity.After(before.LastActivity) {
		t.Errorf("a stream open on a did not reach the store: last activity %v, before %v", after.LastActivity, before.LastActivity)
	}
	end()

	if err := a.Delete(ctx, "t", rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.Session(ctx, "t", rec.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("b's session after a deleted it: %v, want ErrNotFound", err)
	}
}

// TestQuota: a create over the team's quota is ErrLimit (ErrQuota).
func TestQuota(t *testing.T) {
	ctx := context.Background()
	a, _, st := twoReplicas(t)
	if err := st.SetQuota(ctx, "t", store.Quota{Sandboxes: 1}); err != nil {
		t.Fatal(err)
	}
	if _, _, err := a.Create(ctx, "t", api.CreateSandbox{}); err != nil {
		t.Fatal(err)
	}
	_, _, err := a.Create(ctx, "t", api.CreateSandbox{})
	if !errors.Is(err, ErrQuota) || !errors.Is(err, sandbox.ErrLimit) {
		t.Errorf("a second sandbox over a quota of one: %v, want ErrQuota (ErrLimit)", err)
	}
}

// TestOpenResumes: Open gives a live session of a stopped sandbox.
func TestOpenResumes(t *testing.T) {
	ctx := context.Background()
	a, _, _ := twoReplicas(t)
	rec, _, err := a.Create(ctx, "t", api.CreateSandbox{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := a.Stop(ctx, "t", rec.ID); err != nil {
		t.Fatal(err)
	}
	if _, err := a.Open(ctx, "t", rec.ID); err != nil {
		t.Fatalf("opening a stopped sandbox: %v", err)
	}
	if got, _ := a.Get(ctx, "t", rec.ID); got.State != store.StateRunning {
		t.Errorf("after Open: %s, want running", got.State)
	}
	if _, err := a.Open(ctx, "other", rec.ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team's Open: %v, want ErrNotFound", err)
	}
}
