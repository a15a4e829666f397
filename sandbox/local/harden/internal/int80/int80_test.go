//go:build linux && amd64

package int80

import (
	"os"
	"testing"
)

// TestGetpid checks the trampoline itself: without a filter, i386 getpid
// (20) returns this process's pid, or the kernel has no i386 entry.
func TestGetpid(t *testing.T) {
	got, ok := Syscall(20, 0, 0, 0)
	if !ok {
		t.Skip("int $0x80 faults on this kernel: it has no i386 entry")
	}
	if got == -38 {
		t.Skip("the kernel has no i386 emulation (int $0x80 gives ENOSYS)")
	}
	if want := int32(os.Getpid()); got != want {
		t.Fatalf("getpid through int $0x80 = %d, want %d", got, want)
	}
}
