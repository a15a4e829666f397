package local

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/cgroup"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// probe is the test binary's role inside a sandbox: it tries one thing
// and prints "ok" or the errno's name, so the escape tests can assert the
// exact outcome.
func probe(args []string) {
	var err error
	switch args[0] {
	case "dial":
		var c net.Conn
		c, err = net.DialTimeout("tcp", args[1], 2*time.Second)
		if err == nil {
			c.Close()
		}
	case "kill0":
		pid, _ := strconv.Atoi(args[1])
		err = unix.Kill(pid, 0)
	case "mount":
		err = unix.Mount("tmpfs", args[1], "tmpfs", 0, "")
	case "read":
		_, err = os.ReadFile(args[1])
	case "write":
		err = os.WriteFile(args[1], []byte("escape"), 0o644)
	case "init_module":
		_, _, e := unix.Syscall(unix.SYS_INIT_MODULE, 0, 0, 0)
		if e != 0 {
			err = e
		}
	case "unshare-user":
		err = unix.Unshare(unix.CLONE_NEWUSER)
	case "unshare-net":
		err = unix.Unshare(unix.CLONE_NEWNET)
	case "setuid0":
		err = unix.Setuid(0)
	case "chroot":
		err = unix.Chroot("/tmp")
	case "bpf":
		_, _, e := unix.Syscall(unix.SYS_BPF, 0, 0, 0)
		if e != 0 {
			err = e
		}
	case "keyctl":
		_, _, e := unix.Syscall(unix.SYS_KEYCTL, 0, 0, 0)
		if e != 0 {
			err = e
		}
	case "perf":
		_, _, e := unix.Syscall6(unix.SYS_PERF_EVENT_OPEN, 0, 0, ^uintptr(0), ^uintptr(0), 0, 0)
		if e != 0 {
			err = e
		}
	case "status":
		// Print a line of /proc/self/status (NoNewPrivs, CapEff, Seccomp).
		data, _ := os.ReadFile("/proc/self/status")
		for _, line := range strings.Split(string(data), "\n") {
			if strings.HasPrefix(line, args[1]+":") {
				fmt.Println(strings.TrimSpace(strings.TrimPrefix(line, args[1]+":")))
				return
			}
		}
		fmt.Println("absent")
		return
	}
	var errno syscall.Errno
	switch {
	case err == nil:
		fmt.Println("ok")
	case errors.As(err, &errno):
		fmt.Println(unix.ErrnoName(errno))
	case errors.Is(err, os.ErrNotExist):
		fmt.Println("ENOENT")
	default:
		fmt.Println("error:", err)
	}
}

// TestEscapes runs attempts to reach the host from inside a sandbox, as
// the sandbox's user; each must fail the way the test says.
func TestEscapes(t *testing.T) { onTiers(t, testEscapes) }

func testEscapes(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	exe, _ := os.Executable()
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	err = s.WriteFile(ctx, ".probe", f, 0o755)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}

	// Something on the host's loopback that the sandbox must not reach.
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	// A host file outside any template.
	secret, err := os.CreateTemp("/var/tmp", "cove-escape-secret-")
	if err != nil {
		t.Fatal(err)
	}
	secret.WriteString("host secret")
	secret.Close()
	defer os.Remove(secret.Name())

	// gv is what else the gVisor tier may answer.
	gv := func(alt string) string {
		if onGVisor(iso) {
			return alt
		}
		return ""
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"host loopback unreachable", []string{"dial", l.Addr().String()}, "ECONNREFUSED"},
		{"no route out", []string{"dial", "192.0.2.1:80"}, "ENETUNREACH"},
		{"host process invisible", []string{"kill0", strconv.Itoa(os.Getpid())}, "ESRCH"},
		{"host /etc/shadow absent", []string{"read", "/etc/shadow"}, "ENOENT"},
		{"host file outside the template absent", []string{"read", secret.Name()}, "ENOENT"},
		{"host /root unreadable", []string{"read", "/root/.profile"}, "ENOENT|EACCES"},
		// gVisor checks the user's permission before the mount's
		// read-only flag (root's write below sees EROFS on both).
		{"/usr read-only", []string{"write", "/usr/escape"}, "EROFS" + gv("|EACCES")},
		{"/etc not the user's", []string{"write", "/etc/escape"}, "EACCES"},
		{"mount refused", []string{"mount", "/tmp"}, "EPERM"},
		// ENOSYS on kernels built without module support.
		{"module loading refused", []string{"init_module"}, "EPERM|ENOSYS"},
		{"setuid(0) refused", []string{"setuid0"}, "EPERM"},
		{"chroot refused", []string{"chroot"}, "EPERM"},
		{"new network namespace refused", []string{"unshare-net"}, "EPERM"},
		{"workspace writable", []string{"write", "/workspace/ok"}, "ok"},
		{"new user namespace refused", []string{"unshare-user"}, "EPERM"},
		{"bpf refused", []string{"bpf"}, "EPERM"},
		{"keyctl refused", []string{"keyctl"}, "EPERM"},
		{"perf_event_open refused", []string{"perf"}, "EPERM"},
		{"no_new_privs set", []string{"status", "NoNewPrivs"}, "1"},
		{"seccomp filter on", []string{"status", "Seccomp"}, "2"},
		{"no capabilities", []string{"status", "CapEff"}, "0000000000000000"},
	}
	// Root inside the sandbox is walled in too.
	rootTests := []struct {
		name string
		args []string
		want string
	}{
		{"root: mount refused", []string{"mount", "/tmp"}, "EPERM"},
		{"root: new namespace refused", []string{"unshare-net"}, "EPERM"},
		{"root: module loading refused", []string{"init_module"}, "EPERM|ENOSYS"},
		{"root: /usr read-only", []string{"write", "/usr/escape"}, "EROFS"},
		// ENOENT on kernels without magic SysRq. gVisor's /proc and
		// /proc/sys are its own, and refuse such writes with EIO.
		{"root: /proc/sysrq-trigger not writable", []string{"write", "/proc/sysrq-trigger"}, "EROFS|EACCES|EPERM|ENOENT" + gv("|EIO")},
		{"root: kernel knobs read-only", []string{"write", "/proc/sys/kernel/hostname"}, "EROFS|EACCES" + gv("|EIO")},
		{"root: no_new_privs", []string{"status", "NoNewPrivs"}, "1"},
		// The daemon's kept set, no more (on gVisor the daemon starts
		// with CAP_SYS_ADMIN and CAP_SETPCAP for its setup, and drops
		// them before it serves).
		{"root: only the kept capabilities", []string{"status", "CapBnd"}, "00000000000004fb"},
	}
	for _, tt := range rootTests {
		tests = append(tests, struct {
			name string
			args []string
			want string
		}{tt.name, append([]string{"as-root"}, tt.args...), tt.want})
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out strings.Builder
			user := ""
			args := tt.args
			if args[0] == "as-root" {
				user, args = "root", args[1:]
			}
			st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "/workspace/.probe", Args: append([]string{"probe"}, args...), User: user, Stdout: &out, Stderr: &out})
			if err != nil {
				t.Fatal(err)
			}
			if got := strings.TrimSpace(out.String()); !slices.Contains(strings.Split(tt.want, "|"), got) {
				t.Errorf("%v: got %q (exit %+v), want %q", tt.args, got, st, tt.want)
			}
		})
	}
	// The working directory cannot lead out of the workspace either: not
	// with "..", not through a symlink.
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "ln", Args: []string{"-s", "/", "rootlink"}}); err != nil {
		t.Fatal(err)
	}
	for _, dir := range []string{"../..", "/etc", "rootlink", "rootlink/etc"} {
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "pwd", Dir: dir}); !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("exec with working directory %q: %v, want ErrInvalid", dir, err)
		}
	}
	// The setuid binaries of the host's /usr are on a nosuid mount.
	var out strings.Builder
	s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "grep ' /usr ' /proc/self/mountinfo"}, Stdout: &out})
	if !strings.Contains(out.String(), "nosuid") || !strings.Contains(out.String(), "ro") {
		t.Errorf("/usr mount %q: want ro,nosuid", out.String())
	}
	// Nothing the sandbox did reached the host.
	if _, err := os.Stat("/usr/escape"); err == nil {
		t.Error("a file appeared in the host's /usr")
	}
}

// TestResourceLimits: bombs hit the sandbox's own limits, the host stays
// usable, and the caller is told what happened.
func TestResourceLimits(t *testing.T) { onTiers(t, testResourceLimits) }

func testResourceLimits(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	// The memory limit covers the daemon too, and the OOM killer takes the
	// largest process: leave room for a race-instrumented daemon so the
	// bomb is the largest.
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, Limits: sandbox.Limits{MemoryBytes: 256 << 20, DiskBytes: 64 << 20, CPUs: 1}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })

	t.Run("fork bomb", func(t *testing.T) {
		// Its own sandbox: the bomb may take the daemon down with it.
		b, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, Limits: sandbox.Limits{Pids: 64}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), b.ID()) })
		cctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		done := make(chan struct{})
		go func() {
			b.Exec(cctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "b() { b | b & }; b"}})
			close(done)
		}()
		// While it rages, the host can still fork, and the sandbox holds
		// no more tasks than its limit.
		time.Sleep(time.Second)
		if err := exec.Command("true").Run(); err != nil {
			t.Fatalf("the host cannot fork during the bomb: %v", err)
		}
		if n := sandboxTasks(t, rt, b.ID()); n > 64 {
			t.Errorf("the sandbox holds %d tasks; its pids limit is 64", n)
		}
		<-done
		// Afterwards the sandbox either answers again or says it stopped
		// (the daemon shares the limit and may not get a thread, and it
		// may go down a moment after the bomb's exec returned); it never
		// hangs, and a stopped one resumes.
		resumed := false
		deadline := time.Now().Add(15 * time.Second)
		for {
			if info, err := b.Info(ctx); err != nil {
				t.Fatal(err)
			} else if info.State == sandbox.StateStopped && !resumed {
				t.Logf("the daemon did not survive the bomb; resuming")
				if _, err := rt.Resume(ctx, b.ID()); err != nil {
					t.Fatalf("resume after the bomb: %v", err)
				}
				resumed = true
			}
			var o strings.Builder
			_, err := b.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "pkill -9 -u user sh; echo alive"}, Stdout: &o, User: "root"})
			if err == nil && strings.Contains(o.String(), "alive") {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("the sandbox did not recover from the fork bomb: %v %q", err, o.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	})

	t.Run("memory bomb", func(t *testing.T) {
		st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", `x=$(head -c 1000000000 /dev/zero | tr '\000' a); echo survived`}})
		if err != nil {
			t.Fatal(err)
		}
		if !st.OOM {
			t.Errorf("exit status %+v, want OOM", st)
		}
		var o strings.Builder
		if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"alive"}, Stdout: &o}); err != nil || o.String() != "alive\n" {
			t.Errorf("after the OOM: %q %v", o.String(), err)
		}
	})

	t.Run("disk fill", func(t *testing.T) {
		var o strings.Builder
		st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "head -c 200000000 /dev/zero > big; echo rc=$?"}, Stdout: &o, Stderr: &o})
		if err != nil {
			t.Fatal(err)
		}
		if !strings.Contains(o.String(), "No space left on device") {
			t.Errorf("writing past the disk limit: %q (%+v), want ENOSPC", o.String(), st)
		}
		// The file API reports it as a limit.
		err = s.WriteFile(ctx, "more", strings.NewReader(strings.Repeat("x", 1<<20)), 0o644)
		if !errors.Is(err, sandbox.ErrLimit) {
			t.Errorf("WriteFile on a full disk: %v, want ErrLimit", err)
		}
		s.Remove(ctx, "big")
		if err := s.WriteFile(ctx, "small", strings.NewReader("ok"), 0o644); err != nil {
			t.Errorf("after freeing space: %v", err)
		}
	})
}

// sandboxTasks counts the tasks of a sandbox's commands: those in its
// cgroup, but for the daemon's where the commands have their own group.
func sandboxTasks(t *testing.T, rt *Runtime, id string) int {
	t.Helper()
	st, err := sbdir.Read(rt.dir(id))
	if err != nil {
		t.Fatal(err)
	}
	root, err := host.CgroupRoot(st)
	if err != nil {
		t.Skipf("no cgroups: %v", err)
	}
	g, err := root.Load(id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return 0 // the sandbox has stopped and its group is gone
	}
	if err != nil {
		t.Fatal(err)
	}
	defer g.Close()
	if w, err := g.LoadChild(host.WorkGroup, cgroup.Memory, cgroup.Pids); err == nil {
		g = w
	}
	stats, err := g.Stats()
	if err != nil {
		t.Fatal(err)
	}
	return stats.Pids
}
