package procs

import (
	"os/exec"
	"syscall"
)

// Spawn starts cmd the way the manager starts its processes (through
// Config.Spawn, so it joins the sandbox's work cgroup, and reaped by the
// daemon's reaper when it reaps every child) without tracking it: for
// the daemon's own helpers (sudo). It returns the pid and a function
// that waits for the process's end.
func (m *Manager) Spawn(cmd *exec.Cmd) (int, func() (syscall.WaitStatus, error), error) {
	startFn := func() (int, error) {
		if err := m.cfg.Spawn(cmd); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	}
	var wait func() exitInfo
	var pid int
	var err error
	if m.reaper != nil {
		wait, pid, err = m.reaper.start(startFn)
	} else {
		wait, pid, err = waitDirect(startFn)
	}
	if err != nil {
		return 0, nil, err
	}
	return pid, func() (syscall.WaitStatus, error) {
		info := wait()
		return info.status, info.err
	}, nil
}
