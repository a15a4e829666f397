package procs

import (
	"os"
	"sync"
	"syscall"

	"golang.org/x/sys/unix"
)

// exitInfo is how a child ended.
type exitInfo struct {
	status syscall.WaitStatus
	err    error
}

// reaper collects the exit status of every child of the daemon. As a
// sandbox's pid 1 (or a child subreaper) the daemon inherits orphaned
// grandchildren and must reap them, or they stay zombies; so one loop
// waits for any child and hands statuses of the processes we started to
// their waiters. Because it reaps every child, nothing else in the process
// may wait for children: it is only enabled for the real daemon (Config.Reap).
type reaper struct {
	kick chan struct{} // wakes the loop when a child may exist again

	// mu guards waiters and early.
	mu      sync.Mutex
	waiters map[int]chan exitInfo
	early   map[int]exitInfo // statuses that arrived before their waiter registered
}

func startReaper() *reaper {
	r := &reaper{kick: make(chan struct{}, 1), waiters: map[int]chan exitInfo{}, early: map[int]exitInfo{}}
	if os.Getpid() != 1 {
		// Orphans of sandbox processes come to us rather than to the
		// host's init.
		unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0)
	}
	go r.loop()
	return r
}

// loop blocks in wait4 for any child. A blocking wait wakes the moment a
// child ends, without the detour through SIGCHLD and the runtime's signal
// goroutine, which matters for exec round-trip latency.
func (r *reaper) loop() {
	for {
		var ws syscall.WaitStatus
		pid, err := syscall.Wait4(-1, &ws, 0, nil)
		switch {
		case err == syscall.EINTR:
			continue
		case err == syscall.ECHILD:
			<-r.kick
			continue
		case err != nil || pid <= 0:
			<-r.kick
			continue
		}
		r.mu.Lock()
		if ch, ok := r.waiters[pid]; ok {
			delete(r.waiters, pid)
			ch <- exitInfo{status: ws}
		} else {
			r.early[pid] = exitInfo{status: ws}
		}
		r.mu.Unlock()
	}
}

// start runs startFn (which forks the child) while holding the reaper's
// lock, so that the child's exit status, however early, is matched to it
// and not mistaken for an orphan's.
func (r *reaper) start(startFn func() (int, error)) (func() exitInfo, int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	pid, err := startFn()
	if err != nil {
		return nil, 0, err
	}
	ch := make(chan exitInfo, 1)
	if info, ok := r.early[pid]; ok {
		delete(r.early, pid)
		ch <- info
	} else {
		r.waiters[pid] = ch
	}
	// Statuses in early for other pids are orphans': drop them.
	clear(r.early)
	select {
	case r.kick <- struct{}{}:
	default:
	}
	return func() exitInfo { return <-ch }, pid, nil
}

// waitDirect starts a child and returns a function that waits for it with
// wait4, for daemons that do not reap every child (tests running the
// server inside the test binary). The caller's goroutine waits itself:
// one goroutine and hand-off fewer per process.
func waitDirect(startFn func() (int, error)) (func() exitInfo, int, error) {
	pid, err := startFn()
	if err != nil {
		return nil, 0, err
	}
	return func() exitInfo {
		var ws syscall.WaitStatus
		for {
			_, err := syscall.Wait4(pid, &ws, 0, nil)
			if err == syscall.EINTR {
				continue
			}
			return exitInfo{status: ws, err: err}
		}
	}, pid, nil
}
