package fleet

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/sqlite"
)

// forkingRuntime is the fake runtime with a Fork that makes a sandbox of
// the same spec (the fake has no disk to copy).
type forkingRuntime struct{ *fake.Runtime }

func (r forkingRuntime) Fork(ctx context.Context, id string) (sandbox.Session, error) {
	sess, err := r.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	in, err := sess.Info(ctx)
	if err != nil {
		return nil, err
	}
	return r.Create(ctx, in.Spec)
}

// TestFrozenHidden: a frozen copy is a snapshot, never a sandbox: not
// got, found, listed (pages of one step over it) or counted, not another
// team's to see; it is stopped in the runtime, outside the quota, and a
// sandbox thawed from it gets the create's labels and TTL.
func TestFrozenHidden(t *testing.T) {
	ctx := context.Background()
	dir := t.TempDir()
	db, err := sqlite.Open(ctx, filepath.Join(dir, "cove.db"))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	for _, team := range []string{"t", "u"} {
		if err := db.CreateTeam(ctx, store.Team{ID: team, Name: team, CreatedAt: time.Now(), Quota: store.Quota{Sandboxes: 2}}); err != nil {
			t.Fatal(err)
		}
	}
	rt := forkingRuntime{fake.New()}
	f, err := New(Config{Runtime: rt, Store: db, DataDir: dir, NoLifecycle: true})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	var snaps []store.Snapshot
	for range 2 {
		rec, _, err := f.Create(ctx, "t", api.CreateSandbox{Labels: map[string]string{"k": "v"}})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, rec.ID)
		sn, err := f.Freeze(ctx, "t", rec.ID)
		if err != nil {
			t.Fatal(err)
		}
		snaps = append(snaps, sn)
	}
	got, err := f.Frozen(ctx, "t")
	if err != nil || len(got) != 2 || got[0].ID != snaps[0].ID || got[1].SandboxID != ids[1] {
		t.Fatalf("frozen: %+v %v, want %+v", got, err, snaps)
	}
	if other, err := f.Frozen(ctx, "u"); err != nil || len(other) != 0 {
		t.Errorf("another team's frozen: %+v %v", other, err)
	}
	if _, err := f.Freeze(ctx, "u", ids[0]); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team freezes: %v", err)
	}

	// Pages of one give the two sandboxes, never a copy.
	var listed []string
	cursor := ""
	for range 10 {
		page, next, err := f.List(ctx, "t", store.SandboxFilter{Limit: 1, After: cursor})
		if err != nil {
			t.Fatal(err)
		}
		for _, rec := range page {
			listed = append(listed, rec.ID)
		}
		if cursor = next; cursor == "" {
			break
		}
	}
	if !slices.Equal(listed, ids) {
		t.Errorf("listed %v, want %v", listed, ids)
	}
	all, _ := f.allSandboxes(ctx, "t")
	for _, rec := range all {
		if !IsFrozen(rec) {
			continue
		}
		if _, err := f.Get(ctx, "t", rec.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("get the copy %s: %v", rec.ID, err)
		}
		if _, err := f.Find(ctx, rec.ID); !errors.Is(err, sandbox.ErrNotFound) {
			t.Errorf("find the copy %s: %v", rec.ID, err)
		}
		if in, err := rt.List(ctx); err != nil || !slices.ContainsFunc(in, func(i sandbox.Info) bool { return i.ID == rec.ID && i.State == sandbox.StateStopped }) {
			t.Errorf("the copy %s in the runtime: %+v %v, want stopped", rec.ID, in, err)
		}
	}
	if counts, err := f.Counts(ctx); err != nil || counts[store.StateRunning] != 2 || counts[store.StateStopped] != 0 {
		t.Errorf("counts %v %v, want the 2 sandboxes", counts, err)
	}

	// At the quota of two: a thaw is over it; with one deleted, it is not.
	if _, err := f.Thaw(ctx, "t", snaps[0].ID, api.CreateSandbox{}, nil); !errors.Is(err, ErrQuota) {
		t.Errorf("thaw over the quota: %v", err)
	}
	if err := f.Delete(ctx, "t", ids[0]); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Thaw(ctx, "u", snaps[0].ID, api.CreateSandbox{}, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team thaws: %v", err)
	}
	rec, err := f.Thaw(ctx, "t", snaps[0].ID, api.CreateSandbox{TTLSeconds: 90, Labels: map[string]string{"new": "1"}, OnExpire: store.ExpireDelete},
		map[string]string{"cove.mark": "x"})
	if err != nil {
		t.Fatal(err)
	}
	if rec.State != store.StateRunning || rec.Spec.TTL != 90*time.Second || rec.OnExpire != store.ExpireDelete || IsFrozen(rec) ||
		rec.Spec.Labels["new"] != "1" || rec.Spec.Labels["k"] != "" || rec.Spec.Labels["cove.mark"] != "x" || rec.Spec.Labels[teamLabel] != "t" {
		t.Errorf("thawed: %+v", rec)
	}
	if _, err := f.Thaw(ctx, "t", snaps[0].ID, api.CreateSandbox{Template: "other"}, nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("thaw with a template: %v", err)
	}
	// A network other than the snapshot's (none) is refused, not
	// dropped for it; the same one is the snapshot's.
	for _, n := range []api.Network{{Mode: "internet"}, {Mode: "allow", Allow: []string{"example.com"}}} {
		if _, err := f.Thaw(ctx, "t", snaps[0].ID, api.CreateSandbox{Network: &n}, nil); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("thaw with network %+v from a snapshot without one: %v", n, err)
		}
	}
	if _, err := f.thawRecord(frozenOf(t, f, snaps[0].ID), api.CreateSandbox{Network: &api.Network{Mode: "none"}}, nil); err != nil {
		t.Errorf("thaw with the snapshot's own network: %v", err)
	}

	if err := f.DeleteFrozen(ctx, "u", snaps[0].ID); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("another team deletes: %v", err)
	}
	for _, sn := range snaps {
		if err := f.DeleteFrozen(ctx, "t", sn.ID); err != nil {
			t.Errorf("delete %s: %v", sn.ID, err)
		}
	}
	if got, _ := f.Frozen(ctx, "t"); len(got) != 0 {
		t.Errorf("after deleting: %+v", got)
	}
	if _, err := f.Thaw(ctx, "t", snaps[0].ID, api.CreateSandbox{}, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("thaw a deleted snapshot: %v", err)
	}
}

// frozenOf reads team t's frozen copy sid.
func frozenOf(t *testing.T, f *Fleet, sid string) store.Sandbox {
	t.Helper()
	fr, err := f.frozen(context.Background(), "t", sid)
	if err != nil {
		t.Fatal(err)
	}
	return fr
}
