package procs

import (
	"os/exec"
	"syscall"
)

// Spawn starts cmd the way the manager starts its processes (see spawn)
// without tracking it: for the daemon's own helpers (sudo). It returns
// the pid and a function that waits for the process's end.
func (m *Manager) Spawn(cmd *exec.Cmd) (int, func() (syscall.WaitStatus, error), error) {
	wait, pid, err := m.spawn(cmd)
	if err != nil {
		return 0, nil, err
	}
	return pid, func() (syscall.WaitStatus, error) {
		info := wait()
		return info.status, info.err
	}, nil
}

// spawn starts cmd through Config.Spawn (so it joins the sandbox's work
// cgroup), reaped by the daemon's reaper when it reaps every child, and
// returns what waits for its end and its pid.
func (m *Manager) spawn(cmd *exec.Cmd) (func() exitInfo, int, error) {
	startFn := func() (int, error) {
		if err := m.cfg.Spawn(cmd); err != nil {
			return 0, err
		}
		return cmd.Process.Pid, nil
	}
	if m.reaper != nil {
		return m.reaper.start(startFn)
	}
	return waitDirect(startFn)
}
