// Package harden walls in a sandbox's daemon and everything it starts:
// capabilities, no_new_privs, seccomp and Landlock.
//
// The local runtime's daemon (`cove guest`, pid 1 of the sandbox) calls
// [Apply] once, after its mounts and before it serves. Every layer is set
// on every thread of the running Go process, so each command the daemon
// later forks (from whichever thread) inherits all of them; nothing can be
// undone afterwards, by the daemon or by its children.
//
// # Layers, in the order Apply sets them
//
//  1. Capabilities. Every capability but [Options.KeepCaps] leaves the
//     bounding set, the permitted and effective sets, and the inheritable
//     and ambient sets are emptied. The default keeps what the daemon
//     needs to serve its API: become the sandbox user (CAP_SETUID,
//     CAP_SETGID), chown and chmod what it writes for that user
//     (CAP_CHOWN, CAP_FOWNER, CAP_FSETID), read and write any file of the
//     sandbox for the file API (CAP_DAC_OVERRIDE), signal the user's
//     processes (CAP_KILL), and let a server started as root bind a port
//     below 1024 (CAP_NET_BIND_SERVICE). CAP_SETPCAP is dropped: Apply
//     needs it only while it shrinks the bounding set, and after that it
//     would only let a root process add bounding-set capabilities to its
//     inheritable set. Commands started as uid 0 get at most the kept set;
//     commands started as another user get none (setuid clears them).
//  2. no_new_privs. execve can no longer add privileges: setuid-root and
//     file-capability binaries run with the caller's ids and capabilities.
//  3. Seccomp. A deny-list: the syscalls below fail with an errno, every
//     other one is allowed, and nothing is ever killed (a denied call in
//     the daemon is an error it reports, not a crash). The filter is
//     installed with SECCOMP_FILTER_FLAG_TSYNC, so the kernel puts it on
//     all threads at once.
//  4. Landlock, where the kernel has it (ABI 2 or later): reading and
//     executing stay allowed everywhere; writing only beneath
//     [Options.Writable]. From ABI 8 on, signals and abstract unix
//     sockets are also scoped to the sandbox's domain.
//
// # The seccomp filter
//
// Any syscall made through another ABI than the native one (i386 through
// int 0x80 or x32 on amd64, 32-bit arm on arm64) gets ENOSYS: a deny-list
// names native syscall numbers only, and the other ABIs number them
// differently. Of the native calls:
//
//   - EPERM, what an unprivileged caller already gets, so programs handle
//     it: mount, umount2, pivot_root, chroot, the new mount API (fsopen,
//     fsconfig, fsmount, fspick, move_mount, open_tree, open_tree_attr,
//     mount_setattr), swapon, swapoff, reboot, kexec_load,
//     kexec_file_load, init_module, finit_module, delete_module, bpf,
//     perf_event_open, keyctl, add_key, request_key, userfaultfd, setns,
//     open_by_handle_at, acct, settimeofday, clock_settime, adjtimex,
//     clock_adjtime, syslog, quotactl, quotactl_fd, lookup_dcookie,
//     vhangup, and on amd64 iopl, ioperm and uselib. These change the
//     machine rather than the sandbox, reach kernel interfaces with a long
//     record of exploits (bpf, perf, keys, userfaultfd as a race-widening
//     tool), or escape a mount namespace (open_by_handle_at).
//   - EPERM when the flags create a namespace: unshare with any
//     CLONE_NEW* flag, clone with CLONE_NEWNS, NEWCGROUP, NEWUTS, NEWIPC,
//     NEWUSER, NEWPID or NEWNET. A sandbox must not make namespaces (a new
//     user namespace is where most unprivileged kernel exploits start);
//     unshare(CLONE_FILES), unshare(CLONE_FS) and ordinary fork/thread
//     clones still work.
//   - EPERM for personality with READ_IMPLIES_EXEC or MMAP_PAGE_ZERO
//     (executable heaps, a mapped page zero: old exploit helpers), unless
//     it is the 0xffffffff query. ADDR_NO_RANDOMIZE stays allowed, for
//     gdb and setarch -R.
//   - EPERM for socket(AF_VSOCK, ...), as in Docker's default profile:
//     vsock reaches the hypervisor and the host's other guests, whatever
//     the sandbox's network policy says. (socketpair needs no rule: vsock
//     has none.)
//   - ENOSYS, where programs fall back to an older call: clone3 (its flags
//     sit in a struct that seccomp cannot read; glibc then uses clone,
//     whose flags the filter checks, and Go's os/exec uses clone unless
//     SysProcAttr.UseCgroupFD is set, which therefore fails here),
//     name_to_handle_at (systemd and others then use other means), and
//     io_uring_setup, io_uring_enter, io_uring_register (libuv and
//     liburing users fall back to epoll; io_uring has been a steady source
//     of kernel exploits, and Docker blocks it too).
//
// ptrace, process_vm_readv and process_vm_writev stay allowed, so gdb and
// strace work inside the sandbox. What the issue asks for, no ptrace
// outside the sandbox, holds without them: the PID namespace gives no way
// to name a process outside it, and a process can only trace one whose
// permitted capabilities it also has or with CAP_SYS_PTRACE, which is
// dropped, so a user's command cannot trace the daemon. Landlock adds its
// own rule: no tracing into another domain than one's own or a nested one
// (see Threads below for what that means before ABI 8). Since Linux 4.8 a
// tracer cannot use ptrace to skip its tracee's seccomp filter.
//
// # Landlock and the daemon's file API
//
// Landlock restricts the daemon too, and so its file API (envd's
// filesystem service, which may act as root anywhere in the sandbox).
// That is the price of having one: Go's os/exec has no hook between fork
// and exec, so the only way for every command to inherit a ruleset is for
// the daemon to hold it first. [DefaultWritable] is therefore broad:
// every directory at the top of the sandbox's root except /proc, /sys and
// /dev, plus the standard character devices, /dev/pts and /dev/shm. Root
// inside the sandbox can then still install packages (apt writes /usr,
// /etc, /var) and the manifest's users can be added (/etc/passwd), all of
// which lands in the sandbox's own overlay upper dir. What Landlock walls
// off, even from root with CAP_DAC_OVERRIDE, is what reaches the host's
// kernel: /proc (sysrq-trigger, /proc/sys, other processes' mem and
// oom_score_adj), /sys (uevent_helper, cgroup files), device nodes other
// than the standard ones, and new entries at the top of the root. A
// runtime whose sandboxes never need root to write system directories can
// pass [StrictWritable] instead; then the file API can write only there
// too. Reads are never restricted by Landlock here: the mount namespace
// decides what exists.
//
// The daemon must therefore finish whatever it writes under /proc or /sys
// (oom_score_adj, cgroup files) and bind its socket before calling Apply,
// or do so beneath a writable path.
//
// # Threads and cgo
//
// Capabilities, no_new_privs and Landlock domains are per thread in
// Linux. Apply sets them on every thread through the psx package
// (kernel.org/pub/linux/libs/security/libcap/psx, which go-landlock uses
// too): in a binary built with CGO_ENABLED=0 that is
// [syscall.AllThreadsSyscall]; in one that links cgo, where
// AllThreadsSyscall always fails with ENOTSUP (`go test -race` always
// links cgo, and so does a cove binary built with cgo on, through net and
// os/user), psx signals each thread from C. Seccomp needs neither: TSYNC
// synchronises the filter, and no_new_privs with it, in the kernel.
//
// Landlock before ABI 8 (this project's Linux 6.18 machines have 7) has no TSYNC, and one
// landlock_restrict_self per thread makes one domain per thread: siblings
// with the same rules. A command belongs to the domain of the daemon
// thread that forked it, and Landlock refuses ptrace (gdb -p, strace -p,
// /proc/PID/fd and other ptrace-checked files) from one sibling domain
// into another, so tracing a process that another command started may
// fail with EPERM; tracing one's own children always works. For the same
// reason Apply scopes signals and abstract unix sockets to the domain
// (Landlock ABI 6) only from ABI 8 on: before that, scoping would stop the
// daemon from signalling commands forked by its other threads. Signals are
// not otherwise restricted by Landlock.
package harden

import (
	"fmt"
	"os"
)

// Options says what the hardening leaves to the daemon. The zero value is
// the default for a sandbox.
type Options struct {
	// KeepCaps names the capabilities the daemon keeps in its bounding,
	// permitted and effective sets, as "CAP_CHOWN" or "chown". Nil keeps
	// DefaultKeepCaps(); an empty, non-nil slice keeps none, and then the
	// daemon can no longer start commands as another user.
	KeepCaps []string
	// Writable lists the files and directories beneath which Landlock
	// allows writing (creating, removing, renaming, truncating). Nil means
	// DefaultWritable(). Paths that do not exist are skipped and named in
	// the Report.
	Writable []string
	// GVisor says the daemon runs on gVisor's kernel, which has the
	// filter's errno action but does not answer the kernel's question
	// whether it has it (SECCOMP_GET_ACTION_AVAIL): Apply installs the
	// filter without asking, and an install error is an error.
	GVisor bool
}

// Report says what Apply put in place, for the daemon's log. A layer the
// kernel lacks is absent here and explained in Skipped.
type Report struct {
	// Seccomp is true when the filter is installed on every thread.
	Seccomp bool
	// Landlock is the kernel's Landlock ABI version when a ruleset is in
	// force on every thread, 0 when none is.
	Landlock int
	// NoNewPrivs is true when no_new_privs is set on every thread.
	NoNewPrivs bool
	// CapsKept names the capabilities left in the bounding, permitted and
	// effective sets, lowest number first ("CAP_CHOWN", ...).
	CapsKept []string
	// Skipped gives one sentence per layer (or Writable path) that was
	// not applied, and why.
	Skipped []string
}

// DefaultKeepCaps returns the capabilities the daemon keeps by default:
// those it needs to start commands as the sandbox user, write files for
// that user, serve the file API anywhere in the sandbox and signal the
// user's processes. See the package documentation for each one's reason.
func DefaultKeepCaps() []string {
	return []string{
		"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID",
		"CAP_KILL", "CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE",
	}
}

// devWritable are the parts of a sandbox's minimal /dev that programs
// write to: the standard character devices, terminals and POSIX shared
// memory. Everything else under /dev stays read-only.
var devWritable = []string{
	"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom",
	"/dev/tty", "/dev/ptmx", "/dev/pts", "/dev/shm",
}

// StrictWritable returns a narrow alternative to DefaultWritable: the
// workspace, the temporary directories, the home directories, /run, and
// the standard devices. That is enough for an unprivileged user's pip,
// npm and git (into a virtualenv or ~/.local, caches in ~), but neither
// apt nor useradd as root can work under it, and neither can the file
// API outside these paths.
func StrictWritable(workspace string) []string {
	out := []string{"/tmp", "/var/tmp", "/home", "/root", "/run"}
	if workspace != "" {
		out = append([]string{workspace}, out...)
	}
	return append(out, devWritable...)
}

// DefaultWritable returns the paths beneath which Landlock allows writing
// by default: every directory at the top of the root except /proc, /sys
// and /dev (and symbolic links, which lead into one of the others or into
// one of those three), plus the standard devices, /dev/pts and /dev/shm.
// It reads "/" when called, so call it inside the sandbox's root. The root
// directory itself is not writable: nothing new can be made at the top.
func DefaultWritable() ([]string, error) {
	entries, err := os.ReadDir("/")
	if err != nil {
		return nil, fmt.Errorf("listing the root directory: %w", err)
	}
	var out []string
	for _, e := range entries {
		switch e.Name() {
		case "proc", "sys", "dev":
			continue
		}
		if e.IsDir() {
			out = append(out, "/"+e.Name())
		}
	}
	return append(out, devWritable...), nil
}
