package sandboxtest

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// SyncBuffer is a bytes.Buffer safe for a process's output goroutine (or
// a server's logger) and the test to use at once.
type SyncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *SyncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *SyncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func (b *SyncBuffer) Len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Len()
}

// Main is the TestMain of a package whose runtime re-executes the test
// binary for a sandbox's roles: role gets os.Args[1:] and says whether it
// was one of its roles (then the process exits with its error); the role
// "echo-server PORT" is the TCP echo server the conformance suite's
// Listen hook starts inside a sandbox, and the attack-* roles are the
// escape tests' (attack.go). Anything else runs the tests.
func Main(m *testing.M, role func(args []string) (handled bool, err error)) {
	if len(os.Args) > 2 && os.Args[1] == "echo-server" {
		EchoServer(os.Args[2])
		os.Exit(0)
	}
	if len(os.Args) > 1 {
		if handled, err := attackRole(os.Args[1], os.Args[2:]); handled {
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	if len(os.Args) > 1 && role != nil {
		if handled, err := role(os.Args[1:]); handled {
			if err != nil {
				fmt.Fprintln(os.Stderr, err)
				os.Exit(1)
			}
			os.Exit(0)
		}
	}
	code := m.Run()
	for i := len(atExit) - 1; i >= 0; i-- {
		atExit[i]()
	}
	os.Exit(code)
}

// atExit holds what AtExit registered.
var atExit []func()

// AtExit registers f to run once the package's tests have run, before
// Main exits (last registered, first run): for what tests share, such as
// a runtime's state directory, which no single test's Cleanup may remove.
// Call it from tests, not concurrently with Main's end.
func AtExit(f func()) { atExit = append(atExit, f) }

// EchoServer serves TCP echo on 127.0.0.1:port (the sandbox's own
// loopback), printing "listening" once it does.
func EchoServer(port string) {
	l, err := net.Listen("tcp", "127.0.0.1:"+port)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println("listening")
	for {
		c, err := l.Accept()
		if err != nil {
			return
		}
		go func() { io.Copy(c, c); c.Close() }()
	}
}

// SmallFS mounts a fresh ext4 filesystem of size bytes (on a loop
// device) in a temporary directory and returns its mount point: a small
// "host disk" a test can fill without touching the machine's. It is
// unmounted at the end of the test, after the test's later Cleanups (a
// runtime's deletes) ran, waiting while a daemon's socket still keeps it
// busy. It needs root and mkfs.ext4, and skips without them.
func SmallFS(t *testing.T, size int64) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("mounting a filesystem needs root (CI runs as root)")
	}
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 is missing (e2fsprogs)")
	}
	tmp := t.TempDir()
	img, mnt := filepath.Join(tmp, "host.img"), filepath.Join(tmp, "host")
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(img, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(img, size); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("mounting a loop filesystem: %v %s", err, out)
	}
	t.Cleanup(func() {
		// A connection a runtime's client still has open to a deleted
		// sandbox's daemon keeps the socket's path, and so this
		// filesystem, busy until the client sees the daemon gone.
		deadline := time.Now().Add(30 * time.Second)
		for {
			err := unix.Unmount(mnt, 0)
			if err == nil {
				return
			}
			if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
				t.Errorf("unmounting the test's small filesystem: %v", err)
				unix.Unmount(mnt, unix.MNT_DETACH)
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	})
	return mnt
}
