package server

import (
	"archive/tar"
	"bytes"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox/local"
)

// TestStartFailureHidesHost: a sandbox that fails to start is a 503 that
// says so with a request id, through /v1 and E2B's API; the host log's
// lines and paths in the runtime's error go to the server's log only.
func TestStartFailureHidesHost(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs the local runtime (root), whose start failures carry its host log")
	}
	// The real runtime, whose sandboxes' pid 1 cannot be started: the
	// failure names the missing program's host path and quotes the
	// sandbox's host log. (Starving a sandbox of memory no longer stops
	// it: its daemon keeps a reserve of its own.)
	dir := t.TempDir()
	rt, err := local.New(local.Config{Dir: filepath.Join(dir, "sb"), InitCommand: []string{filepath.Join(dir, "no-such-init")},
		Env: []string{"GORACE=atexit_sleep_ms=0"}})
	if err != nil {
		t.Fatal(err)
	}
	ts := newTestServer(t, Config{Runtime: rt})
	key := ts.teamKey(t, "starved")
	for _, path := range []string{"/v1/sandboxes", "/sandboxes"} {
		code, data := ts.call(t, "POST", path, key, `{}`)
		if code != http.StatusServiceUnavailable || !strings.Contains(string(data), "could not be started") || !strings.Contains(string(data), "request id req-") {
			t.Errorf("POST %s with a sandbox that cannot start: %d %s, want 503 saying so with a request id", path, code, data)
		}
		noHostDetail(t, "POST "+path, data)
	}
}

// TestStorageFailureHidesHost: when the server's own disk fails a
// snapshot, a restore or an upload's spool, the tenant gets a 500 with a
// request id; the DataDir paths in the cause stay in the log.
func TestStorageFailureHidesHost(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "diskfail")
	sb := ts.create(t, key, api.CreateSandbox{})
	data := filepath.Join(ts.dir, "data")
	check := func(what string, code int, body []byte) {
		t.Helper()
		if code != http.StatusInternalServerError || !strings.Contains(string(body), "request id req-") || strings.Contains(string(body), data) || strings.Contains(string(body), ".tmp-") {
			t.Errorf("%s with the server's disk failing: %d %s, want 500 with a request id and no host path", what, code, body)
		}
	}
	// A snapshot whose file is gone cannot be restored or downloaded.
	var snap api.Snapshot
	ts.must(t, 201, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", key, nil, &snap)
	if err := os.Remove(filepath.Join(data, "snapshots", "diskfail", snap.ID+".tar")); err != nil {
		t.Fatal(err)
	}
	code, body := ts.call(t, "POST", "/v1/snapshots/"+snap.ID+"/restore", key, "{}")
	check("restore", code, body)
	code, body = ts.call(t, "GET", "/v1/snapshots/"+snap.ID+"/download", key, nil)
	check("download", code, body)
	// The team's snapshot directory and the spool directory cannot be
	// made.
	for _, d := range []string{filepath.Join(data, "snapshots", "diskfail"), filepath.Join(data, "tmp")} {
		if err := os.RemoveAll(d); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(d, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, body = ts.call(t, "POST", "/v1/sandboxes/"+sb.ID+"/snapshots", key, nil)
	check("snapshot", code, body)
	var tb bytes.Buffer
	tw := tar.NewWriter(&tb)
	tw.WriteHeader(&tar.Header{Name: "a.txt", Mode: 0o644, Size: 1, Typeflag: tar.TypeReg})
	tw.Write([]byte("a"))
	tw.Close()
	code, body = ts.call(t, "PUT", "/v1/sandboxes/"+sb.ID+"/tar?path=.", key, tb.String())
	check("tar upload", code, body)
}
