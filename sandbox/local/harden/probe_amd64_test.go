//go:build linux

package harden

import (
	"github.com/cove-sandbox/cove/sandbox/local/harden/internal/int80"
	"golang.org/x/sys/unix"
	"syscall"
)

func init() {
	// i386 getpid through int $0x80: the pid without the filter.
	probes["int80_getpid"] = func(string) string {
		r, ok := int80.Syscall(20, 0, 0, 0)
		if !ok {
			return "fault"
		}
		if r < 0 {
			return unix.ErrnoName(syscall.Errno(-r))
		}
		return "ok"
	}
	// x32 getpid: ENOSYS also on kernels built without x32, as here.
	probes["x32_getpid"] = func(string) string { return raw(x32SyscallBit | unix.SYS_GETPID) }
	// Port I/O at level 0, or switching ports off, needs no privilege:
	// only the filter refuses these.
	probes["iopl"] = func(string) string { return raw(unix.SYS_IOPL, 0) }
	probes["ioperm"] = func(string) string { return raw(unix.SYS_IOPERM, 0x80, 1, 0) }
}

// int80Refused is what int80_getpid gives under the filter: ENOSYS, or
// "fault" on a kernel where int $0x80 faults even unfiltered (it has no
// i386 entry to wall off), as the unfiltered test process finds here.
func int80Refused() string {
	if _, ok := int80.Syscall(20, 0, 0, 0); !ok {
		return "fault"
	}
	return "ENOSYS"
}
