package kubetest

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// procID names a process across pid reuse: its pid and its start time
// in clock ticks since boot (/proc/PID/stat's 22nd field).
type procID struct {
	Name  string `json:"name"`
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
}

// state is what a teardown needs, kept in DIR/state.json so that the
// sweep can tear down a cluster whose test binary was killed.
type state struct {
	Owner  procID   `json:"owner"`
	Bridge string   `json:"bridge,omitempty"`
	Procs  []procID `json:"procs,omitempty"`
}

const stateFile = "state.json"

// stateStore persists state as processes start.
type stateStore struct {
	path string

	mu sync.Mutex // guards st and the file
	st state
}

func (s *stateStore) update(f func(*state)) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(&s.st)
	data, err := json.Marshal(s.st)
	if err != nil {
		return err
	}
	tmp := s.path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, s.path)
}

func (s *stateStore) get() state {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.st
	st.Procs = append([]procID(nil), s.st.Procs...)
	return st
}

func readState(dir string) (state, error) {
	var st state
	data, err := os.ReadFile(filepath.Join(dir, stateFile))
	if err != nil {
		return st, err
	}
	return st, json.Unmarshal(data, &st)
}

// startTime returns the start time of process pid, or an error if there
// is no such process or it is a zombie.
func startTime(pid int) (uint64, error) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	// The command name (field 2) may hold spaces and parentheses: the
	// fields after it start after the last ')'.
	i := bytes.LastIndexByte(data, ')')
	if i < 0 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	fields := strings.Fields(string(data[i+1:]))
	if len(fields) < 20 {
		return 0, fmt.Errorf("parsing /proc/%d/stat", pid)
	}
	if fields[0] == "Z" || fields[0] == "X" {
		return 0, fmt.Errorf("process %d has exited", pid)
	}
	return strconv.ParseUint(fields[19], 10, 64)
}

// alive reports whether p still runs (the same process, not a reuse of
// its pid).
func (p procID) alive() bool {
	start, err := startTime(p.Pid)
	return err == nil && start == p.Start
}

// kill sends SIGKILL to p if it is still the process recorded.
func (p procID) kill() {
	if p.alive() {
		_ = syscall.Kill(p.Pid, syscall.SIGKILL)
	}
}

// waitGone waits up to timeout for every process of ps to be gone.
func waitGone(ps []procID, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		var left []string
		for _, p := range ps {
			if p.alive() {
				left = append(left, fmt.Sprintf("%s (pid %d)", p.Name, p.Pid))
			}
		}
		if len(left) == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("still running after SIGKILL: %s", strings.Join(left, ", "))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// procsMentioning lists the processes whose command line contains s:
// containerd's shims and runc name the cluster's directory in theirs.
func procsMentioning(s string) []procID {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return nil
	}
	var ps []procID
	self := os.Getpid()
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil || pid == self {
			continue
		}
		cmdline, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
		if err != nil || !bytes.Contains(cmdline, []byte(s)) {
			continue
		}
		start, err := startTime(pid)
		if err != nil {
			continue
		}
		name, _, _ := bytes.Cut(cmdline, []byte{0})
		ps = append(ps, procID{Name: filepath.Base(string(name)), Pid: pid, Start: start})
	}
	return ps
}

// proc is a process the cluster started.
type proc struct {
	id   procID
	log  string
	done chan struct{} // closed when the process has exited and been reaped
	err  error         // why it exited; set before done is closed
}

// exited reports whether the process has exited, with its error.
func (p *proc) exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// startProc starts argv with its output in logDir/name.log, recorded in
// the state file. Its parent-death signal kills it with the test binary;
// what that cannot reach (containerd's shims, containers) the next
// binary's sweep finds.
func startProc(st *stateStore, logDir, name string, env []string, argv ...string) (*proc, error) {
	logPath := filepath.Join(logDir, name+".log")
	logFile, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return nil, err
	}
	defer logFile.Close()
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", name, err)
	}
	p := &proc{log: logPath, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()
	start, err := startTime(cmd.Process.Pid)
	if err != nil {
		_ = cmd.Process.Kill()
		<-p.done
		return nil, fmt.Errorf("%s exited at once: %v%s", name, p.err, logTail(logPath))
	}
	p.id = procID{Name: name, Pid: cmd.Process.Pid, Start: start}
	if err := st.update(func(s *state) { s.Procs = append(s.Procs, p.id) }); err != nil {
		_ = cmd.Process.Kill()
		return nil, err
	}
	return p, nil
}

// logTail returns the last lines of a log file, to explain a failure.
func logTail(path string) string {
	data, err := os.ReadFile(path)
	if err != nil || len(data) == 0 {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(lines) > 15 {
		lines = lines[len(lines)-15:]
	}
	return "\n--- last lines of " + filepath.Base(path) + ":\n" + strings.Join(lines, "\n")
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin", "/bin"} {
		p := filepath.Join(dir, name)
		if fi, err := os.Stat(p); err == nil && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s is not installed (scripts/deps.sh test installs it)", name)
}
