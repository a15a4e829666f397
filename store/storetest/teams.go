package storetest

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

var (
	teamA = store.Team{ID: "team-a", Name: "A", Quota: store.Quota{Sandboxes: 5, CPUs: 2.5, MemoryBytes: 8 << 30}, CreatedAt: t0}
	teamB = store.Team{ID: "team-b", Name: "B", CreatedAt: t0.Add(time.Second)}
)

// withTeams returns a new store holding teamA and teamB.
func (h *harness) withTeams(t *testing.T) *testStore {
	t.Helper()
	s := h.newStore(t)
	for _, tm := range []store.Team{teamA, teamB} {
		if err := s.CreateTeam(t.Context(), tm); err != nil {
			t.Fatal(err)
		}
	}
	return s
}

func (h *harness) testTeams(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()

	t.Run("create", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			team    store.Team
			wantErr error
			msg     []string
		}{
			{"taken id", store.Team{ID: teamA.ID, Name: "other"}, sandbox.ErrExist, []string{"team team-a already exists"}},
			{"empty id", store.Team{Name: "x"}, sandbox.ErrInvalid, []string{"team id"}},
			{"negative quota", store.Team{ID: "t", Quota: store.Quota{CPUs: -1}}, sandbox.ErrInvalid, []string{"quota"}},
			{"time out of range", store.Team{ID: "t", CreatedAt: time.Date(3000, 1, 1, 0, 0, 0, 0, time.UTC)}, sandbox.ErrInvalid, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				checkErr(t, s.CreateTeam(ctx, tc.team), tc.wantErr, tc.msg...)
			})
		}
	})

	t.Run("get", func(t *testing.T) {
		for _, tc := range []struct {
			id      string
			want    store.Team
			wantErr error
			msg     []string
		}{
			{teamA.ID, teamA, nil, nil},
			{teamB.ID, teamB, nil, nil},
			{"nope", store.Team{}, sandbox.ErrNotFound, []string{"team nope not found"}},
			{"", store.Team{}, sandbox.ErrInvalid, nil},
		} {
			got, err := s.GetTeam(ctx, tc.id)
			checkErr(t, err, tc.wantErr, tc.msg...)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("GetTeam(%q) (-want +got):\n%s", tc.id, diff)
			}
		}
	})

	t.Run("list", func(t *testing.T) {
		got, err := s.ListTeams(ctx)
		checkErr(t, err, nil)
		if diff := cmp.Diff([]store.Team{teamA, teamB}, got); diff != "" {
			t.Errorf("ListTeams (-want +got):\n%s", diff)
		}
	})

	t.Run("quota", func(t *testing.T) {
		q := store.Quota{Sandboxes: 1, CPUs: 0.5, MemoryBytes: 1 << 30}
		checkErr(t, s.SetQuota(ctx, teamB.ID, q), nil)
		got, err := s.GetTeam(ctx, teamB.ID)
		checkErr(t, err, nil)
		if diff := cmp.Diff(q, got.Quota); diff != "" {
			t.Errorf("quota after SetQuota (-want +got):\n%s", diff)
		}
		checkErr(t, s.SetQuota(ctx, "nope", q), sandbox.ErrNotFound, "team nope not found")
		checkErr(t, s.SetQuota(ctx, "", q), sandbox.ErrInvalid)
		checkErr(t, s.SetQuota(ctx, teamB.ID, store.Quota{Sandboxes: -1}), sandbox.ErrInvalid)
	})
}

func (h *harness) testListTeamsEmpty(t *testing.T) {
	got, err := h.newStore(t).ListTeams(t.Context())
	checkErr(t, err, nil)
	if got == nil || len(got) != 0 {
		t.Errorf("got %#v, want an empty, non-nil list (it encodes as [], not null)", got)
	}
}

func ptr[T any](v T) *T { return &v }

func (h *harness) testKeys(t *testing.T) {
	s := h.withTeams(t)
	ctx := t.Context()
	keyA := store.APIKey{ID: "key-a", TeamID: teamA.ID, Name: "ci", Prefix: "cove_aa", Hash: "hash-a", Admin: true, CreatedAt: t0}
	keyB := store.APIKey{ID: "key-b", TeamID: teamB.ID, Name: "dev", Prefix: "cove_bb", Hash: "hash-b", CreatedAt: t0.Add(time.Minute)}
	old := store.APIKey{ID: "key-old", TeamID: teamA.ID, Prefix: "cove_oo", Hash: "hash-old", CreatedAt: t0.Add(2 * time.Minute), RevokedAt: ptr(t0.Add(time.Hour))}

	t.Run("create", func(t *testing.T) {
		for _, tc := range []struct {
			name    string
			key     store.APIKey
			wantErr error
			msg     []string
		}{
			{"a", keyA, nil, nil},
			{"b", keyB, nil, nil},
			{"revoked", old, nil, nil},
			{"taken id", store.APIKey{ID: keyA.ID, TeamID: teamA.ID, Hash: "other"}, sandbox.ErrExist, []string{"api key key-a"}},
			{"taken hash", store.APIKey{ID: "other", TeamID: teamB.ID, Hash: keyA.Hash}, sandbox.ErrExist, nil},
			{"no such team", store.APIKey{ID: "k", TeamID: "nope", Hash: "h"}, sandbox.ErrNotFound, []string{"team nope not found"}},
			{"empty id", store.APIKey{TeamID: teamA.ID, Hash: "h"}, sandbox.ErrInvalid, nil},
			{"empty team", store.APIKey{ID: "k", Hash: "h"}, sandbox.ErrInvalid, nil},
			{"empty hash", store.APIKey{ID: "k", TeamID: teamA.ID}, sandbox.ErrInvalid, nil},
		} {
			t.Run(tc.name, func(t *testing.T) {
				checkErr(t, s.CreateKey(ctx, tc.key), tc.wantErr, tc.msg...)
			})
		}
	})

	t.Run("list", func(t *testing.T) {
		for _, tc := range []struct {
			team string
			want []store.APIKey
		}{
			{teamA.ID, []store.APIKey{keyA, old}},
			{teamB.ID, []store.APIKey{keyB}},
			{"", []store.APIKey{keyA, keyB, old}},
			{"nope", []store.APIKey{}},
		} {
			got, err := s.ListKeys(ctx, tc.team)
			checkErr(t, err, nil)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("ListKeys(%q) (-want +got):\n%s", tc.team, diff)
			}
		}
	})

	t.Run("by hash", func(t *testing.T) {
		now := t0.Add(24 * time.Hour)
		s.setNow(func() time.Time { return now })
		defer s.setNow(nil)

		for _, tc := range []struct {
			name     string
			hash     string
			advance  time.Duration // the clock, before the call
			want     store.APIKey
			wantUsed time.Time // LastUsedAt stored after the call
			wantErr  error
		}{
			{name: "first use records it", hash: keyA.Hash, want: withUse(keyA, now), wantUsed: now},
			{name: "again within a minute writes nothing", hash: keyA.Hash, advance: 59 * time.Second, want: withUse(keyA, now), wantUsed: now},
			{name: "a minute later records it", hash: keyA.Hash, advance: time.Second, want: withUse(keyA, now.Add(time.Minute)), wantUsed: now.Add(time.Minute)},
			{name: "a clock gone back records it", hash: keyA.Hash, advance: -time.Hour, want: withUse(keyA, now.Add(-time.Hour+time.Minute)), wantUsed: now.Add(-time.Hour + time.Minute)},
			{name: "revoked", hash: old.Hash, wantErr: sandbox.ErrNotFound},
			{name: "unknown", hash: "nope", wantErr: sandbox.ErrNotFound},
			{name: "empty", hash: "", wantErr: sandbox.ErrInvalid},
		} {
			t.Run(tc.name, func(t *testing.T) {
				now = now.Add(tc.advance)
				got, err := s.KeyByHash(ctx, tc.hash)
				checkErr(t, err, tc.wantErr)
				if tc.wantErr != nil {
					if got != (store.APIKey{}) {
						t.Errorf("got key %+v with the error", got)
					}
					return
				}
				if diff := cmp.Diff(tc.want, got); diff != "" {
					t.Errorf("KeyByHash (-want +got):\n%s", diff)
				}
				stored := findKey(t, s, got.ID)
				if stored.LastUsedAt == nil || !stored.LastUsedAt.Equal(tc.wantUsed) {
					t.Errorf("stored last use: got %v, want %v", stored.LastUsedAt, tc.wantUsed)
				}
			})
		}
	})

	t.Run("revoke", func(t *testing.T) { testRevokeKeys(t, s, keyA, keyB, old) })
}

// testRevokeKeys: a team revokes its own keys only (an admin any), a
// revoked key no longer authenticates, and revoking again keeps the
// first time.
func testRevokeKeys(t *testing.T, s *testStore, keyA, keyB, old store.APIKey) {
	ctx := t.Context()
	revokedAt := t0.Add(48 * time.Hour)
	s.setNow(func() time.Time { return revokedAt })
	defer s.setNow(nil)
	for _, tc := range []struct {
		name    string
		team    string
		id      string
		wantErr error
	}{
		{"another team's key", teamB.ID, keyA.ID, sandbox.ErrNotFound},
		{"unknown", teamA.ID, "nope", sandbox.ErrNotFound},
		{"empty id", teamA.ID, "", sandbox.ErrInvalid},
		{"own key", teamA.ID, keyA.ID, nil},
		{"again", teamA.ID, keyA.ID, nil},
		{"any team", "", keyB.ID, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			checkErr(t, s.RevokeKey(ctx, tc.team, tc.id), tc.wantErr)
		})
	}
	for _, k := range []store.APIKey{keyA, keyB} {
		_, err := s.KeyByHash(ctx, k.Hash)
		checkErr(t, err, sandbox.ErrNotFound, "api key not found")
		if got := findKey(t, s, k.ID).RevokedAt; got == nil || !got.Equal(revokedAt) {
			t.Errorf("key %s revoked at %v, want %v", k.ID, got, revokedAt)
		}
	}
	// Revoking again kept the first time.
	if got := findKey(t, s, old.ID).RevokedAt; !got.Equal(*old.RevokedAt) {
		t.Errorf("key %s revoked at %v, want %v", old.ID, got, *old.RevokedAt)
	}
}

func withUse(k store.APIKey, t time.Time) store.APIKey {
	k.LastUsedAt = &t
	return k
}

func findKey(t *testing.T, s *testStore, id string) store.APIKey {
	t.Helper()
	keys, err := s.ListKeys(t.Context(), "")
	if err != nil {
		t.Fatal(err)
	}
	for _, k := range keys {
		if k.ID == id {
			return k
		}
	}
	t.Fatalf("no key %s", id)
	return store.APIKey{}
}
