package cli

import (
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

// A tenant's network allow list, attacked through the real binary: cloud
// metadata is refused whatever the operator says, private ranges unless
// the operator allows them (COVE_NETWORK_ALLOW_PRIVATE for the CLI,
// --network-allow-private for cove serve), with a message that names the
// entry and says why, and no sandbox is left behind.

func TestAttackNetAllowCLI(t *testing.T) {
	home := runHome(t)
	create := func(allow string) (string, string, int) {
		return coveProcess(t, "sandbox", "create", "--state-dir", home, "--network", "allow", "--allow", allow)
	}
	t.Setenv("COVE_NETWORK_ALLOW_PRIVATE", "")
	for _, c := range []struct {
		allow string
		says  []string
	}{
		{"169.254.169.254:80", []string{"169.254.169.254:80", "metadata", "never"}},
		{"0.0.0.0/0", []string{"0.0.0.0/0", "metadata"}},
		{"10.1.2.3:5432", []string{"10.1.2.3:5432", "private", "operator"}},
	} {
		out, errOut, code := create(c.allow)
		if code == 0 {
			t.Errorf("cove sandbox create --allow %s: created %q, want it refused", c.allow, out)
			continue
		}
		for _, say := range c.says {
			if !strings.Contains(errOut, say) {
				t.Errorf("--allow %s: the error does not say %q:\n%s", c.allow, say, errOut)
			}
		}
		if strings.Contains(errOut, home) {
			t.Errorf("--allow %s: the error shows a host path:\n%s", c.allow, errOut)
		}
	}
	if ids := sandboxesIn(t, home); len(ids) != 0 {
		t.Errorf("refused creates left sandboxes: %v", ids)
	}

	// The operator allows a private range: a tenant may name it, and
	// still never metadata.
	t.Setenv("COVE_NETWORK_ALLOW_PRIVATE", "10.1.0.0/16")
	if out, errOut, code := create("10.1.2.3:5432"); code != 0 || !strings.HasPrefix(out, "sb-") {
		t.Errorf("--allow 10.1.2.3:5432 with 10.1.0.0/16 allowed: exit %d %q\n%s", code, out, errOut)
	}
	if _, errOut, code := create("169.254.169.254:80"); code == 0 || !strings.Contains(errOut, "metadata") {
		t.Errorf("--allow 169.254.169.254:80 with a private range allowed: exit %d\n%s", code, errOut)
	}
	t.Setenv("COVE_NETWORK_ALLOW_PRIVATE", "169.254.0.0/16")
	if _, errOut, code := create("169.254.169.254:80"); code == 0 || !strings.Contains(errOut, "169.254.0.0/16") {
		t.Errorf("COVE_NETWORK_ALLOW_PRIVATE=169.254.0.0/16: exit %d, want refused naming it\n%s", code, errOut)
	}
}

func TestAttackNetAllowServe(t *testing.T) {
	home, data := serveHome(t, "cn")
	p := startServe(t, home, data, "--network-allow-private", "10.1.0.0/16")
	key := tenantKey(t, p, "tenant")
	for _, c := range []struct {
		allow string
		code  int
		says  []string
	}{
		{"169.254.169.254:80", 400, []string{"169.254.169.254:80", "metadata", "never"}},
		{"100.100.100.200", 400, []string{"100.100.100.200", "metadata"}},
		{"10.2.0.1:5432", 400, []string{"10.2.0.1:5432", "private", "operator"}},
		{"10.1.2.3:5432", 201, nil},
	} {
		var e api.Error
		var sb api.Sandbox
		var body any = &e
		if c.code == 201 {
			body = &sb
		}
		code := apiCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{Network: &api.Network{Mode: "allow", Allow: []string{c.allow}}}, body)
		if code != c.code {
			t.Errorf("allow %s: status %d %+v, want %d", c.allow, code, e, c.code)
			continue
		}
		for _, say := range c.says {
			if !strings.Contains(e.Message, say) {
				t.Errorf("allow %s: the message %q does not say %q", c.allow, e.Message, say)
			}
		}
		if strings.Contains(e.Message, home) {
			t.Errorf("allow %s: the message shows a host path: %q", c.allow, e.Message)
		}
		if sb.ID != "" {
			apiCall(t, "DELETE", p.url+"/v1/sandboxes/"+sb.ID, key, nil, nil)
		}
	}
}
