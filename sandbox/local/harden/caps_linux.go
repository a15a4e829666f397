package harden

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"unsafe"

	"golang.org/x/sys/unix"
	"kernel.org/pub/linux/libs/security/libcap/psx"
)

// capNames are the kernel's capability names by number (linux/capability.h).
// A capability the running kernel knows beyond these is dropped all the
// same and reported as CAP_<number>.
var capNames = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_DAC_READ_SEARCH", "CAP_FOWNER",
	"CAP_FSETID", "CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_SETPCAP",
	"CAP_LINUX_IMMUTABLE", "CAP_NET_BIND_SERVICE", "CAP_NET_BROADCAST",
	"CAP_NET_ADMIN", "CAP_NET_RAW", "CAP_IPC_LOCK", "CAP_IPC_OWNER",
	"CAP_SYS_MODULE", "CAP_SYS_RAWIO", "CAP_SYS_CHROOT", "CAP_SYS_PTRACE",
	"CAP_SYS_PACCT", "CAP_SYS_ADMIN", "CAP_SYS_BOOT", "CAP_SYS_NICE",
	"CAP_SYS_RESOURCE", "CAP_SYS_TIME", "CAP_SYS_TTY_CONFIG", "CAP_MKNOD",
	"CAP_LEASE", "CAP_AUDIT_WRITE", "CAP_AUDIT_CONTROL", "CAP_SETFCAP",
	"CAP_MAC_OVERRIDE", "CAP_MAC_ADMIN", "CAP_SYSLOG", "CAP_WAKE_ALARM",
	"CAP_BLOCK_SUSPEND", "CAP_AUDIT_READ", "CAP_PERFMON", "CAP_BPF",
	"CAP_CHECKPOINT_RESTORE",
}

// capName returns the name of capability c.
func capName(c int) string {
	if c >= 0 && c < len(capNames) {
		return capNames[c]
	}
	return "CAP_" + strconv.Itoa(c)
}

// capMask turns capability names ("CAP_CHOWN", "chown", any case) into a
// bit mask.
func capMask(names []string) (uint64, error) {
	var mask uint64
	for _, n := range names {
		u := strings.ToUpper(n)
		if !strings.HasPrefix(u, "CAP_") {
			u = "CAP_" + u
		}
		found := false
		for c, name := range capNames {
			if name == u {
				mask |= 1 << c
				found = true
				break
			}
		}
		if !found {
			return 0, fmt.Errorf("unknown capability %q", n)
		}
	}
	return mask, nil
}

// maskNames lists the names of the capabilities in mask, lowest first.
func maskNames(mask uint64) []string {
	out := []string{}
	for c := 0; c < 64; c++ {
		if mask&(1<<c) != 0 {
			out = append(out, capName(c))
		}
	}
	return out
}

// allThreadsPrctl runs prctl on every thread. It always passes all five
// arguments: several prctl options fail with EINVAL unless the unused ones
// are zero.
func allThreadsPrctl(option, arg2 uintptr) error {
	if _, _, e := psx.Syscall6(unix.SYS_PRCTL, option, arg2, 0, 0, 0, 0); e != 0 {
		return e
	}
	return nil
}

// dropCaps leaves only the capabilities in keep (and in the current
// permitted set) on every thread: it shrinks the bounding set, clears the
// ambient set and sets permitted = effective = kept, inheritable = none.
// The bounding set goes first because dropping from it needs
// CAP_SETPCAP, which the capset that follows may remove. It returns the
// capabilities kept.
func dropCaps(keep uint64) (uint64, error) {
	for c := 0; ; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			break // past the kernel's last capability
		}
		if err != nil {
			return 0, fmt.Errorf("reading the bounding set: %w", err)
		}
		if in == 0 || keep&(1<<c) != 0 {
			continue
		}
		if err := allThreadsPrctl(unix.PR_CAPBSET_DROP, uintptr(c)); err != nil {
			return 0, fmt.Errorf("dropping %s from the bounding set: %w", capName(c), err)
		}
	}
	// EINVAL means a kernel before 4.3, which has no ambient set to clear.
	if _, _, e := psx.Syscall6(unix.SYS_PRCTL, unix.PR_CAP_AMBIENT, unix.PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0, 0); e != 0 && e != unix.EINVAL {
		return 0, fmt.Errorf("clearing the ambient capabilities: %w", e)
	}

	hdr := &unix.CapUserHeader{Version: unix.LINUX_CAPABILITY_VERSION_3}
	data := &[2]unix.CapUserData{}
	if err := unix.Capget(hdr, &data[0]); err != nil {
		return 0, fmt.Errorf("reading the capabilities: %w", err)
	}
	permitted := uint64(data[0].Permitted) | uint64(data[1].Permitted)<<32
	kept := keep & permitted
	for i := range data {
		v := uint32(kept >> (32 * i))
		data[i] = unix.CapUserData{Effective: v, Permitted: v, Inheritable: 0}
	}
	hdr.Pid = 0 // each thread sets its own
	if _, _, e := psx.Syscall3(unix.SYS_CAPSET, uintptr(unsafe.Pointer(hdr)), uintptr(unsafe.Pointer(&data[0])), 0); e != 0 {
		return 0, fmt.Errorf("setting the capabilities: %w", e)
	}
	return kept, nil
}

// ShrinkBoundingSet drops from the calling thread's capability bounding
// set every capability but DefaultKeepCaps and extra. A supervisor calls
// it on the (locked) thread that then starts the sandbox's first process:
// the child inherits the smaller set, keeping only what it needs to set
// the sandbox up (extra) and to serve, so its Apply has a few drops to
// make on every thread instead of dozens, each a stop-the-world. The
// caller keeps its own permitted and effective capabilities.
func ShrinkBoundingSet(extra []string) error {
	keep, err := capMask(append(DefaultKeepCaps(), extra...))
	if err != nil {
		return err
	}
	for c := 0; ; c++ {
		in, err := unix.PrctlRetInt(unix.PR_CAPBSET_READ, uintptr(c), 0, 0, 0)
		if errors.Is(err, unix.EINVAL) {
			return nil // past the kernel's last capability
		}
		if err != nil {
			return fmt.Errorf("reading the bounding set: %w", err)
		}
		if in == 0 || keep&(1<<c) != 0 {
			continue
		}
		if err := unix.Prctl(unix.PR_CAPBSET_DROP, uintptr(c), 0, 0, 0); err != nil {
			return fmt.Errorf("dropping %s from the bounding set: %w", capName(c), err)
		}
	}
}
