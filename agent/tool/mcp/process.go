package mcp

import (
	"errors"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"

	sdk "github.com/modelcontextprotocol/go-sdk/mcp"
)

// The grace periods of process.stop: MCP's stdio shutdown is "close stdin,
// wait, SIGTERM, wait, SIGKILL". Servers exit on EOF at once, so the waits
// only matter for a stuck one, and they add to the end of a run.
var (
	stopGrace = 2 * time.Second
	termGrace = 2 * time.Second
)

// stderrTail is how much of a server's stderr is kept to explain its exit.
const stderrTail = 4 << 10

// inheritedEnv are the variables of the harness's environment a stdio
// server gets (plus Server.Env): what programs need to find their tools,
// home, locale and temporary directory, and nothing that may hold a secret.
// The same choice as the MCP SDKs' default environment, with locale, time
// zone and TMPDIR added.
var inheritedEnv = []string{"HOME", "LOGNAME", "PATH", "SHELL", "TERM", "USER", "LANG", "LC_ALL", "LC_CTYPE", "TMPDIR", "TZ"}

// process is a stdio server's process. Cove starts it itself rather than
// with the SDK's CommandTransport so that it can put the server in its own
// process group (to stop what the server started too, and so that a
// terminal's Ctrl-C reaches the harness, which then closes the servers in
// order) and can tell why a server went away.
type process struct {
	cmd    *exec.Cmd
	stdin  *os.File // our end of the server's stdin
	stdout *os.File // our end of the server's stdout
	stderr *tail

	exited chan struct{} // closed once cmd.Wait has returned
	err    error         // cmd.Wait's error; read after exited is closed
}

func startProcess(srv Server) (*process, error) {
	cmd := exec.Command(srv.Command, srv.Args...)
	cmd.Dir = srv.Dir
	cmd.Env = environ(srv.Env)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	p := &process{cmd: cmd, stderr: &tail{}, exited: make(chan struct{})}

	// Plain pipes, not cmd.StdoutPipe: Wait would close that while the
	// session may still be reading what the server wrote before it exited.
	inR, inW, err := os.Pipe()
	if err != nil {
		return nil, err
	}
	outR, outW, err := os.Pipe()
	if err != nil {
		inR.Close()
		inW.Close()
		return nil, err
	}
	cmd.Stdin, cmd.Stdout, cmd.Stderr = inR, outW, io.Writer(p.stderr)
	if srv.Stderr != nil {
		cmd.Stderr = io.MultiWriter(p.stderr, srv.Stderr)
	}
	// cmd.Stderr being a Writer, Wait waits for the copy of stderr, which
	// a child the server left behind could hold open; WaitDelay bounds it.
	cmd.WaitDelay = time.Second
	err = cmd.Start()
	inR.Close()
	outW.Close()
	if err != nil {
		inW.Close()
		outR.Close()
		return nil, err
	}
	p.stdin, p.stdout = inW, outR
	go func() {
		p.err = cmd.Wait()
		close(p.exited)
	}()
	return p, nil
}

func (p *process) transport() sdk.Transport {
	return &sdk.IOTransport{Reader: p.stdout, Writer: p.stdin}
}

// exitErr reports why the process exited, waiting up to wait for it to: a
// session sees the server's stdout end a moment before Wait returns. It
// returns nil if the process is still running.
func (p *process) exitErr(wait time.Duration) error {
	t := time.NewTimer(wait)
	defer t.Stop()
	select {
	case <-p.exited:
	case <-t.C:
		return nil
	}
	msg := "process exited"
	if p.err != nil {
		msg = "process exited: " + p.err.Error()
	}
	if s := p.stderr.String(); s != "" {
		msg += "; stderr: " + s
	}
	return errors.New(msg)
}

// stop ends the server the way MCP's stdio transport says: close its stdin
// and wait, then SIGTERM, then SIGKILL. Signals go to the whole process
// group so that what the server started goes too, and the group gets one
// more SIGKILL after the server has exited, for children that outlived it.
// (That last kill could only reach a stranger if, in that moment, the
// server's pid had been reused by a new process that made itself a group
// leader.)
func (p *process) stop(session *sdk.ClientSession) error {
	// The session's Close waits for calls in flight, which a stuck server
	// never answers: it runs aside, and the server is told to go by the
	// end of its stdin directly.
	closed := make(chan struct{})
	go func() {
		if session != nil {
			session.Close()
		}
		close(closed)
	}()
	p.stdin.Close()
	pgid := p.cmd.Process.Pid
	if !p.waitExit(stopGrace) {
		syscall.Kill(-pgid, syscall.SIGTERM)
		if !p.waitExit(termGrace) {
			syscall.Kill(-pgid, syscall.SIGKILL)
			<-p.exited
		}
	}
	syscall.Kill(-pgid, syscall.SIGKILL)
	// With the server gone its stdout has ended, so the session finishes
	// closing; the bound is for a session that doesn't.
	select {
	case <-closed:
	case <-time.After(time.Second):
	}
	p.stdout.Close()

	var exit *exec.ExitError
	if errors.As(p.err, &exit) || errors.Is(p.err, exec.ErrWaitDelay) {
		// Exiting with a status or on a signal is how a server stops; it
		// is not a failure of Close.
		return nil
	}
	return p.err
}

func (p *process) waitExit(d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-p.exited:
		return true
	case <-t.C:
		return false
	}
}

func environ(extra map[string]string) []string {
	var env []string
	for _, k := range inheritedEnv {
		if _, set := extra[k]; set {
			continue
		}
		if v, ok := os.LookupEnv(k); ok {
			env = append(env, k+"="+v)
		}
	}
	for k, v := range extra {
		env = append(env, k+"="+v)
	}
	return env
}

// tail keeps the last stderrTail bytes written to it.
type tail struct {
	mu  sync.Mutex // guards buf
	buf []byte
}

func (t *tail) Write(b []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.buf = append(t.buf, b...)
	if over := len(t.buf) - stderrTail; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
	}
	return len(b), nil
}

// String is the kept stderr, trimmed, with a mark when its start was cut.
func (t *tail) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	s := strings.TrimSpace(string(t.buf))
	if len(t.buf) == stderrTail {
		s = "..." + s
	}
	return s
}
