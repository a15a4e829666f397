package server

import (
	"bytes"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
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
	es.runSuite(t, sdk, key, "user.test.mjs", "COVE_V1_SANDBOX="+v1.ID)
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
	// No sudo: /v1 keeps its user unprivileged.
	if got := ts.exec(t, key, sb.ID, "sudo whoami; echo exit=$?"); !strings.Contains(got, "not available") || !strings.Contains(got, "exit=1") {
		t.Errorf("sudo in a /v1 sandbox: %q, want it not available", got)
	}
}

// TestE2BSudoWalled: the user of an E2B sandbox, root through sudo, is
// still walled in: no host file is readable or writable, the daemon's
// executable bound at /usr/bin/sudo cannot be changed, mounts and new
// namespaces are refused, and the command keeps no_new_privs and the
// daemon's bounded capabilities. Other users get no sudo.
func TestE2BSudoWalled(t *testing.T) {
	ts := newTestServer(t, Config{})
	key := ts.e2bKey(t, "sudowall")
	sb := ts.e2bCreate(t, key, map[string]any{"templateID": "base"})
	// The first envd call gives user sudo, as any E2B SDK call does.
	resp, data := ts.e2bCall(t, "GET", "/files?path=/etc/hostname", "", nil, map[string]string{
		"E2b-Sandbox-Id": sb.SandboxID, "E2b-Sandbox-Port": "49983", "X-Access-Token": sb.EnvdAccessToken})
	if resp.StatusCode != 200 {
		t.Fatalf("envd: %d %s", resp.StatusCode, data)
	}
	if got := strings.TrimSpace(ts.exec(t, key, sb.SandboxID, "whoami; sudo whoami")); got != "user\nroot" {
		t.Fatalf("whoami, sudo whoami: %q", got)
	}

	rootCaps := execAs(t, ts, key, sb.SandboxID, "root", "grep CapBnd /proc/self/status")
	if !strings.HasPrefix(rootCaps, "CapBnd:") || strings.Contains(rootCaps, "1ffffffffff") {
		t.Fatalf("a root command's capabilities: %q", rootCaps)
	}
	secret, err := os.CreateTemp("/var/tmp", "cove-sudo-secret-")
	if err != nil {
		t.Fatal(err)
	}
	secret.WriteString("host secret")
	secret.Close()
	t.Cleanup(func() { os.Remove(secret.Name()) })
	exe, _ := os.Executable() // pid 1 of the sandbox, bound at /usr/bin/sudo
	exeSum := fileSum(t, exe)
	escape := filepath.Join("/usr", fmt.Sprintf("cove-sudo-escape-%d", os.Getpid()))

	for _, tc := range []struct{ name, script, want string }{
		{"host file invisible", "sudo cat " + secret.Name() + " 2>&1", "No such file"},
		{"root's /usr/bin/sudo read-only", "sudo sh -c 'echo x >> /usr/bin/sudo' 2>&1 || echo refused", "refused"},
		{"root's /usr/bin/sudo stays mounted", "sudo umount /usr/bin/sudo 2>&1 || echo refused", "refused"},
		{"host /usr read-only", "sudo sh -c 'echo x > " + escape + "' 2>&1 || echo refused", "refused"},
		{"mount refused", "sudo mount -t tmpfs t /mnt 2>&1 || echo refused", "refused"},
		{"new user namespace refused", "sudo unshare -U true 2>&1 || echo refused", "refused"},
		{"no_new_privs kept", "sudo grep NoNewPrivs /proc/self/status", "NoNewPrivs:\t1"},
		{"seccomp kept", "sudo grep Seccomp: /proc/self/status", "Seccomp:\t2"},
		// The same bounded set as a root command through the API.
		{"bounded capabilities", "sudo grep CapBnd /proc/self/status", rootCaps},
		{"other users get no sudo", "sudo -u nobody sudo true 2>&1 || echo refused", "not allowed"},
	} {
		if got := ts.exec(t, key, sb.SandboxID, tc.script); !strings.Contains(got, tc.want) {
			t.Errorf("%s: %q, want %q", tc.name, got, tc.want)
		}
	}
	// What root wrote in the sandbox stayed there.
	ts.exec(t, key, sb.SandboxID, "sudo sh -c 'echo pwned > "+secret.Name()+"'")
	if b, _ := os.ReadFile(secret.Name()); string(b) != "host secret" {
		t.Errorf("the host's %s became %q", secret.Name(), b)
	}
	if _, err := os.Stat(escape); err == nil {
		os.Remove(escape)
		t.Errorf("a file appeared in the host's /usr")
	}
	if !bytes.Equal(fileSum(t, exe), exeSum) {
		t.Errorf("the host's %s changed", exe)
	}
}

// execAs runs script in sandbox id as user through /v1 and returns its
// output.
func execAs(t *testing.T, ts *testServer, key, id, user, script string) string {
	t.Helper()
	code, data := ts.call(t, "POST", "/v1/sandboxes/"+id+"/exec", key, api.Exec{Cmd: script, Shell: true, User: user, TimeoutSeconds: 60})
	if code != 200 {
		t.Fatalf("exec: %d %s", code, data)
	}
	var out strings.Builder
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		var ev api.ExecEvent
		if json.Unmarshal([]byte(line), &ev) == nil && ev.Type == "stdout" {
			out.Write(ev.Data)
		}
	}
	return out.String()
}

func fileSum(t *testing.T, p string) []byte {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	s := sha256.Sum256(b)
	return s[:]
}
