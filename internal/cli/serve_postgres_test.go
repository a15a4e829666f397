package cli

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/store/postgres/pgtest"
)

// TestServeOnPostgres: cove serve --store postgres://... keeps its
// records in PostgreSQL (none in --data), prints the first admin key
// once, finds its data again after a restart, and cove key create
// --admin --store mints a working admin key in that database. A bad
// --store is refused with what to give; an unreachable server stops the
// start with an error that does not show the password.
func TestServeOnPostgres(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	url := pgtest.NewDatabase(t)
	home, data := serveHome(t, "cp")
	p := startServe(t, home, data, "--store", url)
	if p.admin == "" {
		t.Fatalf("no admin key printed on the first start:\n%s", p.stderr.String())
	}
	var k api.Key
	if code := apiCall(t, "POST", p.url+"/v1/keys", p.admin, api.CreateKey{Name: "ci", NewTeam: "acme"}, &k); code != 201 {
		t.Fatalf("creating a team's key: %d", code)
	}
	if _, err := os.Stat(filepath.Join(data, "cove.db")); err == nil {
		t.Errorf("cove serve --store postgres made a SQLite store in --data too")
	}
	p.cmd.Process.Kill()
	p.cmd.Wait()

	// A restart finds the records: no new admin key; the team is there.
	p2 := startServe(t, home, data, "--store", url)
	if p2.admin != "" {
		t.Errorf("a restart on the same PostgreSQL printed a new admin key")
	}
	out, errOut, err := run(t, "key", "create", "--admin", "--store", url)
	if err != nil {
		t.Fatalf("key create --admin --store: %v\n%s", err, errOut)
	}
	var keys struct{ Keys []api.Key }
	if code := apiCall(t, "GET", p2.url+"/v1/keys?all=true", strings.TrimSpace(out), nil, &keys); code != 200 {
		t.Fatalf("GET /v1/keys with the key minted in PostgreSQL: %d", code)
	}
	found := false
	for _, key := range keys.Keys {
		found = found || (key.Team == "acme" && key.Name == "ci")
	}
	if !found {
		t.Errorf("the team's key made before the restart is not listed: %+v", keys.Keys)
	}

	const pw = "no-such-pw"
	for _, tc := range []struct{ store, want string }{
		{"mysql://root:" + pw + "@db/cove", "give sqlite or postgres://"},
		{"postgres://cove:" + pw + "@127.0.0.1:1/cove?connect_timeout=5", "cannot reach PostgreSQL"},
	} {
		_, errOut, err := run(t, "serve", "--addr", "127.0.0.1:0", "--data", t.TempDir(), "--state-dir", home, "--pool", "0", "--store", tc.store)
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("serve --store %s: got %v, want an error saying %q", tc.store, err, tc.want)
		}
		if err != nil && strings.Contains(err.Error()+errOut, pw) {
			t.Errorf("serve --store: the error shows the password: %v %s", err, errOut)
		}
	}
}
