package local

import (
	"context"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// TestEscapeVsock: no one in a sandbox, root included, opens a vsock
// socket, which would reach the hypervisor and the host's other guests
// whatever the sandbox's network policy. The seccomp filter answers
// EPERM (as Docker's default profile does) whether or not the host
// kernel has vsock, where a kernel without it says EAFNOSUPPORT.
func TestEscapeVsock(t *testing.T) { onTiers(t, testEscapeVsock) }

func testEscapeVsock(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	a := sandboxtest.NewAttacker(t, s)
	if fd, err := unix.Socket(unix.AF_VSOCK, unix.SOCK_STREAM, 0); err == nil {
		unix.Close(fd)
		t.Log("the host opens vsock sockets: without the filter, the sandbox could too")
	}
	for _, user := range []string{"", "root"} {
		out := a.Run(t, user, "attack-vsock")
		got := strings.Fields(out)
		if len(got) != 3 {
			t.Fatalf("user %q: probe printed %q", user, out)
		}
		for i, typ := range []string{"stream", "dgram", "seqpacket"} {
			// gVisor's kernel has no vsock; the filter answers first.
			if got[i] != "EPERM" {
				t.Errorf("user %q: socket(AF_VSOCK, %s): got %s, want EPERM", user, typ, got[i])
			}
		}
	}
}
