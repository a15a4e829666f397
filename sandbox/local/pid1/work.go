package pid1

import (
	"fmt"
	"os"
	"os/exec"
	"runtime"

	"golang.org/x/sys/unix"
)

// workThread is the daemon's thread for starting the sandbox's commands.
// On a cgroup v1 host the supervisor gives every sandbox two groups: its
// own, which holds the daemon, and a child with exactly the user's memory
// and pids limits for the commands (see package host). This thread joins
// the child and stays there, locked, and every command is forked from it,
// so each is born in the child: nothing a command starts ever runs
// outside its limits, and the daemon never runs inside them. A thread
// can be elsewhere than its process in v1 without costing the process
// anything: memory is charged to the group of the process's main thread
// (the mm owner), and the OOM killer weighs main threads only, so the
// child's OOM killer never sees the daemon; the thread takes one of the
// child's pids.
//
// Joining once costs about 0.3 ms (a thread moving itself through its
// tasks file skips the kernel's global lock); moving each command into
// the group after its fork would wait out an RCU grace period (5–12 ms)
// per command, and the command could fork before it was moved.
type workThread struct {
	jobs  chan workJob
	ready chan error // the join's outcome, once
}

type workJob struct {
	cmd  *exec.Cmd
	done chan error
}

// startWorkThread opens the tasks files of the commands' group (host
// paths, so before pivot_root hides the cgroup filesystem) and starts the
// thread, which joins the group through them meanwhile (wait says how
// that went). It returns nil when there are no files (cgroup v2, no
// cgroups): commands then start from any thread.
func startWorkThread(tasks []string) (*workThread, error) {
	if len(tasks) == 0 {
		return nil, nil
	}
	var files []*os.File
	for _, p := range tasks {
		f, err := os.OpenFile(p, os.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			for _, f := range files {
				f.Close()
			}
			return nil, fmt.Errorf("opening the commands' cgroup: %w", err)
		}
		files = append(files, f)
	}
	w := &workThread{jobs: make(chan workJob), ready: make(chan error, 1)}
	go w.run(files, w.ready, make(chan struct{}))
	return w, nil
}

// wait waits until the thread has joined the group; call it once.
func (w *workThread) wait() error { return <-w.ready }

// run locks its goroutine to a thread other than the main one, moves the
// thread into the group, reports on ready and then starts commands for
// good. locked is closed once the goroutine holds its thread.
func (w *workThread) run(files []*os.File, ready chan<- error, locked chan struct{}) {
	// Never unlocked: the thread is in another group than the daemon's
	// other threads, and the runtime must not run anything else on it.
	// (Threads the runtime makes while this one is locked are made by its
	// template thread, in the daemon's group.)
	runtime.LockOSThread()
	if unix.Gettid() == unix.Getpid() {
		// The main thread: it must stay in the daemon's group, since v1
		// charges the daemon's memory to its group. Hand over to a new
		// goroutine, which cannot get this thread while it is locked
		// here, and give the thread back once that one holds its own.
		next := make(chan struct{})
		go w.run(files, ready, next)
		<-next
		runtime.UnlockOSThread()
		return
	}
	close(locked)
	for _, f := range files {
		// "0" is the calling thread.
		_, err := f.Write([]byte("0"))
		f.Close()
		if err != nil {
			ready <- fmt.Errorf("moving the daemon's command thread into the commands' cgroup: %w", err)
			return // the runtime ends the locked thread
		}
	}
	ready <- nil
	for job := range w.jobs {
		job.done <- job.cmd.Start()
	}
}

// spawn is guest.Config.Spawn: cmd starts from the thread in the
// commands' group.
func (w *workThread) spawn(cmd *exec.Cmd) error {
	done := make(chan error, 1)
	w.jobs <- workJob{cmd: cmd, done: done}
	return <-done
}

// openOOMCounters opens the OOM counter files given (host paths, before
// pivot_root) and returns what sums their oom_kill counts; nil when none
// can be opened. On v1 each group counts only the kills its own limit
// caused: the commands' group those of its limit, the sandbox's group
// those of the daemon's reserve running out.
func openOOMCounters(paths ...string) func() int64 {
	var files []*os.File
	for _, p := range paths {
		if p == "" {
			continue
		}
		if f, err := os.Open(p); err == nil {
			files = append(files, f)
		}
	}
	if len(files) == 0 {
		return nil
	}
	return func() int64 {
		var sum int64
		for _, f := range files {
			n := readOOMCounter(f)
			if n < 0 {
				return -1
			}
			sum += n
		}
		return sum
	}
}
