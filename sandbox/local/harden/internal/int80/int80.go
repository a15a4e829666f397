//go:build linux && amd64

// Package int80 makes i386 syscalls from 64-bit code with int $0x80, so
// harden's tests can check that the seccomp filter refuses the non-native
// ABI. Nothing else should use it.
package int80

// Syscall makes i386 syscall nr with up to three arguments and returns
// what the kernel left in eax: a result, or minus an errno.
func Syscall(nr, a1, a2, a3 uint32) int32 {
	return int32(syscall4(uintptr(nr), uintptr(a1), uintptr(a2), uintptr(a3)))
}

func syscall4(nr, a1, a2, a3 uintptr) uintptr
