package storetest

import (
	"fmt"
	"maps"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/store"
)

// testDurableAcrossReopen writes one of everything, closes the store,
// opens the database again and finds it all as written.
func (h *harness) testDurableAcrossReopen(t *testing.T) {
	db := h.tg.NewDB(t)
	ctx := t.Context()
	key := store.APIKey{ID: "key-a", TeamID: teamA.ID, Name: "ci", Prefix: "cove_a", Hash: "hash-a", Admin: true, CreatedAt: t0, LastUsedAt: ptr(t0.Add(time.Hour))}
	box := sb("sb-1", teamA.ID, 0, "env", "prod")
	box.Deadline = t0.Add(time.Hour)
	box.IdleTimeout = time.Minute
	snap := store.Snapshot{ID: "snap-1", TeamID: teamA.ID, SandboxID: box.ID, Size: 42, CreatedAt: t0}
	port := store.Port{SandboxID: box.ID, Port: 8080, Token: "tok", CreatedAt: t0}
	u := use(teamA.ID, box.ID, 0, 10, 1.5, 1000)

	s, err := h.tg.Open(t, db, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		s.CreateTeam(ctx, teamA),
		s.CreateKey(ctx, key),
		s.PutSandbox(ctx, box),
		s.PutSnapshot(ctx, snap),
		s.PutPort(ctx, port),
		s.AddUsage(ctx, u),
	} {
		checkErr(t, err, nil)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s2 := h.openAt(t, db)
	check := func(what string, want, got any, err error) {
		t.Helper()
		checkErr(t, err, nil)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s after reopening (-want +got):\n%s", what, diff)
		}
	}
	gotTeam, err := s2.GetTeam(ctx, teamA.ID)
	check("team", teamA, gotTeam, err)
	gotKeys, err := s2.ListKeys(ctx, teamA.ID)
	check("keys", []store.APIKey{key}, gotKeys, err)
	gotBox, err := s2.GetSandbox(ctx, teamA.ID, box.ID)
	check("sandbox", box, gotBox, err)
	page, _, err := s2.ListSandboxes(ctx, store.SandboxFilter{Labels: map[string]string{"env": "prod"}})
	check("sandboxes by label", []store.Sandbox{box}, page, err)
	gotSnap, err := s2.GetSnapshot(ctx, teamA.ID, snap.ID)
	check("snapshot", snap, gotSnap, err)
	gotPort, err := s2.GetPort(ctx, box.ID, port.Port)
	check("port", port, gotPort, err)
	gotUsage, err := s2.UsageByTeam(ctx, teamA.ID, u.Start, u.End)
	check("usage", []store.Usage{u}, gotUsage, err)
}

// testConcurrentWriters runs 20 goroutines that write at once, half of
// them through a second store on the same database, as a second process
// would, while others read. No call may fail and every write must be
// there after.
func (h *harness) testConcurrentWriters(t *testing.T) {
	db := h.tg.NewDB(t)
	s1 := h.openAt(t, db)
	s2 := h.openAt(t, db)
	ctx := t.Context()
	checkErr(t, s1.CreateTeam(ctx, teamA), nil)
	checkErr(t, s1.CreateKey(ctx, store.APIKey{ID: "k", TeamID: teamA.ID, Hash: "h"}), nil)

	const writers, each = 20, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*3+100)
	for g := range writers {
		s := s1
		if g%2 == 1 {
			s = s2
		}
		wg.Go(func() {
			for i := range each {
				x := sb(fmt.Sprintf("sb-%02d-%02d", g, i), teamA.ID, g*each+i, "g", strconv.Itoa(g))
				if err := s.PutSandbox(ctx, x); err != nil {
					errs <- err
					continue
				}
				if err := s.TouchSandbox(ctx, x.ID, x.CreatedAt.Add(time.Minute)); err != nil {
					errs <- err
				}
				if err := s.AddUsage(ctx, use(teamA.ID, x.ID, 0, 1, 1, 1)); err != nil {
					errs <- err
				}
			}
		})
	}
	// Readers, and the one read that sometimes writes, alongside.
	done := make(chan struct{})
	for r := range 2 {
		s := []*testStore{s1, s2}[r%2]
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.KeyByHash(ctx, "h"); err != nil {
					errs <- err
				}
				if _, _, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: teamA.ID, Limit: 10}); err != nil {
					errs <- err
				}
				time.Sleep(5 * time.Millisecond) // a busy server, not a spin loop
			}
		})
	}
	go func() {
		// Stop the readers when the writers are done: wait for the
		// writers' count of rows rather than a second WaitGroup.
		defer close(done)
		deadline := time.Now().Add(60 * time.Second)
		for time.Now().Before(deadline) {
			u, err := s1.UsageByTeam(ctx, teamA.ID, at(0), at(1))
			if err == nil && len(u) == writers*each {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent call: %v", err)
	}

	all, _, err := s2.ListSandboxes(ctx, store.SandboxFilter{Limit: maxLimit})
	checkErr(t, err, nil)
	if len(all) != writers*each {
		t.Errorf("got %d sandboxes, want %d", len(all), writers*each)
	}
	for _, x := range all {
		if want := x.CreatedAt.Add(time.Minute); !x.LastActivity.Equal(want) {
			t.Errorf("sandbox %s: last activity %v, want %v", x.ID, x.LastActivity, want)
		}
	}
	u, err := s1.UsageByTeam(ctx, teamA.ID, at(0), at(1))
	checkErr(t, err, nil)
	if len(u) != writers*each {
		t.Errorf("got usage of %d sandboxes, want %d", len(u), writers*each)
	}
}

// testConcurrentPutSandbox: two stores on one database (two replicas)
// put the same sandbox over and over with different labels, while both
// touch it. After, the record is one of the puts whole, and a label
// filter finds it by exactly the labels of its spec (the label copy
// never mixes two puts). Touches never move LastActivity back.
func (h *harness) testConcurrentPutSandbox(t *testing.T) {
	db := h.tg.NewDB(t)
	s1 := h.openAt(t, db)
	s2 := h.openAt(t, db)
	ctx := t.Context()
	checkErr(t, s1.CreateTeam(ctx, teamA), nil)
	const rounds = 20
	var wg sync.WaitGroup
	errs := make(chan error, 4*rounds)
	for w, s := range []*testStore{s1, s2} {
		wg.Go(func() {
			for i := range rounds {
				x := sb("sb-1", teamA.ID, 0, "writer", strconv.Itoa(w), fmt.Sprintf("w%d-%d", w, i), "x")
				if err := s.PutSandbox(ctx, x); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent put: %v", err)
	}
	got, err := s2.GetSandbox(ctx, teamA.ID, "sb-1")
	checkErr(t, err, nil)
	for k, v := range got.Spec.Labels {
		page, _, err := s1.ListSandboxes(ctx, store.SandboxFilter{Labels: map[string]string{k: v}})
		checkErr(t, err, nil)
		if len(page) != 1 {
			t.Errorf("label %s=%s of the stored spec finds %d sandboxes, want 1", k, v, len(page))
		}
	}
	// A label of the other writer's last put is not in the index.
	other := map[string]string{"writer": "0"}
	if got.Spec.Labels["writer"] == "0" {
		other["writer"] = "1"
	}
	page, _, err := s1.ListSandboxes(ctx, store.SandboxFilter{Labels: other})
	checkErr(t, err, nil)
	if len(page) != 0 {
		t.Errorf("labels %v, not in the stored spec %v, still match", other, got.Spec.Labels)
	}
	if want := maps.Clone(got.Spec.Labels); len(want) != 2 {
		t.Errorf("stored labels %v: want the two of one put", want)
	}
}
