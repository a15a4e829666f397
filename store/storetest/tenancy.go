package storetest

import (
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// TestTenancy: team B, knowing the ids of team A's sandbox, snapshot and
// key, can neither see nor change them; afterwards team A still has all
// of them as they were.
func (h *harness) testTenancy(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	sbA := sb("sb-a", teamA.ID, 0, "env", "prod")
	snapA := store.Snapshot{ID: "snap-a", TeamID: teamA.ID, SandboxID: sbA.ID, CreatedAt: t0}
	keyA := store.APIKey{ID: "key-a", TeamID: teamA.ID, Hash: "hash-a", CreatedAt: t0}
	putSandboxes(t, s, sbA, sb("sb-b", teamB.ID, 1, "env", "prod"))
	checkErr(t, s.PutSnapshot(ctx, snapA), nil)
	checkErr(t, s.CreateKey(ctx, keyA), nil)
	checkErr(t, s.AddUsage(ctx, use(teamA.ID, sbA.ID, 0, 10, 1, 1)), nil)

	b := teamB.ID
	for _, tc := range []struct {
		name    string
		do      func() error
		wantErr error
	}{
		{"get sandbox", func() error { _, err := s.GetSandbox(ctx, b, sbA.ID); return err }, sandbox.ErrNotFound},
		{"put over sandbox", func() error { x := sbA; x.TeamID = b; x.State = store.StateStopped; return s.PutSandbox(ctx, x) }, sandbox.ErrExist},
		{"page from sandbox", func() error {
			_, _, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: b, After: sbA.ID})
			return err
		}, sandbox.ErrInvalid},
		{"get snapshot", func() error { _, err := s.GetSnapshot(ctx, b, snapA.ID); return err }, sandbox.ErrNotFound},
		{"delete snapshot", func() error { return s.DeleteSnapshot(ctx, b, snapA.ID) }, sandbox.ErrNotFound},
		{"put over snapshot", func() error { x := snapA; x.TeamID = b; return s.PutSnapshot(ctx, x) }, sandbox.ErrExist},
		{"revoke key", func() error { return s.RevokeKey(ctx, b, keyA.ID) }, sandbox.ErrNotFound},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, tc.do(), tc.wantErr)
		})
	}

	t.Run("lists", func(t *testing.T) {
		page, _, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: b, Labels: map[string]string{"env": "prod"}})
		checkErr(t, err, nil)
		if got := ids(page); len(got) != 1 || got[0] != "sb-b" {
			t.Errorf("team B lists sandboxes %v, want only [sb-b]", got)
		}
		snaps, err := s.ListSnapshots(ctx, b)
		checkErr(t, err, nil)
		if len(snaps) != 0 {
			t.Errorf("team B lists snapshots %+v, want none", snaps)
		}
		keys, err := s.ListKeys(ctx, b)
		checkErr(t, err, nil)
		if len(keys) != 0 {
			t.Errorf("team B lists keys %+v, want none", keys)
		}
		usage, err := s.UsageByTeam(ctx, b, at(0), at(10))
		checkErr(t, err, nil)
		if len(usage) != 0 {
			t.Errorf("team B has usage %+v, want none", usage)
		}
	})

	t.Run("team A's are intact", func(t *testing.T) {
		got, err := s.GetSandbox(ctx, teamA.ID, sbA.ID)
		checkErr(t, err, nil)
		if got.TeamID != teamA.ID || got.State != store.StateRunning {
			t.Errorf("team A's sandbox is now %+v", got)
		}
		_, err = s.GetSnapshot(ctx, teamA.ID, snapA.ID)
		checkErr(t, err, nil)
		k, err := s.KeyByHash(ctx, keyA.Hash)
		checkErr(t, err, nil)
		if k.TeamID != teamA.ID {
			t.Errorf("key of team %s, want %s", k.TeamID, teamA.ID)
		}
	})
}
