package procs

import (
	"bytes"
	"os"
	"strconv"
	"syscall"
)

// maxSessionSweeps bounds the passes over /proc that kill a session:
// a process the last pass missed (forked while it ran) is found by the
// next.
const maxSessionSweeps = 8

// killCommand kills a command at its deadline: the process group it
// leads and, for a command on a PTY, every process of the session it
// leads, since an interactive shell gives each job a process group of
// its own (and a job that ignores SIGHUP outlives the terminal). A
// process that made a session of its own (setsid, a daemon) is no longer
// the command's and is left, as envd leaves it.
//
// The ids are safe to signal: the kernel does not reuse a pid while it
// names a live process group or session.
func killCommand(pid int, pty bool) {
	syscall.Kill(-pid, syscall.SIGKILL)
	syscall.Kill(pid, syscall.SIGKILL)
	if !pty {
		return
	}
	for range maxSessionSweeps {
		if killSession(pid) == 0 {
			return
		}
	}
}

// killSession sends SIGKILL to every live process of session sid and
// returns how many it signalled.
func killSession(sid int) int {
	d, err := os.Open("/proc")
	if err != nil {
		return 0
	}
	names, _ := d.Readdirnames(-1)
	d.Close()
	n := 0
	for _, name := range names {
		pid, err := strconv.Atoi(name)
		if err != nil || pid <= 1 {
			continue
		}
		if s, ok := sessionOf(pid); ok && s == sid {
			syscall.Kill(pid, syscall.SIGKILL)
			n++
		}
	}
	return n
}

// sessionOf reads the session of a live (not zombie) process from
// /proc/PID/stat; false when it is gone, a zombie or unreadable.
func sessionOf(pid int) (int, bool) {
	data, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat")
	if err != nil {
		return 0, false
	}
	// The command name, in parentheses, may hold anything: the fields
	// after it are state, ppid, pgrp, session.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, false
	}
	f := bytes.Fields(data[i+1:])
	if len(f) < 4 || string(f[0]) == "Z" || string(f[0]) == "X" {
		return 0, false
	}
	s, err := strconv.Atoi(string(f[3]))
	return s, err == nil
}
