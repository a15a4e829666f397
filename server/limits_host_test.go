package server

import (
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

// TestCreateCPUsAboveHost: a create asking for more CPUs than the
// server's machine has is refused with the limit; a size whose preset
// is larger gets the machine's CPUs and says so.
func TestCreateCPUsAboveHost(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	n := runtime.NumCPU()
	if n+1 > api.MaxCPUs {
		t.Skipf("this machine has %d CPUs, more than a create may ask for", n)
	}
	code, body := ts.call(t, "POST", "/v1/sandboxes", key, api.CreateSandbox{CPUs: float64(n + 1)})
	if code != 400 || !strings.Contains(string(body), fmt.Sprintf("give at most %d", n)) {
		t.Errorf("cpus %d on a %d-CPU server: %d %s, want 400 naming the limit", n+1, n, code, body)
	}
	var list api.SandboxList
	ts.must(t, 200, "GET", "/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("a refused create left %d sandboxes", len(list.Sandboxes))
	}
	sb := ts.create(t, key, api.CreateSandbox{Size: "large"})
	if want := min(api.Sizes["large"].CPUs, float64(n)); sb.CPUs != want {
		t.Errorf("size large on a %d-CPU server has %g CPUs, want %g", n, sb.CPUs, want)
	}
}

// TestErrorsNameSandboxOnce: what the API says about a sandbox names it
// once, hints included.
func TestErrorsNameSandboxOnce(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "alpha")
	sb := ts.create(t, key, api.CreateSandbox{})
	ts.must(t, 200, "POST", "/v1/sandboxes/"+sb.ID+"/stop", key, nil, nil)
	for _, tt := range []struct{ method, path string }{
		{"POST", "/v1/sandboxes/" + sb.ID + "/exec"},
		{"GET", "/v1/sandboxes/" + sb.ID + "/files/list?path=/workspace"},
		{"GET", "/v1/sandboxes/sb-nope"},
		{"POST", "/v1/sandboxes/sb-nope/exec"},
	} {
		code, body := ts.call(t, tt.method, tt.path, key, api.Exec{Cmd: "true"})
		id := sb.ID
		if strings.Contains(tt.path, "sb-nope") {
			id = "sb-nope"
		}
		if code < 400 || strings.Count(string(body), id) > 1 {
			t.Errorf("%s %s: %d %s: want an error naming %s at most once", tt.method, tt.path, code, body, id)
		}
	}
}
