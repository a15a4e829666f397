package server

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

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
