package storetest

import (
	"fmt"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// sb returns a running sandbox of team, made i seconds after t0, with
// labels from pairs ("k", "v", ...).
func sb(id, team string, i int, pairs ...string) store.Sandbox {
	var labels map[string]string
	for j := 0; j+1 < len(pairs); j += 2 {
		if labels == nil {
			labels = map[string]string{}
		}
		labels[pairs[j]] = pairs[j+1]
	}
	at := t0.Add(time.Duration(i) * time.Second)
	return store.Sandbox{
		ID:           id,
		TeamID:       team,
		Spec:         sandbox.Spec{Template: "host", Labels: labels},
		State:        store.StateRunning,
		CreatedAt:    at,
		StartedAt:    at,
		OnExpire:     store.ExpireStop,
		LastActivity: at,
	}
}

func putSandboxes(t *testing.T, s *testStore, sbs ...store.Sandbox) {
	t.Helper()
	for _, x := range sbs {
		if err := s.PutSandbox(t.Context(), x); err != nil {
			t.Fatal(err)
		}
	}
}

func (h *harness) testPutGetSandbox(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	full := store.Sandbox{
		ID:     "sb-full",
		TeamID: teamA.ID,
		Spec: sandbox.Spec{
			Template: "python",
			Root:     "/work",
			Env:      map[string]string{"A": "1"},
			User:     "agent",
			Limits:   sandbox.Limits{CPUs: 1.5, MemoryBytes: 1 << 30, Pids: 100, DiskBytes: 5 << 30},
			Network:  sandbox.Network{Mode: "allow", Allow: []string{"10.0.0.0/8", "example.com:443"}},
			TTL:      90 * time.Minute,
			Labels:   map[string]string{"run": "r1", "a.b/c": `q"uote`},
		},
		State:        store.StateStopped,
		Size:         "small",
		CreatedAt:    t0,
		StartedAt:    t0.Add(time.Second),
		StoppedAt:    t0.Add(time.Hour),
		Deadline:     t0.Add(2 * time.Hour),
		IdleTimeout:  15*time.Minute + time.Nanosecond,
		OnExpire:     store.ExpireDelete,
		LastActivity: t0.Add(30 * time.Minute),
	}
	// Zero times stay zero, not 1970.
	bare := store.Sandbox{ID: "sb-bare", TeamID: teamA.ID, State: store.StateRunning, CreatedAt: t0}

	for _, tc := range []struct {
		name    string
		sb      store.Sandbox
		wantErr error
		msg     []string
	}{
		{"every field", full, nil, nil},
		{"zero times", bare, nil, nil},
		{"empty id", store.Sandbox{TeamID: teamA.ID, State: "running", CreatedAt: t0}, sandbox.ErrInvalid, []string{"sandbox id"}},
		{"empty team", store.Sandbox{ID: "x", State: "running", CreatedAt: t0}, sandbox.ErrInvalid, []string{"team id"}},
		{"unknown state", store.Sandbox{ID: "x", TeamID: teamA.ID, State: "paused", CreatedAt: t0}, sandbox.ErrInvalid, []string{"paused"}},
		{"no state", store.Sandbox{ID: "x", TeamID: teamA.ID, CreatedAt: t0}, sandbox.ErrInvalid, nil},
		{"unknown on_expire", store.Sandbox{ID: "x", TeamID: teamA.ID, State: "running", CreatedAt: t0, OnExpire: "explode"}, sandbox.ErrInvalid, []string{"explode"}},
		{"no created_at", store.Sandbox{ID: "x", TeamID: teamA.ID, State: "running"}, sandbox.ErrInvalid, []string{"created_at"}},
		{"negative idle timeout", store.Sandbox{ID: "x", TeamID: teamA.ID, State: "running", CreatedAt: t0, IdleTimeout: -1}, sandbox.ErrInvalid, nil},
		{"deadline out of range", store.Sandbox{ID: "x", TeamID: teamA.ID, State: "running", CreatedAt: t0, Deadline: time.Date(9999, 1, 1, 0, 0, 0, 0, time.UTC)}, sandbox.ErrInvalid, []string{"deadline"}},
		{"no such team", store.Sandbox{ID: "x", TeamID: "nope", State: "running", CreatedAt: t0}, sandbox.ErrNotFound, []string{"team nope not found"}},
		{"id of another team's sandbox", store.Sandbox{ID: full.ID, TeamID: teamB.ID, State: "running", CreatedAt: t0}, sandbox.ErrExist, []string{"sandbox sb-full already exists"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, s.PutSandbox(ctx, tc.sb), tc.wantErr, tc.msg...)
			if tc.wantErr != nil {
				return
			}
			got, err := s.GetSandbox(ctx, tc.sb.TeamID, tc.sb.ID)
			checkErr(t, err, nil)
			if diff := cmp.Diff(tc.sb, got); diff != "" {
				t.Errorf("GetSandbox after PutSandbox (-want +got):\n%s", diff)
			}
		})
	}

	// The failed put from team B left team A's sandbox alone.
	got, err := s.GetSandbox(ctx, "", full.ID)
	checkErr(t, err, nil)
	if diff := cmp.Diff(full, got); diff != "" {
		t.Errorf("after another team's put (-want +got):\n%s", diff)
	}

	t.Run("replace", func(t *testing.T) { testReplaceSandbox(t, s, full) })

	t.Run("get", func(t *testing.T) {
		_, err := s.GetSandbox(ctx, teamA.ID, "nope")
		checkErr(t, err, sandbox.ErrNotFound, "sandbox nope not found")
		_, err = s.GetSandbox(ctx, teamA.ID, "")
		checkErr(t, err, sandbox.ErrInvalid)
	})
}

// testReplaceSandbox: a put of an existing sandbox replaces the record,
// and its label index follows the new spec.
func testReplaceSandbox(t *testing.T, s *testStore, full store.Sandbox) {
	ctx := t.Context()
	next := full
	next.State = store.StateRunning
	next.StoppedAt = time.Time{}
	next.Spec.Labels = map[string]string{"run": "r2"}
	checkErr(t, s.PutSandbox(ctx, next), nil)
	got, err := s.GetSandbox(ctx, teamA.ID, full.ID)
	checkErr(t, err, nil)
	if diff := cmp.Diff(next, got); diff != "" {
		t.Errorf("GetSandbox after replace (-want +got):\n%s", diff)
	}
	// The label index follows the spec.
	for _, tc := range []struct {
		labels map[string]string
		want   int
	}{
		{map[string]string{"run": "r2"}, 1},
		{map[string]string{"run": "r1"}, 0},
		{map[string]string{"a.b/c": `q"uote`}, 0},
	} {
		page, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Labels: tc.labels})
		checkErr(t, err, nil)
		if len(page) != tc.want {
			t.Errorf("labels %v: got %d sandboxes, want %d", tc.labels, len(page), tc.want)
		}
	}
}

func (h *harness) testTouchSandbox(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	x := sb("sb-1", teamA.ID, 0)
	putSandboxes(t, s, x, store.Sandbox{ID: "sb-idle", TeamID: teamA.ID, State: "running", CreatedAt: t0})

	for _, tc := range []struct {
		name    string
		id      string
		at      time.Time
		want    time.Time // LastActivity after
		wantErr error
	}{
		{"later", "sb-1", t0.Add(time.Minute), t0.Add(time.Minute), nil},
		{"earlier does not go back", "sb-1", t0.Add(time.Second), t0.Add(time.Minute), nil},
		{"same", "sb-1", t0.Add(time.Minute), t0.Add(time.Minute), nil},
		{"within a second is not written", "sb-1", t0.Add(time.Minute + touchEvery - 1), t0.Add(time.Minute), nil},
		{"a second later is", "sb-1", t0.Add(time.Minute + touchEvery), t0.Add(time.Minute + touchEvery), nil},
		{"first activity", "sb-idle", t0.Add(time.Hour), t0.Add(time.Hour), nil},
		{"earlier than the first", "sb-idle", t0, t0.Add(time.Hour), nil},
		{"unknown", "nope", t0, time.Time{}, sandbox.ErrNotFound},
		{"empty id", "", t0, time.Time{}, sandbox.ErrInvalid},
		{"zero time", "sb-1", time.Time{}, time.Time{}, sandbox.ErrInvalid},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := s.TouchSandbox(ctx, tc.id, tc.at)
			checkErr(t, err, tc.wantErr)
			if tc.wantErr != nil {
				return
			}
			got, err := s.GetSandbox(ctx, "", tc.id)
			checkErr(t, err, nil)
			if !got.LastActivity.Equal(tc.want) {
				t.Errorf("LastActivity: got %v, want %v", got.LastActivity, tc.want)
			}
		})
	}
	checkErr(t, s.TouchSandbox(ctx, "nope", t0), sandbox.ErrNotFound, "sandbox nope not found")
}

func (h *harness) testDeleteSandbox(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	putSandboxes(t, s, sb("sb-1", teamA.ID, 0, "k", "v"))

	checkErr(t, s.DeleteSandbox(ctx, "sb-1"), nil)
	_, err := s.GetSandbox(ctx, "", "sb-1")
	checkErr(t, err, sandbox.ErrNotFound)
	checkErr(t, s.DeleteSandbox(ctx, "sb-1"), sandbox.ErrNotFound, "sandbox sb-1 not found")
	checkErr(t, s.DeleteSandbox(ctx, ""), sandbox.ErrInvalid)

	// Its labels went with it: a new sandbox of the same id has none.
	putSandboxes(t, s, sb("sb-1", teamB.ID, 1))
	page, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Labels: map[string]string{"k": "v"}})
	checkErr(t, err, nil)
	if len(page) != 0 {
		t.Errorf("labels of a deleted sandbox still match: %v", page)
	}
}

func ids(sbs []store.Sandbox) []string {
	out := []string{}
	for _, x := range sbs {
		out = append(out, x.ID)
	}
	return out
}

func (h *harness) testListSandboxes(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	stopped := sb("a-stopped", teamA.ID, 3, "env", "prod")
	stopped.State = store.StateStopped
	putSandboxes(t, s,
		// Made out of id order, and two at the same instant, so the order
		// by (created_at, id) shows.
		sb("a-3", teamA.ID, 2, "env", "prod", "run", "r1"),
		sb("a-1", teamA.ID, 0, "env", "prod", "run", "r1"),
		sb("a-2b", teamA.ID, 1, "env", "dev", "run", "r1"),
		sb("a-2a", teamA.ID, 1, "env", "prod", "run", "r2"),
		stopped,
		sb("b-1", teamB.ID, 0, "env", "prod", "run", "r1"),
		sb("b-2", teamB.ID, 5),
	)

	for _, tc := range []struct {
		name string
		f    store.SandboxFilter
		want []string
	}{
		{"team", store.SandboxFilter{TeamID: teamA.ID}, []string{"a-1", "a-2a", "a-2b", "a-3", "a-stopped"}},
		{"other team", store.SandboxFilter{TeamID: teamB.ID}, []string{"b-1", "b-2"}},
		{"every team", store.SandboxFilter{}, []string{"a-1", "b-1", "a-2a", "a-2b", "a-3", "a-stopped", "b-2"}},
		{"unknown team", store.SandboxFilter{TeamID: "nope"}, []string{}},
		{"running", store.SandboxFilter{TeamID: teamA.ID, State: store.StateRunning}, []string{"a-1", "a-2a", "a-2b", "a-3"}},
		{"stopped", store.SandboxFilter{TeamID: teamA.ID, State: store.StateStopped}, []string{"a-stopped"}},
		{"one label", store.SandboxFilter{TeamID: teamA.ID, Labels: map[string]string{"env": "prod"}}, []string{"a-1", "a-2a", "a-3", "a-stopped"}},
		{"two labels", store.SandboxFilter{TeamID: teamA.ID, Labels: map[string]string{"env": "prod", "run": "r1"}}, []string{"a-1", "a-3"}},
		{"labels and state", store.SandboxFilter{TeamID: teamA.ID, State: store.StateStopped, Labels: map[string]string{"env": "prod"}}, []string{"a-stopped"}},
		{"labels of every team", store.SandboxFilter{Labels: map[string]string{"run": "r1"}}, []string{"a-1", "b-1", "a-2b", "a-3"}},
		{"no match", store.SandboxFilter{TeamID: teamA.ID, Labels: map[string]string{"env": "nope"}}, []string{}},
		{"label on another key", store.SandboxFilter{TeamID: teamA.ID, Labels: map[string]string{"run": "prod"}}, []string{}},
		{"after a cursor", store.SandboxFilter{TeamID: teamA.ID, After: "a-2a"}, []string{"a-2b", "a-3", "a-stopped"}},
		{"after the last", store.SandboxFilter{TeamID: teamA.ID, After: "a-stopped"}, []string{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, next, err := s.ListSandboxes(ctx, tc.f)
			checkErr(t, err, nil)
			if diff := cmp.Diff(tc.want, ids(page)); diff != "" {
				t.Errorf("ListSandboxes(%+v) (-want +got):\n%s", tc.f, diff)
			}
			if next != "" {
				t.Errorf("got next cursor %q on the only page", next)
			}
		})
	}

	for _, tc := range []struct {
		name    string
		f       store.SandboxFilter
		wantErr error
		msg     []string
	}{
		{"unknown state", store.SandboxFilter{State: "paused"}, sandbox.ErrInvalid, []string{"paused"}},
		{"negative limit", store.SandboxFilter{Limit: -1}, sandbox.ErrInvalid, nil},
		{"unknown cursor", store.SandboxFilter{After: "nope"}, sandbox.ErrInvalid, []string{"nope"}},
		// Team B may not page from team A's sandbox (and so learn where it is).
		{"cursor of another team", store.SandboxFilter{TeamID: teamB.ID, After: "a-1"}, sandbox.ErrInvalid, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page, _, err := s.ListSandboxes(ctx, tc.f)
			checkErr(t, err, tc.wantErr, tc.msg...)
			if page != nil {
				t.Errorf("got page %v with the error", ids(page))
			}
		})
	}
}

func (h *harness) testListSandboxesPages(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	var want []string
	for i := range 7 {
		// Pairs made at the same instant: the id breaks the tie.
		x := sb(fmt.Sprintf("a-%02d", i), teamA.ID, i/2, "env", "prod")
		putSandboxes(t, s, x)
		want = append(want, x.ID)
		// Noise: another team's, and another label's.
		putSandboxes(t, s, sb(fmt.Sprintf("b-%02d", i), teamB.ID, i/2, "env", "prod"), sb(fmt.Sprintf("a-dev-%02d", i), teamA.ID, i, "env", "dev"))
	}

	for _, limit := range []int{1, 2, 3, 6, 7, 8} {
		t.Run(fmt.Sprintf("limit %d", limit), func(t *testing.T) {
			f := store.SandboxFilter{TeamID: teamA.ID, Labels: map[string]string{"env": "prod"}, Limit: limit}
			var got []string
			pages := 0
			for {
				page, next, err := s.ListSandboxes(ctx, f)
				checkErr(t, err, nil)
				pages++
				if len(page) > limit {
					t.Fatalf("got a page of %d, want at most %d", len(page), limit)
				}
				got = append(got, ids(page)...)
				if next == "" {
					break
				}
				if next != page[len(page)-1].ID {
					t.Fatalf("got cursor %q, want the last id of the page %q", next, page[len(page)-1].ID)
				}
				if pages > 10 {
					t.Fatal("paging does not end")
				}
				f.After = next
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("all pages (-want +got):\n%s", diff)
			}
			if wantPages := (len(want) + limit - 1) / limit; pages != wantPages {
				t.Errorf("got %d pages, want %d", pages, wantPages)
			}
		})
	}

	t.Run("cursor deleted", func(t *testing.T) {
		// As the server's reconciliation does: delete records of a page,
		// the last included, then ask for the next page.
		now := t0.Add(time.Hour)
		s.setNow(func() time.Time { return now })
		f := store.SandboxFilter{TeamID: teamA.ID, Labels: map[string]string{"env": "prod"}, Limit: 3}
		page, next, err := s.ListSandboxes(ctx, f)
		checkErr(t, err, nil)
		for _, x := range page[1:] {
			checkErr(t, s.DeleteSandbox(ctx, x.ID), nil)
		}
		f.After = next
		page, _, err = s.ListSandboxes(ctx, f)
		checkErr(t, err, nil)
		if diff := cmp.Diff(want[3:6], ids(page)); diff != "" {
			t.Errorf("page after a deleted cursor (-want +got):\n%s", diff)
		}

		// Another team cannot page from it.
		_, _, err = s.ListSandboxes(ctx, store.SandboxFilter{TeamID: teamB.ID, After: next})
		checkErr(t, err, sandbox.ErrInvalid)

		// A day later its place is forgotten (pruned by the next delete).
		now = now.Add(keepDeleted + time.Second)
		checkErr(t, s.DeleteSandbox(ctx, page[0].ID), nil)
		_, _, err = s.ListSandboxes(ctx, f)
		checkErr(t, err, sandbox.ErrInvalid, next, "from the start")
		if h.tg.KeptDeleted == nil {
			return
		}
		if n := h.tg.KeptDeleted(t, s.Store); n != 1 {
			t.Errorf("got %d deleted sandboxes kept, want 1 (the last)", n)
		}
	})
}

func (h *harness) testListSandboxesDefaultLimit(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	for i := range defaultLimit + 1 {
		putSandboxes(t, s, sb(fmt.Sprintf("sb-%03d", i), teamA.ID, i))
	}
	page, next, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: teamA.ID})
	checkErr(t, err, nil)
	if len(page) != defaultLimit || next != "sb-099" {
		t.Errorf("Limit 0: got %d sandboxes and cursor %q, want %d and %q", len(page), next, defaultLimit, "sb-099")
	}
	page, next, err = s.ListSandboxes(ctx, store.SandboxFilter{TeamID: teamA.ID, After: next})
	checkErr(t, err, nil)
	if diff := cmp.Diff([]string{"sb-100"}, ids(page)); diff != "" || next != "" {
		t.Errorf("second page: got %v, cursor %q; want [sb-100] and no cursor", ids(page), next)
	}
}
