package cli

import (
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-sandbox/cove/api"
)

// TestAttackUserPath: a tenant with an ordinary key asks `cove serve` (its
// own process) for a sandbox whose user is a path. The create is refused
// with 400 and a message that names no host path, and nothing is made on
// the host (before, pid 1 made /home/USER by joining it under the
// sandbox's root: the host directory it climbed to, handed to uid 1000).
func TestAttackUserPath(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("cove serve runs the local runtime, which needs root (CI runs as root)")
	}
	home, data := serveHome(t, "ca")
	p := startServe(t, home, data)
	key := tenantKey(t, p, "mallory")

	target, err := os.MkdirTemp("/var/tmp", "cove-attack-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(target) })
	os.Chmod(target, 0o700)
	climb := strings.Repeat("../", 24)
	// A name of this test's own under /tmp: whatever else the host has
	// there is not this test's business.
	planted := filepath.Join("/tmp", filepath.Base(target)+"-x")
	for _, user := range []string{
		"../../.." + planted,
		climb + target[1:] + "/made",
		climb + target[1:],
		"../../..",
		target,
	} {
		var e api.Error
		code := apiCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{User: user}, &e)
		if code != 400 || e.Code != api.CodeInvalid {
			t.Errorf("create with user %q: %d %+v, want 400 %s", user, code, e, api.CodeInvalid)
		}
		for _, leak := range []string{home, data, target, "/var/", "/tmp/"} {
			if strings.Contains(e.Message, leak) {
				t.Errorf("create with user %q: the message %q names a host path (%s)", user, e.Message, leak)
			}
		}
		if !strings.Contains(e.Message, "letters, digits") {
			t.Errorf("create with user %q: the message %q does not say what a user name may hold", user, e.Message)
		}
	}
	// Nothing was made or handed over on the host.
	var st os.FileInfo
	if st, err = os.Stat(target); err != nil {
		t.Fatal(err)
	}
	if entries, _ := os.ReadDir(target); len(entries) != 0 || st.Mode().Perm() != 0o700 || owner(st) != 0 {
		t.Errorf("the host directory %s changed: %v, mode %v, owner %d", target, entries, st.Mode(), owner(st))
	}
	if _, err := os.Stat(planted); err == nil {
		os.RemoveAll(planted)
		t.Errorf("%s exists on the host", planted)
	}
	for _, d := range []string{home, data} {
		if st, err := os.Stat(d); err == nil && owner(st) != 0 {
			t.Errorf("%s is now owned by %d", d, owner(st))
		}
	}
	var list api.SandboxList
	apiCall(t, "GET", p.url+"/v1/sandboxes", key, nil, &list)
	if len(list.Sandboxes) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", list.Sandboxes)
	}
	entries, _ := os.ReadDir(filepath.Join(data, "sandboxes"))
	for _, e := range entries {
		if strings.HasPrefix(e.Name(), "sb-") {
			t.Errorf("refused creates left %s in the state directory", e.Name())
		}
	}

	// An ordinary user name still works.
	var sb api.Sandbox
	if code := apiCall(t, "POST", p.url+"/v1/sandboxes", key, api.CreateSandbox{User: "root"}, &sb); code != 201 {
		t.Fatalf("create with user root: %d", code)
	}
}

func owner(fi os.FileInfo) int { return int(fi.Sys().(*syscall.Stat_t).Uid) }
