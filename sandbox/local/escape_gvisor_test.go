package local

import (
	"context"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// TestEscapesGVisor: the attempts of TestEscapes that aim at the host,
// on the gVisor tier, as the sandbox's user and as root inside. Under
// gVisor the daemon installs Cove's seccomp filter too (TestEscapes'
// gvisor subtest checks it), but not Landlock, which gVisor lacks; the
// calls refused reach gVisor's kernel, not the host's, so what is
// asserted here is the outcome the host relies on: nothing of the host
// is seen, reached or changed.
func TestEscapesGVisor(t *testing.T) {
	rt := newGVisor(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	gvisorCopyProbe(t, s)
	l := gvisorHostListener(t)
	secret := gvisorHostSecret(t)

	tests := []struct {
		name string
		args []string
		want string
	}{
		{"host loopback unreachable", []string{"dial", l.Addr().String()}, "ECONNREFUSED"},
		{"no route out", []string{"dial", "192.0.2.1:80"}, "ENETUNREACH"},
		{"host process invisible", []string{"kill0", strconv.Itoa(os.Getpid())}, "ESRCH"},
		{"host /etc/shadow absent", []string{"read", "/etc/shadow"}, "ENOENT"},
		{"host file outside the template absent", []string{"read", secret}, "ENOENT"},
		{"host /root unreadable", []string{"read", "/root/.profile"}, "ENOENT|EACCES"},
		{"host kernel symbols absent", []string{"read", "/proc/kallsyms"}, "ENOENT"},
		// gVisor checks permissions before the mount's read-only flag.
		{"/usr read-only", []string{"write", "/usr/escape"}, "EROFS|EACCES"},
		{"/etc not the user's", []string{"write", "/etc/escape"}, "EACCES"},
		{"mount refused", []string{"mount", "/tmp"}, "EPERM"},
		{"module loading refused", []string{"init_module"}, "EPERM|ENOSYS"},
		{"setuid(0) refused", []string{"setuid0"}, "EPERM"},
		{"chroot refused", []string{"chroot"}, "EPERM"},
		{"no capabilities", []string{"status", "CapEff"}, "0000000000000000"},
		{"workspace writable", []string{"write", "/workspace/ok"}, "ok"},
		{"as-root: /usr read-only", []string{"write", "/usr/escape"}, "EROFS"},
		{"as-root: host file outside the template absent", []string{"read", secret}, "ENOENT"},
		{"as-root: mount refused", []string{"mount", "/tmp"}, "EPERM"},
		{"as-root: module loading refused", []string{"init_module"}, "EPERM|ENOSYS"},
		// gVisor's own /proc, whose files it refuses to write with EIO:
		// the host's kernel never sees the write.
		{"as-root: /proc/sysrq-trigger not writable", []string{"write", "/proc/sysrq-trigger"}, "EROFS|EACCES|EPERM|ENOENT|EIO"},
		{"as-root: kernel knobs read-only", []string{"write", "/proc/sys/kernel/hostname"}, "EROFS|EACCES|EPERM|EIO"},
		{"as-root: host process invisible", []string{"kill0", strconv.Itoa(os.Getpid())}, "ESRCH"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			user, name := "", tt.name
			if rest, ok := strings.CutPrefix(name, "as-root: "); ok {
				user, name = "root", rest
			}
			var out strings.Builder
			st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "/workspace/.probe", Args: append([]string{"probe"}, tt.args...), User: user, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out.String()); !slices.Contains(strings.Split(tt.want, "|"), got) {
				t.Errorf("%v as %q: got %q (exit %+v), want %q", tt.args, user, got, st, tt.want)
			}
		})
	}
	if _, err := os.Stat("/usr/escape"); err == nil {
		t.Error("a file appeared in the host's /usr")
	}
	if name, _ := os.Hostname(); name == "escape" {
		t.Error("the host's hostname became the sandbox's write")
	}
	// The kernel that answered is gVisor's, not the host's.
	out, _ := run(t, s, "uname -r")
	if got := strings.TrimSpace(out); !strings.Contains(got, "gvisor") {
		t.Errorf("uname -r in the sandbox: %q, want gVisor's kernel", got)
	}
}

// TestGVisorSentryWalled: the process that serves a gVisor sandbox's
// syscalls (runsc's Sentry) is itself walled on the host, as the
// README's threat model says: a seccomp filter, no_new_privs, a few file
// capabilities (and ptrace, which systrap needs), a user namespace and a
// root of its own. A bug in gVisor lands there, not in the host's root.
// With a network too: gVisor's netstack then reads and writes the
// sandbox's veth, and must not need more for it.
func TestGVisorSentryWalled(t *testing.T) {
	rt := newGVisor(t)
	for _, mode := range []string{NetworkNone, NetworkInternet} {
		t.Run(mode, func(t *testing.T) {
			ctx := context.Background()
			s, err := rt.Create(ctx, sandbox.Spec{Network: sandbox.Network{Mode: mode}})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
			checkSentryWalled(t, sentryPID(t, rt.dir(s.ID())))
		})
	}
}

// checkSentryWalled checks the walls of the Sentry whose pid is pid.
func checkSentryWalled(t *testing.T, pid int) {
	t.Helper()
	status := sentryStatus(t, pid)
	if got := status["Seccomp"]; got != "2" {
		t.Errorf("the Sentry's Seccomp: %q, want 2 (a filter)", got)
	}
	if got := status["NoNewPrivs"]; got != "1" {
		t.Errorf("the Sentry's NoNewPrivs: %q, want 1", got)
	}
	// CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER,
	// CAP_FSETID and CAP_SYS_PTRACE.
	const allowed = 1<<0 | 1<<1 | 1<<2 | 1<<3 | 1<<4 | 1<<19
	capEff, err := strconv.ParseUint(status["CapEff"], 16, 64)
	if err != nil {
		t.Fatalf("the Sentry's CapEff %q: %v", status["CapEff"], err)
	}
	if extra := capEff &^ allowed; extra != 0 {
		t.Errorf("the Sentry's capabilities %#x include %#x beyond the five file ones and ptrace", capEff, extra)
	}
	for _, ns := range []string{"user", "mnt", "pid"} {
		mine, _ := os.Readlink("/proc/self/ns/" + ns)
		its, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/%s", pid, ns))
		if err != nil || its == mine {
			t.Errorf("the Sentry's %s namespace: %q (%v), the host's %q: want one of its own", ns, its, err, mine)
		}
	}
	var root, its syscall.Stat_t
	if err := syscall.Stat("/", &root); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Stat(fmt.Sprintf("/proc/%d/root/", pid), &its); err != nil {
		t.Fatal(err)
	}
	if its.Dev == root.Dev && its.Ino == root.Ino {
		t.Error("the Sentry's root is the host's: want an empty one of its own")
	}
}

// sentryPID finds the Sentry (runsc's "runsc-sandbox" process) of the
// gVisor sandbox whose directory is dir.
func sentryPID(t *testing.T, dir string) int {
	t.Helper()
	ents, err := os.ReadDir("/proc")
	if err != nil {
		t.Fatal(err)
	}
	want := "--root=" + filepath.Join(dir, "runsc")
	for _, e := range ents {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		cmd, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil {
			continue
		}
		args := strings.Split(string(cmd), "\x00")
		if args[0] == "runsc-sandbox" && slices.Contains(args, want) {
			return pid
		}
	}
	t.Fatalf("no runsc-sandbox process with %s", want)
	return 0
}

// sentryStatus is /proc/pid/status as a map.
func sentryStatus(t *testing.T, pid int) map[string]string {
	t.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	m := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		if k, v, ok := strings.Cut(line, ":"); ok {
			m[k] = strings.TrimSpace(v)
		}
	}
	return m
}

// gvisorCopyProbe puts this test binary in the sandbox's workspace as .probe.
func gvisorCopyProbe(t *testing.T, s sandbox.Session) {
	t.Helper()
	exe, _ := os.Executable()
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.WriteFile(context.Background(), ".probe", f, 0o755); err != nil {
		t.Fatal(err)
	}
}

// gvisorHostListener is something on the host's loopback that a sandbox must
// not reach.
func gvisorHostListener(t *testing.T) net.Listener {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return l
}

// gvisorHostSecret is a host file outside any template.
func gvisorHostSecret(t *testing.T) string {
	t.Helper()
	f, err := os.CreateTemp("/var/tmp", "cove-escape-secret-")
	if err != nil {
		t.Fatal(err)
	}
	f.WriteString("host secret")
	f.Close()
	t.Cleanup(func() { os.Remove(f.Name()) })
	return f.Name()
}
