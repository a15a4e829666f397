package server

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

// TestE2BUser runs testdata/e2b/user.test.mjs with the unmodified E2B SDK
// in both routing modes: sandboxes made through the E2B API run as user
// in /home/user, relative paths resolve there, and sudo works; a /v1
// sandbox reached through envd keeps its workspace.
func TestE2BUser(t *testing.T) {
	sdk, why := e2bSDKDir(t)
	if sdk == "" {
		t.Skip(why)
	}
	es := newE2BServer(t, Config{})
	key := es.e2bKey(t, "user")
	v1 := es.create(t, key, api.CreateSandbox{})
	t.Cleanup(func() { es.call(t, "DELETE", "/v1/sandboxes/"+v1.ID, key, nil) })
	for _, mode := range []string{"domain", "header"} {
		t.Run(mode, func(t *testing.T) {
			env := []string{"E2B_API_KEY=" + key, "COVE_E2B_MODE=" + mode, "COVE_E2B_DOMAIN=" + es.domain,
				"E2B_DOMAIN=" + es.domain, "COVE_V1_SANDBOX=" + v1.ID}
			if mode == "header" {
				env = append(env, "E2B_SANDBOX_URL="+es.URL)
			}
			out, err := es.node(t, sdk, env, "--test-reporter=spec", "user.test.mjs")
			if err != nil {
				t.Fatalf("node user.test.mjs (%s routing): %v\n%s", mode, err, out)
			}
			t.Logf("%s", out)
		})
	}
}

// TestV1UserUnchanged: Cove's own API keeps /workspace and its default
// user for its sandboxes.
func TestV1UserUnchanged(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.teamKey(t, "v1user")
	sb := ts.create(t, key, api.CreateSandbox{})
	t.Cleanup(func() { ts.call(t, "DELETE", "/v1/sandboxes/"+sb.ID, key, nil) })
	if got := strings.TrimSpace(ts.exec(t, key, sb.ID, "whoami; pwd")); got != "user\n/workspace" {
		t.Errorf("a /v1 sandbox's whoami and pwd: %q, want user and /workspace", got)
	}
}
