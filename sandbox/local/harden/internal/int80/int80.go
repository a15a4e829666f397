//go:build linux && amd64

// Package int80 makes i386 syscalls from 64-bit code with int $0x80, so
// harden's tests can check that the seccomp filter refuses the non-native
// ABI. Nothing else should use it.
package int80

import "runtime/debug"

// Syscall makes i386 syscall nr with up to three arguments and returns
// what the kernel left in eax: a result, or minus an errno. ok is false
// when int $0x80 itself faults: some kernels have no i386 entry at all
// (a PVM guest's, for one, where it raises a general protection fault),
// and there the non-native ABI cannot be reached, filter or not.
func Syscall(nr, a1, a2, a3 uint32) (r int32, ok bool) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if recover() != nil {
			r, ok = 0, false
		}
	}()
	return int32(syscall4(uintptr(nr), uintptr(a1), uintptr(a2), uintptr(a3))), true
}

func syscall4(nr, a1, a2, a3 uintptr) uintptr
