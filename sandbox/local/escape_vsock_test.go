package local

import (
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// The test binary's "probe-vsock" role, run inside a sandbox: it tries to
// open an AF_VSOCK socket and prints "ok" or the errno's name. A role of
// its own (caught before TestMain) keeps escape_test.go's probe as it is.
func init() {
	if len(os.Args) < 2 || os.Args[1] != "probe-vsock" {
		return
	}
	for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET} {
		fd, err := unix.Socket(unix.AF_VSOCK, typ, 0)
		if err == nil {
			unix.Close(fd)
			fmt.Println("ok")
			continue
		}
		var errno syscall.Errno
		if errors.As(err, &errno) {
			fmt.Println(unix.ErrnoName(errno))
		} else {
			fmt.Println("error:", err)
		}
	}
	os.Exit(0)
}

// TestEscapeVsock: no one in a sandbox, root included, opens a vsock
// socket, which would reach the hypervisor and the host's other guests
// whatever the sandbox's network policy. The seccomp filter answers
// EPERM (as Docker's default profile does) whether or not the host
// kernel has vsock, where a kernel without it says EAFNOSUPPORT.
func TestEscapeVsock(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	err = s.WriteFile(ctx, ".vsock-probe", f, 0o755)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	if fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); err == nil {
		unix.Close(fd)
		t.Log("the host opens vsock sockets: without the filter, the sandbox could too")
	}
	for _, user := range []string{"", "root"} {
		var out strings.Builder
		st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "/workspace/.vsock-probe", Args: []string{"probe-vsock"}, User: user, Stdout: &out, Stderr: &out})
		if err != nil {
			t.Fatal(err)
		}
		got := strings.Fields(out.String())
		if st.Code != 0 || len(got) != 3 {
			t.Fatalf("user %q: probe printed %q (exit %+v)", user, out.String(), st)
		}
		for i, typ := range []string{"stream", "dgram", "seqpacket"} {
			if got[i] != "EPERM" {
				t.Errorf("user %q: socket(AF_VSOCK, %s): got %s, want EPERM", user, typ, got[i])
			}
		}
	}
}
