package local

import (
	"context"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/cove-sandbox/cove/template"
)

// TestSudo: the daemon's sudo, on the host template (whose /usr/bin/sudo
// is the host's, covered) and on a Debian template without sudo (pid 1
// makes the file in the sandbox's overlay): absent until the daemon is
// told a user may use it, then root for that user only.
func TestSudo(t *testing.T) {
	rt := newRuntime(t)
	t.Run("host", func(t *testing.T) {
		onTiers(t, func(t *testing.T, iso string) { checkSudo(t, rt, "", iso) })
	})
	t.Run("debian", func(t *testing.T) {
		if _, err := exec.LookPath("mmdebstrap"); err != nil {
			if _, err := exec.LookPath("debootstrap"); err != nil {
				t.Skip("needs mmdebstrap or debootstrap (make test installs them)")
			}
		}
		// The same template as TestDebianTemplateKeepsInstalledPackages:
		// built once per run.
		store, err := template.Open(filepath.Join(rt.cfg.Dir, ".templates"))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := store.Get("debian-test"); err != nil {
			if _, err := store.Build(t.Context(), "debian-test", template.BuildOptions{}); err != nil {
				t.Skipf("cannot build a Debian template here (is the mirror reachable?): %v", err)
			}
		}
		checkSudo(t, rt, "debian-test", sandbox.IsolationNative)
	})
}

func checkSudo(t *testing.T, rt *Runtime, tmpl, iso string) {
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Template: tmpl, Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	run := func(user, script string) string {
		t.Helper()
		var out strings.Builder
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, User: user, Stdout: &out, Stderr: &out}); err != nil {
			t.Fatal(err)
		}
		return out.String()
	}
	if got := run("", "sudo true; echo exit=$?"); !strings.Contains(got, "not available") || !strings.Contains(got, "exit=1") {
		t.Fatalf("sudo before the daemon gives it: %q", got)
	}
	allowSudo(t, rt, s.ID(), "user")
	if got := run("", "sudo id -u; sudo -n true && echo ok"); got != "0\nok\n" {
		t.Errorf("sudo as user: %q", got)
	}
	if got := run("", "sudo sh -c 'echo hi > /etc/cove-sudo' && stat -c %U /etc/cove-sudo"); got != "root\n" {
		t.Errorf("a file root wrote through sudo: %q", got)
	}
	if got := run("nobody", "sudo true 2>&1; echo exit=$?"); !strings.Contains(got, "not allowed") || !strings.Contains(got, "exit=1") {
		t.Errorf("sudo as nobody: %q", got)
	}
	// gVisor's mountinfo does not show nodev (nor has it host devices).
	if got := run("", "grep ' /usr/bin/sudo ' /proc/self/mountinfo"); !strings.Contains(got, " ro,nosuid,nodev") && !(onGVisor(iso) && strings.Contains(got, " ro,nosuid")) {
		t.Errorf("/usr/bin/sudo's mount: %q, want read-only, nosuid, nodev", got)
	}
}

// allowSudo tells sandbox id's daemon that user may use sudo, as the E2B
// API's proxy does on every envd call.
func allowSudo(t *testing.T, rt *Runtime, id, user string) {
	t.Helper()
	st, err := sbdir.Read(rt.dir(id))
	if err != nil {
		t.Fatal(err)
	}
	hc := &http.Client{Transport: &http.Transport{DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
		if gvisor(st) {
			return guest.DialUnixNoFollow(ctx, rt.gvisorSocket(id, st.ShimPID))
		}
		return (&net.Dialer{}).DialContext(ctx, "unix", filepath.Join(rt.dir(id), "guest.sock"))
	}}}
	req, _ := http.NewRequest("GET", "http://sandbox/health", nil)
	req.Header.Set(guest.AccessTokenHeader, st.Token)
	req.Header.Set(guest.SudoHeader, user)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	hc.CloseIdleConnections()
}

// TestSudoLinkStaysInside: a template (or a stopped sandbox's disk: the
// same overlay) whose /usr/bin/sudo is a symlink to a host path, absolute
// or climbing with "..", starts; pid 1 follows the link inside the
// sandbox only (where it leads nowhere), mounts nothing over the host
// file, and the host is untouched.
func TestSudoLinkStaysInside(t *testing.T) { onTiers(t, testSudoLinkStaysInside) }

func testSudoLinkStaysInside(t *testing.T, iso string) {
	v := newVictim(t)
	sh, err := filepath.EvalSymlinks("/bin/sh")
	if err != nil {
		t.Skip("no /bin/sh")
	}
	for _, target := range []string{v.dir + "/keep", strings.Repeat("../", 20) + v.dir[1:] + "/keep", "/proc/1/root" + v.dir + "/keep"} {
		t.Run(target, func(t *testing.T) {
			lower := hostLikeLower(t, nil)
			if err := os.MkdirAll(filepath.Join(lower, "usr/bin"), 0o755); err != nil {
				t.Fatal(err)
			}
			b, err := os.ReadFile(sh)
			if err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(filepath.Join(lower, "usr/bin/sh"), b, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(target, filepath.Join(lower, "usr/bin/sudo")); err != nil {
				t.Fatal(err)
			}
			var binds []string
			for _, d := range []string{"/usr/lib", "/usr/lib64"} {
				if fi, err := os.Stat(d); err == nil && fi.IsDir() {
					binds = append(binds, d)
				}
			}
			rt := privateRuntime(t, linkTree{Rootfs{Lower: lower, Binds: binds, Env: map[string]string{"PATH": sbdirPath}}}, false)
			s, err := rt.Create(context.Background(), sandbox.Spec{Isolation: iso})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			v.check(t, "after create")
			stopResume(t, rt, s.ID())
			v.check(t, "after resume")
			// Nothing is mounted over a path that names the host file.
			out := asRoot(t, rt, s.ID(), "while read -r l; do case $l in *"+v.dir+"*) echo \"$l\";; esac; done < /proc/self/mountinfo")
			if out != "" {
				t.Errorf("a mount over the link's host target: %q", out)
			}
		})
	}
}
