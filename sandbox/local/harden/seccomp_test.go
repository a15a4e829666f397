//go:build linux && (amd64 || arm64)

package harden

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"syscall"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

// runFilter interprets the filter the way the kernel does for one call,
// so every decision can be checked without installing anything. It knows
// only the instructions buildFilter emits, and fails on any other.
func runFilter(t *testing.T, f []unix.SockFilter, arch, nr uint32, arg0 uint64) uint32 {
	t.Helper()
	var data [64]byte // struct seccomp_data
	binary.LittleEndian.PutUint32(data[offNr:], nr)
	binary.LittleEndian.PutUint32(data[offArch:], arch)
	binary.LittleEndian.PutUint64(data[offArg0:], arg0)
	var a uint32
	for pc := 0; pc < len(f); pc++ {
		ins := f[pc]
		cond := false
		switch ins.Code {
		case unix.BPF_LD | unix.BPF_W | unix.BPF_ABS:
			a = binary.LittleEndian.Uint32(data[ins.K:])
			continue
		case unix.BPF_RET | unix.BPF_K:
			return ins.K
		case unix.BPF_JMP | unix.BPF_JEQ | unix.BPF_K:
			cond = a == ins.K
		case unix.BPF_JMP | unix.BPF_JGE | unix.BPF_K:
			cond = a >= ins.K
		case unix.BPF_JMP | unix.BPF_JSET | unix.BPF_K:
			cond = a&ins.K != 0
		default:
			t.Fatalf("instruction %d: unexpected code %#x", pc, ins.Code)
		}
		if cond {
			pc += int(ins.Jt)
		} else {
			pc += int(ins.Jf)
		}
		if pc+1 >= len(f) {
			t.Fatalf("instruction %d jumps past the end of the filter", pc)
		}
	}
	t.Fatal("the filter ends without a return")
	return 0
}

func action(v uint32) string {
	switch {
	case v == retAllow:
		return "allow"
	case v&unix.SECCOMP_RET_ACTION_FULL == retErrno:
		return unix.ErrnoName(syscall.Errno(v & unix.SECCOMP_RET_DATA))
	}
	return fmt.Sprintf("%#x", v)
}

// TestDenyList pins the list: a change to it shows up here and must be
// matched in the package documentation.
func TestDenyList(t *testing.T) {
	var got []string
	for _, r := range rules() {
		got = append(got, r.name+" "+unix.ErrnoName(r.errno))
	}
	want := []string{
		"mount EPERM", "umount2 EPERM", "pivot_root EPERM", "chroot EPERM",
		"fsopen EPERM", "fsconfig EPERM", "fsmount EPERM", "fspick EPERM",
		"move_mount EPERM", "open_tree EPERM", "open_tree_attr EPERM", "mount_setattr EPERM",
		"swapon EPERM", "swapoff EPERM", "reboot EPERM", "kexec_load EPERM",
		"kexec_file_load EPERM", "init_module EPERM", "finit_module EPERM", "delete_module EPERM",
		"acct EPERM", "settimeofday EPERM", "clock_settime EPERM", "adjtimex EPERM",
		"clock_adjtime EPERM", "syslog EPERM", "quotactl EPERM", "quotactl_fd EPERM",
		"lookup_dcookie EPERM", "vhangup EPERM",
		"bpf EPERM", "perf_event_open EPERM", "keyctl EPERM", "add_key EPERM",
		"request_key EPERM", "userfaultfd EPERM",
		"io_uring_setup ENOSYS", "io_uring_enter ENOSYS", "io_uring_register ENOSYS",
		"setns EPERM", "unshare EPERM", "clone EPERM", "clone3 ENOSYS",
		"open_by_handle_at EPERM", "name_to_handle_at ENOSYS", "personality EPERM",
		"socket EPERM",
	}
	if runtime.GOARCH == "amd64" {
		want = append(want, "iopl EPERM", "ioperm EPERM", "uselib EPERM")
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("deny-list (-want +got):\n%s", diff)
	}
}

func TestFilterDecisions(t *testing.T) {
	f := buildFilter(rules())
	if len(f) > unix.BPF_MAXINSNS {
		t.Fatalf("filter has %d instructions, the kernel takes %d", len(f), unix.BPF_MAXINSNS)
	}
	type call struct {
		name string
		arch uint32
		nr   uintptr
		arg0 uint64
		want string
	}
	var calls []call
	for _, r := range rules() {
		if r.mask == 0 && !r.hasEqual {
			calls = append(calls, call{r.name, auditArch, uintptr(r.nr), 0, unix.ErrnoName(r.errno)})
		}
	}
	sigchld := uint64(unix.SIGCHLD)
	threadFlags := uint64(unix.CLONE_VM | unix.CLONE_FS | unix.CLONE_FILES | unix.CLONE_SIGHAND | unix.CLONE_THREAD | unix.CLONE_SYSVSEM)
	calls = append(calls,
		call{"getpid", auditArch, unix.SYS_GETPID, 0, "allow"},
		call{"read", auditArch, unix.SYS_READ, 0, "allow"},
		call{"execve", auditArch, unix.SYS_EXECVE, 0, "allow"},
		call{"ptrace", auditArch, unix.SYS_PTRACE, 0, "allow"},
		call{"process_vm_readv", auditArch, unix.SYS_PROCESS_VM_READV, 0, "allow"},
		call{"seccomp", auditArch, unix.SYS_SECCOMP, 0, "allow"},
		call{"landlock_restrict_self", auditArch, unix.SYS_LANDLOCK_RESTRICT_SELF, 0, "allow"},
		call{"fork", auditArch, unix.SYS_CLONE, sigchld, "allow"},
		call{"vfork as os/exec", auditArch, unix.SYS_CLONE, unix.CLONE_VM | unix.CLONE_VFORK | unix.CLONE_PIDFD | sigchld, "allow"},
		call{"thread", auditArch, unix.SYS_CLONE, threadFlags, "allow"},
		call{"clone high bits", auditArch, unix.SYS_CLONE, 1<<40 | sigchld, "allow"},
		call{"unshare files", auditArch, unix.SYS_UNSHARE, unix.CLONE_FILES | unix.CLONE_FS, "allow"},
		call{"personality linux", auditArch, unix.SYS_PERSONALITY, 0, "allow"},
		call{"personality no aslr", auditArch, unix.SYS_PERSONALITY, 0x0040000, "allow"},
		call{"personality query", auditArch, unix.SYS_PERSONALITY, 0xffffffff, "allow"},
		call{"personality read implies exec", auditArch, unix.SYS_PERSONALITY, 0x0400000, "EPERM"},
		call{"personality page zero", auditArch, unix.SYS_PERSONALITY, 0x0100000, "EPERM"},
		call{"unshare newtime", auditArch, unix.SYS_UNSHARE, unix.CLONE_NEWTIME, "EPERM"},
		call{"unshare newuser with files", auditArch, unix.SYS_UNSHARE, unix.CLONE_NEWUSER | unix.CLONE_FILES, "EPERM"},
		call{"socket vsock", auditArch, unix.SYS_SOCKET, unix.AF_VSOCK, "EPERM"},
		call{"socket vsock high bits", auditArch, unix.SYS_SOCKET, 1<<32 | unix.AF_VSOCK, "EPERM"},
		call{"socket unix", auditArch, unix.SYS_SOCKET, unix.AF_UNIX, "allow"},
		call{"socket inet", auditArch, unix.SYS_SOCKET, unix.AF_INET, "allow"},
		call{"socket inet6", auditArch, unix.SYS_SOCKET, unix.AF_INET6, "allow"},
		call{"socket netlink", auditArch, unix.SYS_SOCKET, unix.AF_NETLINK, "allow"},
		call{"socketpair vsock", auditArch, unix.SYS_SOCKETPAIR, unix.AF_VSOCK, "allow"},
	)
	for _, fl := range []struct {
		name string
		flag uint64
	}{
		{"newns", unix.CLONE_NEWNS}, {"newcgroup", unix.CLONE_NEWCGROUP}, {"newuts", unix.CLONE_NEWUTS},
		{"newipc", unix.CLONE_NEWIPC}, {"newuser", unix.CLONE_NEWUSER}, {"newpid", unix.CLONE_NEWPID},
		{"newnet", unix.CLONE_NEWNET},
	} {
		calls = append(calls,
			call{"clone " + fl.name, auditArch, unix.SYS_CLONE, fl.flag | sigchld, "EPERM"},
			call{"unshare " + fl.name, auditArch, unix.SYS_UNSHARE, fl.flag, "EPERM"})
	}
	if runtime.GOARCH == "amd64" {
		calls = append(calls,
			call{"i386 getpid", unix.AUDIT_ARCH_I386, 20, 0, "ENOSYS"},
			call{"i386 mount", unix.AUDIT_ARCH_I386, 21, 0, "ENOSYS"},
			// x32 syscalls carry the native audit arch and bit 30 set.
			call{"x32 getpid", auditArch, 0x40000000 | unix.SYS_GETPID, 0, "ENOSYS"},
			call{"x32 mount", auditArch, 0x40000000 | unix.SYS_MOUNT, 0, "ENOSYS"},
		)
	}
	if runtime.GOARCH == "arm64" {
		calls = append(calls, call{"arm getpid", unix.AUDIT_ARCH_ARM, 20, 0, "ENOSYS"})
	}
	for _, c := range calls {
		if got := action(runFilter(t, f, c.arch, uint32(c.nr), c.arg0)); got != c.want {
			t.Errorf("%s (nr %d, arg0 %#x): got %s, want %s", c.name, c.nr, c.arg0, got, c.want)
		}
	}
}
