package local

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// The runtime re-executes the test binary for its hidden roles.
func TestMain(m *testing.M) {
	sandboxtest.Main(m, func(args []string) (bool, error) {
		switch args[0] {
		case "local-shim":
			return true, ShimMain(context.Background(), args[1:], os.Stderr)
		case "local-init":
			return true, InitMain(context.Background(), args[1:], os.Stderr)
		case "probe":
			probe(args[1:])
			return true, nil
		case "new-runtime":
			_, err := New(Config{Dir: args[1]})
			fmt.Println(err)
			return true, nil
		}
		return false, nil
	})
}

func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("the local runtime needs root (CI runs as root)")
	}
}

var (
	sharedOnce sync.Once
	shared     *Runtime
	sharedErr  error
)

// newRuntime returns one runtime shared by the tests (its sandboxes are
// independent), so the host template is prepared once.
func newRuntime(t testing.TB) *Runtime {
	t.Helper()
	needRoot(t)
	sharedOnce.Do(func() {
		exe, err := os.Executable()
		if err != nil {
			sharedErr = err
			return
		}
		dir, err := os.MkdirTemp("", "cl")
		if err != nil {
			sharedErr = err
			return
		}
		// The race detector sleeps a second at exit; the supervisor and
		// pid 1 are this binary, and they exit at every stop. The
		// runtime's warnings (why a restore failed, say: runsc's words
		// are kept from tenants, so only the log has them) go to the
		// test binary's stderr, which go test shows when a test fails.
		logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
		shared, sharedErr = New(Config{Dir: dir, Command: []string{exe}, Env: []string{"GORACE=atexit_sleep_ms=0"}, Logger: logger})
		// What a failed test left is deleted with the directory, so no
		// run leaves sandboxes, reserved disks or templates behind.
		sandboxtest.AtExit(func() {
			if shared != nil {
				shared.DrainPool(context.Background())
				if infos, err := shared.List(context.Background()); err == nil {
					for _, in := range infos {
						shared.Delete(context.Background(), in.ID)
					}
				}
			}
			os.RemoveAll(dir)
		})
	})
	if sharedErr != nil {
		t.Fatal(sharedErr)
	}
	return shared
}

func TestConformance(t *testing.T) {
	needRoot(t)
	sandboxtest.RunWithOptions(t, func(t *testing.T) sandbox.Runtime { return newRuntime(t) }, sandboxtest.Options{
		Listen: echoListen,
	})
}

// echoListen starts sandboxtest's echo server on port in s.
func echoListen(t *testing.T, s sandbox.Session, port int) func() {
	// The test binary is on the host's /usr? No: it lives in a
	// temp dir the sandbox cannot see; copy it into the workspace.
	exe, _ := os.Executable()
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.WriteFile(context.Background(), ".echo-server", f, 0o755); err != nil {
		t.Fatal(err)
	}
	ready := &firstWrite{ch: make(chan struct{})}
	p, err := s.Start(context.Background(), sandbox.ExecRequest{
		Cmd: "./.echo-server", Args: []string{"echo-server", strconv.Itoa(port)}, Stdout: ready,
	})
	if err != nil {
		t.Fatal(err)
	}
	select {
	case <-ready.ch:
	case <-time.After(10 * time.Second):
		t.Fatal("echo server did not start")
	}
	return func() {
		p.Signal(context.Background(), sandbox.SIGKILL)
		s.Remove(context.Background(), ".echo-server")
	}
}

type firstWrite struct {
	once sync.Once
	ch   chan struct{}
}

func (w *firstWrite) Write(p []byte) (int, error) {
	w.once.Do(func() { close(w.ch) })
	return len(p), nil
}

func run(t *testing.T, s sandbox.Session, script string) (string, sandbox.ExitStatus) {
	t.Helper()
	var out strings.Builder
	st, err := s.Exec(context.Background(), sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, Stdout: &out, Stderr: &out})
	if err != nil {
		t.Fatalf("exec %q: %v", script, err)
	}
	return out.String(), st
}

// TestIsolationBasics checks what a sandboxed command sees.
func TestIsolationBasics(t *testing.T) {
	rt := newRuntime(t)
	s, err := rt.Create(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	tests := []struct {
		name, script, want string
	}{
		{"cwd is the workspace", "pwd", "/workspace\n"},
		{"runs as the sandbox user", "id -u; id -g", "1000\n1000\n"},
		{"pid namespace: only the sandbox's processes", "tr '\\0' ' ' </proc/1/cmdline | grep -c local-init; test $(ls /proc | grep -c '^[0-9]') -lt 10 && echo few", "1\nfew\n"},
		{"alternatives work (awk)", "echo a b | awk '{print $2}'", "b\n"},
		{"host files outside the template are invisible", "test -e /root/.bash_history -o -e /work && echo visible || echo hidden", "hidden\n"},
		{"only loopback", "ls /sys/class/net 2>/dev/null || cat /proc/net/dev | tail -n +3 | cut -d: -f1 | tr -d ' '", "lo\n"},
		{"workspace writable", "echo hi > f && cat f", "hi\n"},
		{"/usr read-only", "touch /usr/x 2>/dev/null && echo wrote || echo refused", "refused\n"},
		{"hostname is the sandbox id", "cat /proc/sys/kernel/hostname", s.ID() + "\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, st := run(t, s, tt.script)
			if got != tt.want {
				t.Errorf("%s: got %q (exit %+v), want %q", tt.script, got, st, tt.want)
			}
		})
	}
}

// TestNotRoot: without root the runtime refuses at once with one error
// that says what is missing and what to do, and makes nothing.
func TestNotRoot(t *testing.T) {
	needRoot(t) // to become someone else
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir, err := os.MkdirTemp("", "cove-notroot") // t.TempDir's parent is private
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	bin := filepath.Join(dir, "local.test")
	data, err := os.ReadFile(exe)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state")
	cmd := exec.Command(bin, "new-runtime", state)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("running the runtime as nobody: %v\n%s", err, out)
	}
	for _, want := range []string{"needs root", "run cove as root", "rootless"} {
		if !strings.Contains(string(out), want) {
			t.Errorf("New as nobody said %q; want it to mention %q", out, want)
		}
	}
	if _, err := os.Stat(state); !os.IsNotExist(err) {
		t.Errorf("New as nobody made its state dir (%v)", err)
	}
}
