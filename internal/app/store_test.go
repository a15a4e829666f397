package app

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// TestOpenStore: --store opens SQLite in the data directory by default
// and a PostgreSQL database by URL; a value that is neither, a bad URL
// and an unreachable server are clear errors that never show the
// password.
func TestOpenStore(t *testing.T) {
	ctx := t.Context()
	for _, spec := range []string{"", "sqlite"} {
		st, err := OpenStore(ctx, spec, t.TempDir())
		if err != nil {
			t.Fatalf("OpenStore(%q): %v", spec, err)
		}
		st.Close()
	}

	const pw = "hunter2-pw"
	for _, tc := range []struct {
		spec string
		want error
		msg  string
	}{
		{"mysql://root:" + pw + "@db/cove", sandbox.ErrInvalid, "give sqlite or postgres://"},
		{"cove.db", sandbox.ErrInvalid, "give sqlite or postgres://"},
		{"postgres://cove:" + pw + "@db:port/cove", sandbox.ErrInvalid, "does not parse"},
		{"postgres://cove:" + pw + "@127.0.0.1:1/cove?connect_timeout=5", sandbox.ErrUnavailable, "cannot reach PostgreSQL"},
	} {
		_, err := OpenStore(ctx, tc.spec, t.TempDir())
		if !errors.Is(err, tc.want) || !strings.Contains(err.Error(), tc.msg) {
			t.Errorf("OpenStore(%q): got %v, want %v saying %q", tc.spec, err, tc.want, tc.msg)
		}
		if err != nil && strings.Contains(err.Error(), pw) {
			t.Errorf("OpenStore(%q): the error shows the password: %v", tc.spec, err)
		}
	}

	// A real PostgreSQL: the store works, and MintAdminKey makes a key in
	// it without a data directory.
	url := pgtest.NewDatabase(t)
	st, err := OpenStore(ctx, url, "")
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	if err := st.CreateTeam(ctx, store.Team{ID: "t", CreatedAt: time.Now()}); err != nil {
		t.Fatal(err)
	}
	secret, id, err := MintAdminKey(ctx, "", url, "recovered")
	if err != nil {
		t.Fatal(err)
	}
	keys, err := st.ListKeys(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	found := false
	for _, k := range keys {
		found = found || (k.ID == id && k.Admin && strings.HasPrefix(secret, k.Prefix))
	}
	if !found {
		t.Errorf("admin key %s is not in the PostgreSQL store: %+v", id, keys)
	}
}
