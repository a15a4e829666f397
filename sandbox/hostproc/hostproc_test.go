package hostproc_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/hostproc"
	"github.com/cove-sandbox/cove/sandbox/hostproc/hostproctest"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// The test binary doubles as the daemon (hostproctest), and as an echo
// server for the conformance tests' Listen.
func TestMain(m *testing.M) {
	hostproctest.RunGuest()
	if port := os.Getenv("COVE_TEST_ECHO_PORT"); port != "" {
		sandboxtest.EchoServer(port)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

func TestConformance(t *testing.T) {
	sandboxtest.RunWithOptions(t, func(t *testing.T) sandbox.Runtime { return newRuntime(t) }, sandboxtest.Options{
		// No mount namespace here: processes see the sandbox root at its
		// host path.
		HostPaths: true,
		Listen: func(t *testing.T, s sandbox.Session, port int) func() {
			exe, _ := os.Executable()
			out := &lineWaiter{ch: make(chan struct{})}
			p, err := s.Start(context.Background(), sandbox.ExecRequest{
				Cmd: exe, Env: map[string]string{"COVE_TEST_ECHO_PORT": strconv.Itoa(port)}, Stdout: out,
			})
			if err != nil {
				t.Fatal(err)
			}
			select {
			case <-out.ch:
			case <-time.After(10 * time.Second):
				t.Fatal("echo server did not start")
			}
			return func() { p.Signal(context.Background(), sandbox.SIGKILL) }
		},
	})
}

// lineWaiter closes ch at the first write.
type lineWaiter struct {
	once sync.Once
	ch   chan struct{}
}

func (w *lineWaiter) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

func newRuntime(t *testing.T) *hostproc.Runtime { return hostproctest.New(t) }

// TestZombiesReaped: an orphaned grandchild is adopted and reaped by the
// daemon (a child subreaper here, pid 1 in a sandbox), not left a zombie.
func TestZombiesReaped(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	daemon := rt.DaemonPID(s.ID())
	// The shell exits at once; its backgrounded children become orphans
	// and exit shortly after.
	res, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "for i in 1 2 3 4 5; do (sleep 0.2 &) ; done; exit 0"}})
	if err != nil || res.Code != 0 {
		t.Fatalf("exec: %v %v", res, err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for {
		zombies, adopted := childrenOf(daemon)
		if zombies == 0 && adopted == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("daemon %d still has %d zombie and %d live adopted children after 10s", daemon, zombies, adopted)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// childrenOf counts the zombie and live "sleep" children of pid.
func childrenOf(pid int) (zombies, sleeping int) {
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		if _, err := strconv.Atoi(e.Name()); err != nil {
			continue
		}
		data, err := os.ReadFile(filepath.Join("/proc", e.Name(), "stat"))
		if err != nil {
			continue
		}
		s := string(data)
		i := strings.LastIndexByte(s, ')')
		if i < 0 {
			continue
		}
		f := strings.Fields(s[i+2:])
		if len(f) < 2 || f[1] != strconv.Itoa(pid) {
			continue
		}
		if f[0] == "Z" {
			zombies++
		} else if strings.Contains(s[:i], "(sleep") {
			sleeping++
		}
	}
	return
}

// TestDaemonKilled: a killed daemon leaves the sandbox stopped with its
// files; resuming brings it back, and calls in between get ErrState.
func TestDaemonKilled(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.WriteFile(ctx, "keep.txt", strings.NewReader("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	daemon := rt.DaemonPID(s.ID())
	syscall.Kill(daemon, syscall.SIGKILL)
	for i := 0; i < 200 && sbutil.Alive(daemon); i++ {
		time.Sleep(10 * time.Millisecond)
	}
	info, err := s.Info(ctx)
	if err != nil || info.State != sandbox.StateStopped {
		t.Fatalf("after the daemon died: state %q (%v), want stopped", info.State, err)
	}
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); !errors.Is(err, sandbox.ErrState) {
		t.Errorf("exec in a dead sandbox: %v, want ErrState", err)
	}
	s2, err := rt.Resume(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	rc, err := s2.ReadFile(ctx, "keep.txt")
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	buf := make([]byte, 16)
	n, _ := rc.Read(buf)
	if string(buf[:n]) != "kept" {
		t.Errorf("after resume read %q, want %q", buf[:n], "kept")
	}
}

// TestSecretsStayOut: the caller's environment does not reach sandbox
// processes.
func TestSecretsStayOut(t *testing.T) {
	t.Setenv("OPENAI_API_KEY", "sk-must-not-leak")
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Env: map[string]string{"VISIBLE": "yes"}})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "env", Stdout: &out}); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(out.String(), "sk-must-not-leak") || strings.Contains(out.String(), guest.TokenEnv) {
		t.Errorf("sandbox environment leaks the host's: %s", out.String())
	}
	if !strings.Contains(out.String(), "VISIBLE=yes") {
		t.Errorf("spec env missing from %s", out.String())
	}
}

// TestManifestApply materializes a manifest in a real sandbox through its
// daemon and checks the workspace from inside with commands.
func TestManifestApply(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	host := t.TempDir()
	os.MkdirAll(filepath.Join(host, "src/pkg"), 0o755)
	os.WriteFile(filepath.Join(host, "src/pkg/main.py"), []byte("print('hi')\n"), 0o644)
	m, err := manifest.Parse([]byte(`{
		"root": "/workspace",
		"entries": {
			"README.md": {"type": "file", "content": "# project\n"},
			"bin/blob": {"type": "file", "content": "AAEC/w==", "encoding": "base64"},
			"docs": {"type": "dir", "children": {"a.txt": {"type": "file", "content": "a"}}},
			"code": {"type": "local_dir", "src": "src"}
		},
		"environment": {"value": {"MODE": "test"}}
	}`))
	if err != nil {
		t.Fatal(err)
	}
	s, err := rt.Create(ctx, sandbox.Spec{Root: m.RootDir(), Env: m.Env()})
	if err != nil {
		t.Fatal(err)
	}
	if err := manifest.Apply(ctx, m, s, manifest.ApplyOptions{BaseDir: host}); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "cat README.md docs/a.txt code/pkg/main.py; od -An -tx1 bin/blob; echo $MODE"}, Stdout: &out, Stderr: &out})
	if err != nil || st.Code != 0 {
		t.Fatalf("exec: %v %v: %s", st, err, out.String())
	}
	want := "# project\na" + "print('hi')\n" + " 00 01 02 ff\n" + "test\n"
	if out.String() != want {
		t.Errorf("workspace as seen inside:\n%q\nwant\n%q", out.String(), want)
	}
}

// TestClientReconnects: a session made before its daemon restarted keeps
// working afterwards (the client redials).
func TestClientReconnects(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Resume(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"again"}, Stdout: &out}); err != nil {
		t.Fatalf("exec through the old session after a daemon restart: %v", err)
	}
	if out.String() != "again\n" {
		t.Errorf("got %q", out.String())
	}
}

// TestOOMReported puts a sandbox's daemon in a memory cgroup with a small
// limit and runs a process that needs more: it is killed inside the
// sandbox only, and the caller is told it was the OOM killer.
func TestOOMReported(t *testing.T) {
	cg, err := memoryCgroup(t, 64<<20)
	if err != nil {
		t.Skipf("cannot make a memory cgroup here (needs root and a memory controller): %v", err)
	}
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	daemon := rt.DaemonPID(s.ID())
	if err := os.WriteFile(filepath.Join(cg, "cgroup.procs"), []byte(strconv.Itoa(daemon)), 0o644); err != nil {
		t.Skipf("cannot move the daemon into the cgroup: %v", err)
	}
	// The shell holds 200 MB of command output in a variable.
	res, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", `x=$(head -c 200000000 /dev/zero | tr '\000' a); echo survived`}})
	if err != nil {
		t.Fatal(err)
	}
	if !res.OOM || res.Signal != "killed" || res.Success() {
		t.Errorf("exit status %+v, want OOM killed", res)
	}
	// The daemon survived and still works.
	var out strings.Builder
	if _, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "echo", Args: []string{"alive"}, Stdout: &out}); err != nil || out.String() != "alive\n" {
		t.Errorf("after the OOM kill: %q, %v", out.String(), err)
	}
	// A plain SIGKILL is not reported as OOM.
	res, err = s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "kill -9 $$"}})
	if err != nil || res.OOM || res.Signal != "killed" {
		t.Errorf("plain SIGKILL: %+v %v, want killed and not OOM", res, err)
	}
}

// memoryCgroup makes a child of this process's memory cgroup (v1 or v2)
// with a limit, removed at the end of the test.
func memoryCgroup(t *testing.T, limit int64) (string, error) {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return "", err
	}
	name := fmt.Sprintf("cove-oom-test-%d", os.Getpid())
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var dir, limitFile string
		switch {
		case strings.Contains(","+parts[1]+",", ",memory,"):
			dir, limitFile = filepath.Join("/sys/fs/cgroup/memory", parts[2], name), "memory.limit_in_bytes"
		case parts[0] == "0" && parts[1] == "":
			dir, limitFile = filepath.Join("/sys/fs/cgroup", parts[2], name), "memory.max"
		default:
			continue
		}
		if err := os.Mkdir(dir, 0o755); err != nil {
			continue
		}
		t.Cleanup(func() {
			// Processes must leave before the cgroup can go.
			for i := 0; i < 100 && syscall.Rmdir(dir) == syscall.EBUSY; i++ {
				time.Sleep(50 * time.Millisecond)
			}
		})
		if err := os.WriteFile(filepath.Join(dir, limitFile), []byte(strconv.FormatInt(limit, 10)), 0o644); err != nil {
			return "", err
		}
		return dir, nil
	}
	return "", errors.New("no writable memory cgroup")
}
