package harden

// Apply cannot be undone, so the tests that use it re-execute the test
// binary: TestMain sees envProbe, applies the hardening, runs the named
// probe and prints its outcome, which the parent test compares exactly.

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"golang.org/x/sys/unix"
)

const (
	envProbe    = "COVE_HARDEN_PROBE"    // the probe to run after Apply
	envWritable = "COVE_HARDEN_WRITABLE" // Options.Writable, filepath.ListSeparator-separated; unset: default
	envDir      = "COVE_HARDEN_DIR"      // a scratch directory for the probe
	envSetuid   = "COVE_HARDEN_SETUID"   // a setuid-root copy of id(1)
)

// pinnedThreads are goroutines locked to their own OS threads before Apply
// runs, so the threads probe can check that threads which already existed
// were hardened, not just the caller and threads made later.
var pinnedThreads []chan func()

func pinThreads(n int) {
	for range n {
		work := make(chan func())
		ready := make(chan struct{})
		go func() {
			runtime.LockOSThread() // never unlocked: the thread stays this goroutine's
			close(ready)
			for f := range work {
				f()
			}
		}()
		<-ready
		pinnedThreads = append(pinnedThreads, work)
	}
}

// probeMain is the child's main: Apply, then one probe. It prints
// "report: <json>" and "outcome: <text>", and exits 0 if Apply worked.
func probeMain(name string) int {
	probe, ok := probes[name]
	if !ok {
		fmt.Printf("unknown probe %q\n", name)
		return 2
	}
	pinThreads(4)
	var opts Options
	if w, ok := os.LookupEnv(envWritable); ok {
		opts.Writable = filepath.SplitList(w)
	}
	rep, err := Apply(opts)
	if err != nil {
		fmt.Printf("apply: %v\n", err)
		return 2
	}
	js, _ := json.Marshal(rep)
	fmt.Printf("report: %s\n", js)
	fmt.Printf("outcome: %s\n", probe(os.Getenv(envDir)))
	return 0
}

// outcome renders an error as its errno name ("EPERM"), nil as "ok".
func outcome(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return "error: " + err.Error()
}

// rawOutcome is outcome for a raw syscall's errno.
func rawOutcome(e syscall.Errno) string {
	if e != 0 {
		return unix.ErrnoName(e)
	}
	return "ok"
}

func raw(nr uintptr, args ...uintptr) string {
	var a [6]uintptr
	copy(a[:], args)
	_, _, e := unix.Syscall6(nr, a[0], a[1], a[2], a[3], a[4], a[5])
	return rawOutcome(e)
}

// onOwnThread runs f on a thread that is thrown away afterwards, for
// probes that would change the thread's state if they succeeded.
func onOwnThread(f func() string) string {
	out := make(chan string)
	go func() {
		runtime.LockOSThread() // not unlocked: the thread exits with the goroutine
		out <- f()
	}()
	return <-out
}

// runOn runs f on a pinned thread.
func runOn(thread chan func(), f func() string) string {
	done := make(chan string)
	thread <- func() { done <- f() }
	return <-done
}

// startOn starts a command from a pinned thread, or returns nil.
func startOn(thread chan func(), name string, args ...string) *exec.Cmd {
	cmd := exec.Command(name, args...)
	if runOn(thread, func() string { return outcome(cmd.Start()) }) != "ok" {
		return nil
	}
	return cmd
}

// traceOnce attaches to pid, waits for it to stop and detaches, from the
// calling thread (which the caller has locked).
func traceOnce(pid int) string {
	if err := unix.PtraceAttach(pid); err != nil {
		return outcome(err)
	}
	var ws unix.WaitStatus
	if _, err := unix.Wait4(pid, &ws, unix.WALL, nil); err != nil {
		return "error: wait: " + err.Error()
	}
	return outcome(unix.PtraceDetach(pid))
}

// cloneArgs is struct clone_args (version 2, 88 bytes).
type cloneArgs struct {
	flags, pidfd, childTID, parentTID, exitSignal, stack, stackSize, tls, setTID, setTIDSize, cgroup uint64
}

func clone3(flags uint64) string {
	args := &cloneArgs{flags: flags, exitSignal: uint64(unix.SIGCHLD)}
	pid, _, e := unix.RawSyscall(unix.SYS_CLONE3, uintptr(unsafe.Pointer(args)), unsafe.Sizeof(*args), 0)
	if e != 0 {
		return rawOutcome(e)
	}
	if pid == 0 {
		// The child of a filter that failed: leave at once, touching
		// nothing of the Go runtime.
		unix.RawSyscall(unix.SYS_EXIT_GROUP, 0, 0, 0)
	}
	var ws unix.WaitStatus
	unix.Wait4(int(pid), &ws, 0, nil)
	return "ok"
}

func startWith(attr *syscall.SysProcAttr) string {
	cmd := exec.Command("/bin/true")
	cmd.SysProcAttr = attr
	if err := cmd.Start(); err != nil {
		return outcome(err)
	}
	cmd.Wait()
	return "ok"
}

// statusFields reads the security fields of a /proc status file.
func statusFields(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return "error: " + err.Error()
	}
	want := []string{"CapInh", "CapPrm", "CapEff", "CapBnd", "CapAmb", "NoNewPrivs", "Seccomp", "Seccomp_filters"}
	got := map[string]string{}
	for _, line := range strings.Split(string(data), "\n") {
		k, v, ok := strings.Cut(line, ":")
		if ok {
			got[k] = strings.TrimSpace(v)
		}
	}
	var parts []string
	for _, k := range want {
		parts = append(parts, k+"="+got[k])
	}
	return strings.Join(parts, " ")
}

// capture runs cmd and returns its trimmed output, or why it failed.
func capture(cmd *exec.Cmd) string {
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Sprintf("error: %v: %s", err, out)
	}
	return strings.TrimSpace(string(out))
}

var user1000 = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 1000, Gid: 1000}}

var probes = map[string]func(dir string) string{
	// Mounts.
	"mount":      func(dir string) string { return outcome(unix.Mount("tmpfs", dir, "tmpfs", 0, "")) },
	"umount2":    func(dir string) string { return outcome(unix.Unmount(dir, 0)) },
	"pivot_root": func(dir string) string { return outcome(unix.PivotRoot(dir, dir)) },
	"chroot":     func(dir string) string { return outcome(unix.Chroot(dir)) },
	"fsopen": func(string) string {
		fd, err := unix.Fsopen("tmpfs", unix.FSOPEN_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		return outcome(err)
	},
	"open_tree": func(dir string) string {
		// Without OPEN_TREE_CLONE this is an O_PATH open, which anyone
		// may do: only the filter refuses it.
		fd, err := unix.OpenTree(unix.AT_FDCWD, dir, unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		return outcome(err)
	},
	// Namespaces. unshare(CLONE_NEWUSER) in a threaded process is EINVAL
	// without the filter, so EPERM shows the filter at work.
	"unshare_newuser": func(string) string {
		return onOwnThread(func() string { return outcome(unix.Unshare(unix.CLONE_NEWUSER)) })
	},
	"unshare_newnet": func(string) string {
		return onOwnThread(func() string { return outcome(unix.Unshare(unix.CLONE_NEWNET)) })
	},
	"unshare_files": func(string) string {
		return onOwnThread(func() string { return outcome(unix.Unshare(unix.CLONE_FILES)) })
	},
	"clone_newuser": func(string) string { return startWith(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWUSER}) },
	"clone_newns":   func(string) string { return startWith(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWNS}) },
	"clone_newpid":  func(string) string { return startWith(&syscall.SysProcAttr{Cloneflags: unix.CLONE_NEWPID}) },
	"clone3":        func(string) string { return clone3(0) },
	"clone3_newuser": func(string) string {
		return clone3(unix.CLONE_NEWUSER)
	},
	"setns": func(string) string {
		fd, err := unix.Open("/proc/self/ns/net", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "error: " + err.Error()
		}
		defer unix.Close(fd)
		return onOwnThread(func() string { return outcome(unix.Setns(fd, unix.CLONE_NEWNET)) })
	},
	// Kernel interfaces.
	"keyctl": func(string) string {
		_, err := unix.KeyctlGetKeyringID(unix.KEY_SPEC_SESSION_KEYRING, false)
		return outcome(err)
	},
	"add_key": func(string) string {
		_, err := unix.AddKey("user", "cove-harden-probe", []byte("x"), unix.KEY_SPEC_PROCESS_KEYRING)
		return outcome(err)
	},
	"request_key": func(string) string {
		_, err := unix.RequestKey("user", "cove-harden-probe", "", unix.KEY_SPEC_PROCESS_KEYRING)
		return outcome(err)
	},
	"bpf": func(string) string {
		// BPF_MAP_CREATE of a 1-entry array map.
		attr := [4]uint32{2 /* BPF_MAP_TYPE_ARRAY */, 4, 4, 1}
		fd, _, e := unix.Syscall(unix.SYS_BPF, 0, uintptr(unsafe.Pointer(&attr)), unsafe.Sizeof(attr))
		if e == 0 {
			unix.Close(int(fd))
		}
		return rawOutcome(e)
	},
	"perf_event_open": func(string) string {
		// Counting this process's own CPU clock is allowed to anyone
		// at perf_event_paranoid 2 or less.
		attr := unix.PerfEventAttr{
			Type:   unix.PERF_TYPE_SOFTWARE,
			Config: unix.PERF_COUNT_SW_CPU_CLOCK,
			Size:   uint32(unsafe.Sizeof(unix.PerfEventAttr{})),
			Bits:   unix.PerfBitDisabled | unix.PerfBitExcludeKernel | unix.PerfBitExcludeHv,
		}
		fd, err := unix.PerfEventOpen(&attr, 0, -1, -1, unix.PERF_FLAG_FD_CLOEXEC)
		if err == nil {
			unix.Close(fd)
		}
		return outcome(err)
	},
	"userfaultfd": func(string) string { return raw(unix.SYS_USERFAULTFD, unix.O_CLOEXEC) },
	"io_uring_setup": func(string) string {
		var params [120]byte
		fd, _, e := unix.Syscall(unix.SYS_IO_URING_SETUP, 1, uintptr(unsafe.Pointer(&params)), 0)
		if e == 0 {
			unix.Close(int(fd))
		}
		return rawOutcome(e)
	},
	"init_module": func(string) string {
		empty := []byte{0}
		return raw(unix.SYS_INIT_MODULE, 0, 0, uintptr(unsafe.Pointer(&empty[0])))
	},
	"finit_module": func(string) string {
		fd, err := unix.Open("/dev/null", unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			return "error: " + err.Error()
		}
		defer unix.Close(fd)
		return outcome(unix.FinitModule(fd, "", 0))
	},
	"delete_module": func(string) string {
		return outcome(unix.DeleteModule("cove_harden_probe", unix.O_NONBLOCK))
	},
	// kexec_load is ENOSYS without the filter on kernels built without
	// kexec, such as this project's CI machine.
	"kexec_load": func(string) string { return raw(unix.SYS_KEXEC_LOAD, 0, 0, 0, 0) },
	// Wrong magic numbers: EINVAL if reboot were allowed, never a reboot.
	"reboot": func(string) string { return raw(unix.SYS_REBOOT, 1, 2, unix.LINUX_REBOOT_CMD_CAD_OFF, 0) },
	"swapon": func(dir string) string {
		p, err := unix.BytePtrFromString(filepath.Join(dir, "no-such-swap"))
		if err != nil {
			return "error: " + err.Error()
		}
		return raw(unix.SYS_SWAPON, uintptr(unsafe.Pointer(p)), 0)
	},
	"syslog": func(string) string {
		_, err := unix.Klogctl(unix.SYSLOG_ACTION_SIZE_BUFFER, nil)
		return outcome(err)
	},
	"settimeofday": func(string) string { return raw(unix.SYS_SETTIMEOFDAY, 0, 0) }, // NULL, NULL: a no-op if allowed
	"clock_settime": func(string) string {
		// The monotonic clock cannot be set: EINVAL if allowed.
		ts := unix.Timespec{Sec: 1}
		return raw(unix.SYS_CLOCK_SETTIME, unix.CLOCK_MONOTONIC, uintptr(unsafe.Pointer(&ts)))
	},
	"adjtimex": func(string) string {
		var tx unix.Timex // modes 0: a read, allowed to anyone without the filter
		_, err := unix.Adjtimex(&tx)
		return outcome(err)
	},
	"name_to_handle_at": func(string) string {
		_, _, err := unix.NameToHandleAt(unix.AT_FDCWD, "/", 0)
		return outcome(err)
	},
	"open_by_handle_at": func(string) string {
		handle := struct {
			bytes uint32
			typ   int32
			data  [8]byte
		}{bytes: 8, typ: 1}
		atFDCWD := unix.AT_FDCWD
		return raw(unix.SYS_OPEN_BY_HANDLE_AT, uintptr(atFDCWD), uintptr(unsafe.Pointer(&handle)), unix.O_RDONLY)
	},
	"personality_unsafe": func(string) string { return raw(unix.SYS_PERSONALITY, 0x0400000) },
	"personality_query":  func(string) string { return raw(unix.SYS_PERSONALITY, 0xffffffff) },

	// ptrace: the parent is root with every capability; this process
	// has fewer, so it may not trace it. Its own child it may.
	"ptrace_parent": func(string) string {
		return onOwnThread(func() string {
			got := traceOnce(os.Getppid())
			if got == "ok" {
				// Never leave the test binary stopped.
				unix.Kill(os.Getppid(), unix.SIGCONT)
			}
			return got
		})
	},
	"ptrace_child": func(string) string {
		// Started and traced from one thread: the same Landlock domain
		// on every kernel.
		return onOwnThread(func() string {
			cmd := exec.Command("/bin/sleep", "30")
			if err := cmd.Start(); err != nil {
				return "error: " + err.Error()
			}
			defer cmd.Wait()
			defer cmd.Process.Kill()
			return traceOnce(cmd.Process.Pid)
		})
	},
	// A command started from one daemon thread, traced or killed from
	// another: without Landlock's TSYNC the two threads are in sibling
	// domains.
	"ptrace_sibling": func(string) string {
		cmd := startOn(pinnedThreads[0], "/bin/sleep", "30")
		if cmd == nil {
			return "error: start failed"
		}
		defer cmd.Wait()
		defer cmd.Process.Kill()
		return runOn(pinnedThreads[1], func() string { return traceOnce(cmd.Process.Pid) })
	},
	"kill_sibling": func(string) string {
		cmd := startOn(pinnedThreads[0], "/bin/sleep", "30")
		if cmd == nil {
			return "error: start failed"
		}
		got := runOn(pinnedThreads[1], func() string { return outcome(unix.Kill(cmd.Process.Pid, unix.SIGKILL)) })
		if got != "ok" {
			cmd.Process.Kill()
		}
		cmd.Wait()
		return got
	},

	// no_new_privs: a setuid-root binary run by uid 1000 stays uid 1000.
	"setuid_binary": func(string) string {
		cmd := exec.Command(os.Getenv(envSetuid), "-u")
		cmd.SysProcAttr = user1000
		return "euid=" + capture(cmd)
	},

	// Capabilities and the rest, as /proc shows them.
	"status": func(string) string { return statusFields("/proc/self/status") },
	"threads": func(string) string {
		// Every thread, those pinned before Apply included, shows the
		// same state...
		tasks, err := os.ReadDir("/proc/self/task")
		if err != nil {
			return "error: " + err.Error()
		}
		seen := map[string][]string{}
		for _, task := range tasks {
			f := statusFields(filepath.Join("/proc/self/task", task.Name(), "status"))
			seen[f] = append(seen[f], task.Name())
		}
		if len(seen) != 1 {
			return fmt.Sprintf("threads differ: %v", seen)
		}
		if len(tasks) <= len(pinnedThreads) {
			return fmt.Sprintf("only %d threads", len(tasks))
		}
		// ...and is under Landlock: each pinned thread tries to write
		// its own name.
		var results []string
		for _, thread := range pinnedThreads {
			results = append(results, runOn(thread, func() string {
				fd, err := unix.Open("/proc/thread-self/comm", unix.O_WRONLY|unix.O_CLOEXEC, 0)
				if err == nil {
					unix.Close(fd)
				}
				return outcome(err)
			}))
		}
		sort.Strings(results)
		return "threads alike; pinned threads write comm: " + strings.Join(slices.Compact(results), ",")
	},

	// Landlock.
	"write_proc": func(string) string {
		fd, err := unix.Open("/proc/self/comm", unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		return outcome(err)
	},
	"mkdir_root": func(string) string {
		p := fmt.Sprintf("/cove-harden-probe-%d", os.Getpid())
		err := unix.Mkdir(p, 0o700)
		if err == nil {
			unix.Rmdir(p)
		}
		return outcome(err)
	},
	"write_dir": func(dir string) string {
		return outcome(os.WriteFile(filepath.Join(dir, "written"), []byte("x"), 0o644))
	},
	"rename_dir": func(dir string) string {
		// Between two directories: Landlock's "refer" right.
		a, b := filepath.Join(dir, "a"), filepath.Join(dir, "b")
		for _, d := range []string{a, b} {
			if err := os.MkdirAll(d, 0o755); err != nil {
				return outcome(err)
			}
		}
		if err := os.WriteFile(filepath.Join(a, "f"), nil, 0o644); err != nil {
			return outcome(err)
		}
		return outcome(os.Rename(filepath.Join(a, "f"), filepath.Join(b, "f")))
	},
	"read_file": func(string) string {
		_, err := os.ReadFile("/etc/passwd")
		return outcome(err)
	},
	"dev_null": func(string) string {
		return outcome(os.WriteFile("/dev/null", []byte("x"), 0))
	},

	// Ordinary work after Apply.
	"work": func(dir string) string { return ordinaryWork(dir) },
}

// ordinaryWork checks what the daemon does all day: shell commands,
// commands as the sandbox user, fork/exec from many goroutines, new
// threads. It returns "ok" or the first thing that failed.
func ordinaryWork(dir string) string {
	sh := exec.Command("/bin/sh", "-c", `echo ok > "$D/x"; cat "$D/x"`)
	sh.Env = append(os.Environ(), "D="+dir)
	if got := capture(sh); got != "ok" {
		return "sh as root: " + got
	}
	id := exec.Command("/usr/bin/id", "-u")
	id.SysProcAttr = user1000
	if got := capture(id); got != "1000" {
		return "id -u as uid 1000: " + got
	}
	userSh := exec.Command("/bin/sh", "-c", `echo hi > "$D/y"; cat "$D/y"; rm "$D/y"`)
	userSh.Env = append(os.Environ(), "D="+dir)
	userSh.SysProcAttr = user1000
	if got := capture(userSh); got != "hi" {
		return "sh as uid 1000: " + got
	}

	// Fork/exec from many goroutines at once.
	var wg sync.WaitGroup
	errs := make(chan string, 8)
	for range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if err := exec.Command("/bin/true").Run(); err != nil {
				errs <- "concurrent exec: " + err.Error()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for e := range errs {
		return e
	}

	// New threads: each goroutine locked to a thread while others wait
	// forces the runtime to make more (with cgo, through pthread_create,
	// whose clone3 gets ENOSYS and falls back to clone).
	before := countTasks()
	release := make(chan struct{})
	var started sync.WaitGroup
	const extra = 16
	for range extra {
		started.Add(1)
		go func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			unix.Getpid()
			started.Done()
			<-release
		}()
	}
	waited := make(chan struct{})
	go func() { started.Wait(); close(waited) }()
	select {
	case <-waited:
	case <-time.After(10 * time.Second):
		return "new threads: not all started"
	}
	during := countTasks()
	close(release)
	if during < extra {
		return fmt.Sprintf("new threads: %d threads before, %d with %d locked goroutines", before, during, extra)
	}
	return "ok"
}

func countTasks() int {
	tasks, _ := os.ReadDir("/proc/self/task")
	return len(tasks)
}
