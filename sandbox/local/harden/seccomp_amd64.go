//go:build linux

package harden

import "golang.org/x/sys/unix"

// auditArch is the only ABI whose syscalls the filter lets through.
const auditArch = unix.AUDIT_ARCH_X86_64

// x32SyscallBit marks x32 syscalls, which share AUDIT_ARCH_X86_64 with
// the native ABI but not its numbers.
const x32SyscallBit = 0x40000000

// archPrologue refuses x32 syscalls (given the syscall number in the
// accumulator) with deny.
func archPrologue(deny unix.SockFilter) []unix.SockFilter {
	return []unix.SockFilter{
		jump(unix.BPF_JMP|unix.BPF_JGE|unix.BPF_K, x32SyscallBit, 0, 1),
		deny,
	}
}

// archRules are the x86-only calls: port I/O gives raw access to the
// machine's hardware, and uselib loads an a.out library, a path long
// unused and barely maintained.
func archRules() []rule {
	return []rule{
		{name: "iopl", nr: unix.SYS_IOPL, errno: unix.EPERM},
		{name: "ioperm", nr: unix.SYS_IOPERM, errno: unix.EPERM},
		{name: "uselib", nr: unix.SYS_USELIB, errno: unix.EPERM},
	}
}
