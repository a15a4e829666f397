//go:build linux

package harden

import "golang.org/x/sys/unix"

// auditArch is the only ABI whose syscalls the filter lets through; 32-bit
// arm (compat) syscalls carry AUDIT_ARCH_ARM.
const auditArch = unix.AUDIT_ARCH_AARCH64

// archPrologue has nothing to add on arm64: its only other ABI has its
// own audit arch.
func archPrologue(deny unix.SockFilter) []unix.SockFilter { return nil }

// archRules: arm64 has no port I/O or uselib syscalls.
func archRules() []rule { return nil }
