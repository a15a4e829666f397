package storetest

import (
	"errors"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// testUpdateSandbox: an update changes the record and its label index;
// a failing change writes nothing; the id and team cannot change; a
// sandbox of another team, or none, is ErrNotFound.
func (h *harness) testUpdateSandbox(t *testing.T) {
	s := h.withTeams(t)
	u := s.Store
	ctx := t.Context()
	x := sb("sb-1", teamA.ID, 0, "env", "prod")
	putSandboxes(t, s, x)

	got, err := u.UpdateSandbox(ctx, teamA.ID, x.ID, func(r *store.Sandbox) error {
		r.State, r.StoppedAt = store.StateStopped, t0.Add(time.Hour)
		r.Spec.Labels = map[string]string{"env": "dev"}
		return nil
	})
	checkErr(t, err, nil)
	want := x
	want.State, want.StoppedAt, want.Spec.Labels = store.StateStopped, t0.Add(time.Hour), map[string]string{"env": "dev"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("UpdateSandbox returned (-want +got):\n%s", diff)
	}
	stored, err := s.GetSandbox(ctx, teamA.ID, x.ID)
	checkErr(t, err, nil)
	if diff := cmp.Diff(want, stored); diff != "" {
		t.Errorf("stored after UpdateSandbox (-want +got):\n%s", diff)
	}
	for labels, n := range map[string]int{"prod": 0, "dev": 1} {
		page, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Labels: map[string]string{"env": labels}})
		checkErr(t, err, nil)
		if len(page) != n {
			t.Errorf("env=%s finds %d sandboxes after the update, want %d", labels, len(page), n)
		}
	}

	boom := errors.New("boom")
	_, err = u.UpdateSandbox(ctx, "", x.ID, func(r *store.Sandbox) error { r.State = store.StateRunning; return boom })
	if !errors.Is(err, boom) {
		t.Errorf("a failing change: got %v, want its error", err)
	}
	for _, tc := range []struct {
		name   string
		team   string
		id     string
		change func(*store.Sandbox) error
		want   error
	}{
		{"another team's", teamB.ID, x.ID, func(*store.Sandbox) error { return nil }, sandbox.ErrNotFound},
		{"none", teamA.ID, "nope", func(*store.Sandbox) error { return nil }, sandbox.ErrNotFound},
		{"empty id", teamA.ID, "", func(*store.Sandbox) error { return nil }, sandbox.ErrInvalid},
		{"id changed", teamA.ID, x.ID, func(r *store.Sandbox) error { r.ID = "sb-2"; return nil }, sandbox.ErrInvalid},
		{"team changed", teamA.ID, x.ID, func(r *store.Sandbox) error { r.TeamID = teamB.ID; return nil }, sandbox.ErrInvalid},
		{"bad state", teamA.ID, x.ID, func(r *store.Sandbox) error { r.State = "paused"; return nil }, sandbox.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := u.UpdateSandbox(ctx, tc.team, tc.id, tc.change)
			checkErr(t, err, tc.want)
		})
	}
	after, err := s.GetSandbox(ctx, teamA.ID, x.ID)
	checkErr(t, err, nil)
	if diff := cmp.Diff(want, after); diff != "" {
		t.Errorf("failed updates changed the record (-want +got):\n%s", diff)
	}
}

// testUpdateSandboxNoLostUpdate: 8 writers on two stores sharing one
// database (two replicas) each add 1 to a counter in the record 10
// times, at once; no increment is lost.
func (h *harness) testUpdateSandboxNoLostUpdate(t *testing.T) {
	db := h.tg.NewDB(t)
	stores := []*testStore{h.openAt(t, db), h.openAt(t, db)}
	ctx := t.Context()
	checkErr(t, stores[0].CreateTeam(ctx, teamA), nil)
	putSandboxes(t, stores[0], sb("sb-1", teamA.ID, 0, "n", "0"))
	const writers, each = 8, 10
	var wg sync.WaitGroup
	for w := range writers {
		u := stores[w%2].Store
		wg.Go(func() {
			for range each {
				_, err := u.UpdateSandbox(ctx, "", "sb-1", func(r *store.Sandbox) error {
					n, err := strconv.Atoi(r.Spec.Labels["n"])
					r.Spec.Labels["n"] = strconv.Itoa(n + 1)
					return err
				})
				if err != nil {
					t.Errorf("UpdateSandbox: %v", err)
				}
			}
		})
	}
	wg.Wait()
	got, err := stores[1].GetSandbox(ctx, teamA.ID, "sb-1")
	checkErr(t, err, nil)
	if got.Spec.Labels["n"] != strconv.Itoa(writers*each) {
		t.Errorf("counter is %s after %d increments: updates were lost", got.Spec.Labels["n"], writers*each)
	}
}
