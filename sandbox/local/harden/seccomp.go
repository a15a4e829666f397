//go:build linux && (amd64 || arm64)

package harden

import (
	"errors"
	"fmt"
	"runtime"
	"syscall"
	"unsafe"

	"golang.org/x/sys/unix"
)

// A rule denies one native syscall with errno. With mask set, it denies
// only calls whose first argument has one of mask's bits set (and is not
// except, when hasExcept). With hasEqual, it denies only calls whose
// first argument is equal.
type rule struct {
	name  string
	nr    uint32
	errno syscall.Errno

	mask      uint32
	except    uint32
	hasExcept bool

	equal    uint32
	hasEqual bool
}

// Namespace flags. CLONE_NEWTIME (0x80) is in unshare's mask only: in
// clone's first argument the low byte is the exit signal.
const (
	cloneNewNamespaces   = unix.CLONE_NEWNS | unix.CLONE_NEWCGROUP | unix.CLONE_NEWUTS | unix.CLONE_NEWIPC | unix.CLONE_NEWUSER | unix.CLONE_NEWPID | unix.CLONE_NEWNET
	unshareNewNamespaces = cloneNewNamespaces | unix.CLONE_NEWTIME

	// personality flags that make the heap executable or map page zero.
	unsafePersonality = 0x0400000 | 0x0100000 // READ_IMPLIES_EXEC | MMAP_PAGE_ZERO
	// personality(0xffffffff) only reads the current persona.
	personalityQuery = 0xffffffff
)

// rules is the deny-list; the package documentation gives the reasons.
// archRules adds what exists on one architecture only.
func rules() []rule {
	deny := func(errno syscall.Errno, nr uintptr, name string) rule {
		return rule{name: name, nr: uint32(nr), errno: errno}
	}
	eperm := func(nr uintptr, name string) rule { return deny(unix.EPERM, nr, name) }
	enosys := func(nr uintptr, name string) rule { return deny(unix.ENOSYS, nr, name) }
	rs := []rule{
		// Mounts: the sandbox's view of the filesystem is fixed.
		eperm(unix.SYS_MOUNT, "mount"),
		eperm(unix.SYS_UMOUNT2, "umount2"),
		eperm(unix.SYS_PIVOT_ROOT, "pivot_root"),
		eperm(unix.SYS_CHROOT, "chroot"),
		eperm(unix.SYS_FSOPEN, "fsopen"),
		eperm(unix.SYS_FSCONFIG, "fsconfig"),
		eperm(unix.SYS_FSMOUNT, "fsmount"),
		eperm(unix.SYS_FSPICK, "fspick"),
		eperm(unix.SYS_MOVE_MOUNT, "move_mount"),
		eperm(unix.SYS_OPEN_TREE, "open_tree"),
		eperm(unix.SYS_OPEN_TREE_ATTR, "open_tree_attr"),
		eperm(unix.SYS_MOUNT_SETATTR, "mount_setattr"),
		// The machine, not the sandbox.
		eperm(unix.SYS_SWAPON, "swapon"),
		eperm(unix.SYS_SWAPOFF, "swapoff"),
		eperm(unix.SYS_REBOOT, "reboot"),
		eperm(unix.SYS_KEXEC_LOAD, "kexec_load"),
		eperm(unix.SYS_KEXEC_FILE_LOAD, "kexec_file_load"),
		eperm(unix.SYS_INIT_MODULE, "init_module"),
		eperm(unix.SYS_FINIT_MODULE, "finit_module"),
		eperm(unix.SYS_DELETE_MODULE, "delete_module"),
		eperm(unix.SYS_ACCT, "acct"),
		eperm(unix.SYS_SETTIMEOFDAY, "settimeofday"),
		eperm(unix.SYS_CLOCK_SETTIME, "clock_settime"),
		eperm(unix.SYS_ADJTIMEX, "adjtimex"),
		eperm(unix.SYS_CLOCK_ADJTIME, "clock_adjtime"),
		eperm(unix.SYS_SYSLOG, "syslog"),
		eperm(unix.SYS_QUOTACTL, "quotactl"),
		eperm(unix.SYS_QUOTACTL_FD, "quotactl_fd"),
		eperm(unix.SYS_LOOKUP_DCOOKIE, "lookup_dcookie"),
		eperm(unix.SYS_VHANGUP, "vhangup"),
		// Kernel interfaces with a long record of exploits.
		eperm(unix.SYS_BPF, "bpf"),
		eperm(unix.SYS_PERF_EVENT_OPEN, "perf_event_open"),
		eperm(unix.SYS_KEYCTL, "keyctl"),
		eperm(unix.SYS_ADD_KEY, "add_key"),
		eperm(unix.SYS_REQUEST_KEY, "request_key"),
		eperm(unix.SYS_USERFAULTFD, "userfaultfd"),
		enosys(unix.SYS_IO_URING_SETUP, "io_uring_setup"),
		enosys(unix.SYS_IO_URING_ENTER, "io_uring_enter"),
		enosys(unix.SYS_IO_URING_REGISTER, "io_uring_register"),
		// Namespaces: none may be made or entered.
		eperm(unix.SYS_SETNS, "setns"),
		{name: "unshare", nr: unix.SYS_UNSHARE, errno: unix.EPERM, mask: unshareNewNamespaces},
		{name: "clone", nr: unix.SYS_CLONE, errno: unix.EPERM, mask: cloneNewNamespaces},
		enosys(unix.SYS_CLONE3, "clone3"),
		// File handles open any inode of a mount, outside the sandbox's
		// root too (the "shocker" escape).
		eperm(unix.SYS_OPEN_BY_HANDLE_AT, "open_by_handle_at"),
		enosys(unix.SYS_NAME_TO_HANDLE_AT, "name_to_handle_at"),
		{name: "personality", nr: unix.SYS_PERSONALITY, errno: unix.EPERM, mask: unsafePersonality, except: personalityQuery, hasExcept: true},
		// vsock talks to the hypervisor and the host's other guests, past
		// the sandbox's network policy. EPERM, as Docker's default
		// profile: a kernel without vsock would say EAFNOSUPPORT, but an
		// errno of its own shows the filter at work.
		{name: "socket", nr: unix.SYS_SOCKET, errno: unix.EPERM, equal: unix.AF_VSOCK, hasEqual: true},
	}
	return append(rs, archRules()...)
}

// Offsets into struct seccomp_data: nr, arch, instruction_pointer, args[6].
// An argument's low 32 bits come first on the little-endian machines
// this package builds for.
const (
	offNr   = 0
	offArch = 4
	offArg0 = 16
)

const (
	retAllow = unix.SECCOMP_RET_ALLOW
	retErrno = unix.SECCOMP_RET_ERRNO
)

func stmt(code uint16, k uint32) unix.SockFilter {
	return unix.SockFilter{Code: code, K: k}
}

func jump(code uint16, k uint32, jt, jf uint8) unix.SockFilter {
	return unix.SockFilter{Code: code, Jt: jt, Jf: jf, K: k}
}

// buildFilter assembles the classic BPF program. Each rule is a block
// that jumps only within itself, so no offset exceeds a few instructions
// however long the list grows:
//
//	ld arch; jeq native ? skip : ret ENOSYS
//	ld nr; [arch prologue, e.g. x32 -> ENOSYS]
//	jeq nr ? next : skip 1; ret errno              (plain rule)
//	jeq nr ? next : skip body; ld arg0; ...; ld nr  (rule with a mask)
//	ret allow
func buildFilter(rs []rule) []unix.SockFilter {
	ret := func(e syscall.Errno) unix.SockFilter {
		return stmt(unix.BPF_RET|unix.BPF_K, retErrno|uint32(e)&unix.SECCOMP_RET_DATA)
	}
	f := []unix.SockFilter{
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArch),
		jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, auditArch, 1, 0),
		ret(unix.ENOSYS),
		stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr),
	}
	f = append(f, archPrologue(ret(unix.ENOSYS))...)
	for _, r := range rs {
		if r.mask == 0 && !r.hasEqual {
			f = append(f,
				jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, r.nr, 0, 1),
				ret(r.errno))
			continue
		}
		var body []unix.SockFilter
		body = append(body, stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offArg0))
		if r.hasExcept {
			// Equal to except: skip the test and the ret, to "ld nr".
			body = append(body, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, r.except, 2, 0))
		}
		if r.hasEqual {
			body = append(body, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, r.equal, 0, 1))
		} else {
			body = append(body, jump(unix.BPF_JMP|unix.BPF_JSET|unix.BPF_K, r.mask, 0, 1))
		}
		body = append(body,
			ret(r.errno),
			// Not denied: the next rules compare the syscall number again.
			stmt(unix.BPF_LD|unix.BPF_W|unix.BPF_ABS, offNr))
		f = append(f, jump(unix.BPF_JMP|unix.BPF_JEQ|unix.BPF_K, r.nr, 0, uint8(len(body))))
		f = append(f, body...)
	}
	return append(f, stmt(unix.BPF_RET|unix.BPF_K, retAllow))
}

// seccompMissing says why the kernel cannot take the filter, or "" when it
// can.
func seccompMissing() string {
	if _, err := unix.PrctlRetInt(unix.PR_GET_SECCOMP, 0, 0, 0, 0); errors.Is(err, unix.EINVAL) {
		return "seccomp: the kernel is built without seccomp"
	}
	action := uint32(retErrno)
	_, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_GET_ACTION_AVAIL, 0, uintptr(unsafe.Pointer(&action)))
	switch e {
	case 0:
		return ""
	case unix.ENOSYS:
		return "seccomp: the kernel has no seccomp syscall (older than 3.17)"
	case unix.EINVAL, unix.EOPNOTSUPP:
		return "seccomp: the kernel cannot filter with an errno action (older than 4.14, or built without seccomp filters)"
	}
	return "" // let the install say what is wrong
}

// installFilter puts the filter on every thread of the process. The
// caller has set no_new_privs, which the kernel requires of a caller
// without CAP_SYS_ADMIN.
func installFilter(f []unix.SockFilter) error {
	prog := &unix.SockFprog{Len: uint16(len(f)), Filter: &f[0]}
	r, _, e := unix.Syscall(unix.SYS_SECCOMP, unix.SECCOMP_SET_MODE_FILTER, unix.SECCOMP_FILTER_FLAG_TSYNC, uintptr(unsafe.Pointer(prog)))
	runtime.KeepAlive(f)
	if e != 0 {
		return fmt.Errorf("installing the seccomp filter: %w", e)
	}
	if r != 0 {
		// With TSYNC, a positive result is a thread that could not take
		// the filter; then no thread has it.
		return fmt.Errorf("installing the seccomp filter: thread %d could not be synchronised", r)
	}
	return nil
}
