package server

import (
	"context"
	"net/http"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// starvedRuntime is the real runtime made to start every sandbox with 1
// MiB of memory, which it cannot start with: a start failure as the
// runtime reports it (the host log's last lines, cgroup paths).
type starvedRuntime struct{ sandbox.Runtime }

func (r starvedRuntime) Create(ctx context.Context, spec sandbox.Spec) (sandbox.Session, error) {
	spec.Limits.MemoryBytes = 1 << 20
	return r.Runtime.Create(ctx, spec)
}

// TestStartFailureHidesHost: a sandbox that fails to start is a 503 that
// says so with a request id, through /v1 and E2B's API; the host log's
// lines and paths in the runtime's error go to the server's log only.
func TestStartFailureHidesHost(t *testing.T) {
	dir := t.TempDir()
	rt := testRuntime(t, dir)
	if _, ok := rt.(interface{ WaitPool() }); !ok {
		t.Skip("needs the local runtime (root), whose start failures carry its host log")
	}
	ts := newTestServer(t, Config{Runtime: starvedRuntime{rt}})
	key := ts.teamKey(t, "starved")
	for _, path := range []string{"/v1/sandboxes", "/sandboxes"} {
		code, data := ts.call(t, "POST", path, key, `{}`)
		if code != http.StatusServiceUnavailable || !strings.Contains(string(data), "could not be started") || !strings.Contains(string(data), "request id req-") {
			t.Errorf("POST %s with a sandbox that cannot start: %d %s, want 503 saying so with a request id", path, code, data)
		}
		noHostDetail(t, "POST "+path, data)
	}
}
