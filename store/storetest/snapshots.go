package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

func (h *harness) testSnapshots(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	snapA := store.Snapshot{ID: "snap-a", TeamID: teamA.ID, SandboxID: "sb-gone", Size: 1 << 20, CreatedAt: t0}
	snapA2 := store.Snapshot{ID: "snap-a2", TeamID: teamA.ID, SandboxID: "sb-1", CreatedAt: t0.Add(time.Second)}
	snapB := store.Snapshot{ID: "snap-b", TeamID: teamB.ID, SandboxID: "sb-2", Size: 7, CreatedAt: t0.Add(-time.Second)}

	t.Run("put", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			snap    store.Snapshot
			wantErr error
			msg     []string
		}{
			// The sandbox need not exist: snapshots outlive sandboxes.
			{"a", snapA, nil, nil},
			{"a2", snapA2, nil, nil},
			{"b", snapB, nil, nil},
			{"replace", snapA2, nil, nil},
			{"id of another team's", store.Snapshot{ID: snapA.ID, TeamID: teamB.ID, SandboxID: "x"}, sandbox.ErrExist, []string{"snapshot snap-a already exists"}},
			{"no such team", store.Snapshot{ID: "s", TeamID: "nope", SandboxID: "x"}, sandbox.ErrNotFound, []string{"team nope not found"}},
			{"empty id", store.Snapshot{TeamID: teamA.ID, SandboxID: "x"}, sandbox.ErrInvalid, nil},
			{"empty team", store.Snapshot{ID: "s", SandboxID: "x"}, sandbox.ErrInvalid, nil},
			{"empty sandbox", store.Snapshot{ID: "s", TeamID: teamA.ID}, sandbox.ErrInvalid, nil},
			{"negative size", store.Snapshot{ID: "s", TeamID: teamA.ID, SandboxID: "x", Size: -1}, sandbox.ErrInvalid, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				checkErr(t, s.PutSnapshot(ctx, tc.snap), tc.wantErr, tc.msg...)
			})
		}
	})

	t.Run("get", func(t *testing.T) {
		for _, tc := range []struct {
			team, id string
			want     store.Snapshot
			wantErr  error
		}{
			{teamA.ID, snapA.ID, snapA, nil},
			{"", snapB.ID, snapB, nil},
			{teamA.ID, "nope", store.Snapshot{}, sandbox.ErrNotFound},
			{teamA.ID, "", store.Snapshot{}, sandbox.ErrInvalid},
		} {
			got, err := s.GetSnapshot(ctx, tc.team, tc.id)
			checkErr(t, err, tc.wantErr)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GetSnapshot(%q, %q) (-want +got):\n%s", tc.team, tc.id, diff)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			team string
			want []store.Snapshot
		}{
			{teamA.ID, []store.Snapshot{snapA, snapA2}},
			{teamB.ID, []store.Snapshot{snapB}},
			{"", []store.Snapshot{snapB, snapA, snapA2}},
			{"nope", []store.Snapshot{}},
		} {
			got, err := s.ListSnapshots(ctx, tc.team)
			checkErr(t, err, nil)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ListSnapshots(%q) (-want +got):\n%s", tc.team, diff)
			}
		}
	})

	t.Run("delete", func(t *testing.T) {
		checkErr(t, s.DeleteSnapshot(ctx, teamA.ID, snapA.ID), nil)
		_, err := s.GetSnapshot(ctx, "", snapA.ID)
		checkErr(t, err, sandbox.ErrNotFound, "snapshot snap-a not found")
		checkErr(t, s.DeleteSnapshot(ctx, teamA.ID, snapA.ID), sandbox.ErrNotFound, "snapshot snap-a not found")
		checkErr(t, s.DeleteSnapshot(ctx, "", snapB.ID), nil)
		checkErr(t, s.DeleteSnapshot(ctx, teamA.ID, ""), sandbox.ErrInvalid)
	})
}

func (h *harness) testPorts(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	putSandboxes(t, s, sb("sb-1", teamA.ID, 0), sb("sb-2", teamB.ID, 0))
	web := store.Port{SandboxID: "sb-1", Port: 8080, Public: true, CreatedAt: t0}
	db := store.Port{SandboxID: "sb-1", Port: 5432, Token: "secret", CreatedAt: t0.Add(time.Second)}
	other := store.Port{SandboxID: "sb-2", Port: 8080, Token: "t2"}

	t.Run("put", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			port    store.Port
			wantErr error
			msg     []string
		}{
			{"public", web, nil, nil},
			{"private", db, nil, nil},
			{"same port of another sandbox", other, nil, nil},
			{"no such sandbox", store.Port{SandboxID: "nope", Port: 80}, sandbox.ErrNotFound, []string{"sandbox nope not found"}},
			{"empty sandbox", store.Port{Port: 80}, sandbox.ErrInvalid, nil},
			{"port 0", store.Port{SandboxID: "sb-1"}, sandbox.ErrInvalid, nil},
			{"port 65536", store.Port{SandboxID: "sb-1", Port: 65536}, sandbox.ErrInvalid, []string{"65536"}},
		} {
			t.Run(tc.name, func(t *testing.T) {
				checkErr(t, s.PutPort(ctx, tc.port), tc.wantErr, tc.msg...)
			})
		}
	})

	t.Run("update", func(t *testing.T) {
		web.Public, web.Token = false, "now-private"
		checkErr(t, s.PutPort(ctx, web), nil)
		got, err := s.GetPort(ctx, web.SandboxID, web.Port)
		checkErr(t, err, nil)
		if diff := cmp.Diff(web, got); diff != "" {
			t.Errorf("GetPort after update (-want +got):\n%s", diff)
		}
	})

	t.Run("get", func(t *testing.T) {
		for _, tc := range []struct {
			sandbox string
			port    int
			want    store.Port
			wantErr error
			msg     []string
		}{
			{"sb-1", 5432, db, nil, nil},
			{"sb-2", 8080, other, nil, nil},
			{"sb-2", 5432, store.Port{}, sandbox.ErrNotFound, []string{"port 5432 of sandbox sb-2 not found"}},
			{"", 5432, store.Port{}, sandbox.ErrInvalid, nil},
			{"sb-1", -1, store.Port{}, sandbox.ErrInvalid, nil},
		} {
			got, err := s.GetPort(ctx, tc.sandbox, tc.port)
			checkErr(t, err, tc.wantErr, tc.msg...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GetPort(%q, %d) (-want +got):\n%s", tc.sandbox, tc.port, diff)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			sandbox string
			want    []store.Port
		}{
			{"sb-1", []store.Port{db, web}},
			{"sb-2", []store.Port{other}},
			{"nope", []store.Port{}},
		} {
			got, err := s.ListPorts(ctx, tc.sandbox)
			checkErr(t, err, nil)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ListPorts(%q) (-want +got):\n%s", tc.sandbox, diff)
			}
		}
		_, err := s.ListPorts(ctx, "")
		checkErr(t, err, sandbox.ErrInvalid)
	})

	t.Run("delete", func(t *testing.T) {
		checkErr(t, s.DeletePort(ctx, "sb-1", 5432), nil)
		checkErr(t, s.DeletePort(ctx, "sb-1", 5432), sandbox.ErrNotFound, "port 5432 of sandbox sb-1 not found")
		checkErr(t, s.DeletePort(ctx, "", 5432), sandbox.ErrInvalid)
		_, err := s.GetPort(ctx, "sb-1", 5432)
		checkErr(t, err, sandbox.ErrNotFound)
	})

	t.Run("go with their sandbox", func(t *testing.T) { testPortsGoWithSandbox(t, s, web) })
}

// testPortsGoWithSandbox: a deleted sandbox's ports go with it, and a
// new sandbox of the same id does not inherit them.
func testPortsGoWithSandbox(t *testing.T, s *testStore, web store.Port) {
	ctx := t.Context()
	checkErr(t, s.DeleteSandbox(ctx, "sb-1"), nil)
	got, err := s.ListPorts(ctx, "sb-1")
	checkErr(t, err, nil)
	if len(got) != 0 {
		t.Errorf("ports of a deleted sandbox: %+v", got)
	}
	// A new sandbox of the same id does not inherit them.
	putSandboxes(t, s, sb("sb-1", teamA.ID, 1))
	_, err = s.GetPort(ctx, "sb-1", web.Port)
	checkErr(t, err, sandbox.ErrNotFound)
}
