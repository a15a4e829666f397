package guest

import (
	"context"
	"errors"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"connectrpc.com/connect"

	"github.com/cove-sandbox/cove/sandbox"
)

// nonRootEnv carries the root and socket of the daemon
// TestNonRootDaemonHelper serves, in the process
// TestNonRootRefusesOtherUser starts as uid 1000.
const nonRootEnv = "COVE_TEST_NONROOT_DAEMON"

// nonRootUID is the uid the daemon runs as (a pod's runAsUser).
const nonRootUID = 1000

// TestNonRootDaemonHelper is the daemon of TestNonRootRefusesOtherUser,
// run by it as uid 1000; on its own it skips.
func TestNonRootDaemonHelper(t *testing.T) {
	root, sock, ok := strings.Cut(os.Getenv(nonRootEnv), "|")
	if !ok {
		t.Skip("the daemon of TestNonRootRefusesOtherUser")
	}
	srv, err := NewServer(Config{Root: root, Workdir: "/workspace", User: "root"})
	if err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	go func() { io.Copy(io.Discard, os.Stdin); cancel() }() // the test's end closes stdin
	srv.Serve(ctx, l)
}

// TestNonRootRefusesOtherUser: a daemon running as uid 1000 (a pod with
// runAsNonRoot) refuses a process as root, or as any user it is not,
// with ErrInvalid saying why, instead of running it as itself; a
// process as its own user, or naming none, runs as uid 1000 (a default
// user of root it cannot be does not stop it).
func TestNonRootRefusesOtherUser(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("starting the daemon as uid 1000 needs root (CI runs as root)")
	}
	// Open to uid 1000: the test binary's copy, the sandbox's root and
	// the socket's directory (t.TempDir's parents are root's only).
	dir, err := os.MkdirTemp("", "gnr")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	root := filepath.Join(dir, "root")
	for _, d := range []string{"etc", "workspace", "home/user"} {
		os.MkdirAll(filepath.Join(root, d), 0o755)
	}
	os.Chown(filepath.Join(root, "workspace"), nonRootUID, nonRootUID)
	os.Chown(filepath.Join(root, "home/user"), nonRootUID, nonRootUID)
	passwd := "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:user:/home/user:/bin/sh\nother:x:1001:1001::/home/other:/bin/sh\n"
	if err := os.WriteFile(filepath.Join(root, "etc/passwd"), []byte(passwd), 0o644); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(root, "etc/group"), []byte("root:x:0:\nuser:x:1000:\nother:x:1001:\n"), 0o644)
	sockDir := filepath.Join(dir, "s")
	os.Mkdir(sockDir, 0o755)
	os.Chown(sockDir, nonRootUID, nonRootUID)
	sock := filepath.Join(sockDir, "s")
	exe := filepath.Join(dir, "guest.test")
	if err := copyExecutable(exe); err != nil {
		t.Fatal(err)
	}

	cmd := exec.Command(exe, "-test.run=^TestNonRootDaemonHelper$", "-test.v")
	cmd.Env = append(os.Environ(), nonRootEnv+"="+root+"|"+sock)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: nonRootUID, Gid: nonRootUID}, Pdeathsig: syscall.SIGKILL}
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})

	client := func(user string) *Client {
		c, err := NewClient("unix://"+sock, ClientOptions{User: user, DialRetry: 60 * time.Second})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		return c
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	for deadline := time.Now().Add(60 * time.Second); client("").Health(ctx) != nil; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("the daemon as uid %d did not start:\n%s", nonRootUID, out.String())
		}
	}

	for _, user := range []string{"", "user"} {
		got := runToEnd(t, client(user), startReq("/bin/sh", "-c", "id -u; echo $USER"))
		if want := "1000\nuser\n"; got.stdout.String() != want {
			t.Errorf("a process as %q: got %q (stderr %q), want %q", user, got.stdout.String(), got.stderr.String(), want)
		}
	}
	for _, user := range []string{"root", "other"} {
		stream, err := client(user).Process.Start(ctx, startReq("/bin/sh", "-c", "id -u"))
		var started bool
		if err == nil {
			for stream.Receive() {
				started = started || stream.Msg().Event.GetStart() != nil
			}
			err = stream.Err()
		}
		if started || connect.CodeOf(err) != connect.CodeInvalidArgument || !errors.Is(wireError(err), sandbox.ErrInvalid) {
			t.Errorf("a process as %q on a daemon of uid %d: started %v, err %v; want it refused as invalid", user, nonRootUID, started, err)
			continue
		}
		if msg := err.Error(); !strings.Contains(msg, "not root") || !strings.Contains(msg, `"`+user+`"`) {
			t.Errorf("the refusal does not say why: %s", msg)
		}
	}
}

// copyExecutable copies the test binary to dst, executable by anyone.
func copyExecutable(dst string) error {
	src, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
