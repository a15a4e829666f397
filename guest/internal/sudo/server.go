package sudo

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Target is a user of the sandbox a command may run as.
type Target struct {
	Name     string
	UID, GID uint32
	Groups   []uint32
	Home     string
}

// Config configures a Server.
type Config struct {
	// Path is the socket's path (SocketPath inside a sandbox).
	Path string
	// Spawn starts a command as the daemon starts its own and returns
	// its pid and a function that waits for its end.
	Spawn func(*exec.Cmd) (int, func() (syscall.WaitStatus, error), error)
	// Lookup finds a user of the sandbox by name.
	Lookup func(name string) (*Target, error)
	// Logger receives the server's logs.
	Logger *slog.Logger
}

// maxConns bounds the sudo commands running at once, so that a sandbox
// cannot tie up the daemon's descriptors through its socket.
const maxConns = 256

// retryLookup is how long Allow remembers that a user does not exist
// (every envd request names the user, and /etc/passwd may gain it).
const retryLookup = 10 * time.Second

// Server is the daemon's side: it listens once the first user is allowed.
type Server struct {
	cfg Config

	mu      sync.Mutex
	allowed map[uint32]string // uid to name
	names   map[string]bool
	failed  map[string]time.Time // names not found, when last looked up
	l       *net.UnixListener
	sem     chan struct{}
}

// NewServer returns a server that listens on nothing yet.
func NewServer(cfg Config) *Server {
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	return &Server{cfg: cfg, allowed: map[uint32]string{}, names: map[string]bool{}, failed: map[string]time.Time{}, sem: make(chan struct{}, maxConns)}
}

// Allow gives the sandbox's user name sudo, starting the socket on first
// use. Root may always use it once it exists.
func (s *Server) Allow(name string) error {
	s.mu.Lock()
	known, failed := s.names[name], s.failed[name]
	s.mu.Unlock()
	if known || time.Since(failed) < retryLookup {
		return nil
	}
	t, err := s.cfg.Lookup(name)
	if err != nil {
		s.mu.Lock()
		s.failed[name] = time.Now()
		s.mu.Unlock()
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		l, err := listen(s.cfg.Path)
		if err != nil {
			return err
		}
		s.l = l
		go s.serve(l)
	}
	s.allowed[t.UID] = t.Name
	s.names[name] = true
	return nil
}

// listen makes the socket, which any user may connect to (the daemon
// checks who did).
func listen(p string) (*net.UnixListener, error) {
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		return nil, fmt.Errorf("sudo: %w", err)
	}
	os.Remove(p)
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: p, Net: "unix"})
	if err != nil {
		return nil, fmt.Errorf("sudo: %w", err)
	}
	if err := os.Chmod(p, 0o666); err != nil {
		l.Close()
		return nil, fmt.Errorf("sudo: %w", err)
	}
	return l, nil
}

// Close stops listening; running commands go on.
func (s *Server) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.l == nil {
		return nil
	}
	return s.l.Close()
}

func (s *Server) serve(l *net.UnixListener) {
	for {
		c, err := l.AcceptUnix()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond)
			continue
		}
		select {
		case s.sem <- struct{}{}:
			go func() {
				defer func() { <-s.sem }()
				s.handle(c)
			}()
		default:
			writeMessage(c, message{Error: fmt.Sprintf("too many sudo commands running (%d); wait for one to end", maxConns)})
			c.Close()
		}
	}
}

// caller is who connected.
func (s *Server) caller(c *net.UnixConn) (uid, gid uint32, name string, err error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return 0, 0, "", err
	}
	var cred *unix.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = unix.GetsockoptUcred(int(fd), unix.SOL_SOCKET, unix.SO_PEERCRED)
	}); err != nil {
		return 0, 0, "", err
	}
	if cerr != nil {
		return 0, 0, "", cerr
	}
	s.mu.Lock()
	name, ok := s.allowed[cred.Uid]
	s.mu.Unlock()
	if cred.Uid == 0 {
		name, ok = "root", true
	}
	if !ok {
		return cred.Uid, cred.Gid, "", errNotAllowed
	}
	return cred.Uid, cred.Gid, name, nil
}

// handle serves one client: its descriptors and request, the command's
// start, signals, and its end.
func (s *Server) handle(c *net.UnixConn) {
	defer c.Close()
	uid, gid, callerName, err := s.caller(c)
	if errors.Is(err, errNotAllowed) {
		writeMessage(c, message{Error: fmt.Sprintf("uid %d is not allowed to use sudo in this sandbox", uid)})
		return
	}
	if err != nil {
		writeMessage(c, message{Error: "reading the caller's credentials: " + err.Error()})
		return
	}
	c.SetReadDeadline(time.Now().Add(10 * time.Second))
	files, req, err := readRequest(c)
	defer func() {
		for _, f := range files {
			f.Close()
		}
	}()
	if err != nil {
		writeMessage(c, message{Error: err.Error()})
		return
	}
	cmd, err := s.command(req, files, callerName, uid, gid)
	if err != nil {
		writeMessage(c, message{Error: err.Error()})
		return
	}
	pid, wait, err := s.cfg.Spawn(cmd)
	for _, f := range files {
		f.Close()
	}
	files = nil
	if err != nil {
		writeMessage(c, message{Error: fmt.Sprintf("%s: %v", req.Args[0], err)})
		return
	}
	s.cfg.Logger.Info("sudo", "caller", callerName, "user", req.User, "cmd", req.Args[0], "pid", pid)
	c.SetReadDeadline(time.Time{})
	writeMessage(c, message{Started: true})
	var mu sync.Mutex
	ended := false
	go relaySignals(c, pid, &mu, &ended)
	ws, err := wait()
	mu.Lock()
	ended = true
	mu.Unlock()
	code := 1
	switch {
	case err != nil:
	case ws.Exited():
		code = ws.ExitStatus()
	case ws.Signaled():
		code = 128 + int(ws.Signal())
	}
	writeMessage(c, message{Exit: &code})
}

// relaySignals forwards the client's signals to the command's process
// group, and kills the group when the client goes away before it ends.
func relaySignals(c *net.UnixConn, pid int, mu *sync.Mutex, ended *bool) {
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var m message
		if json.Unmarshal(sc.Bytes(), &m) != nil || m.Signal < 1 || m.Signal > 64 {
			continue
		}
		mu.Lock()
		if !*ended {
			unix.Kill(-pid, syscall.Signal(m.Signal))
		}
		mu.Unlock()
	}
	mu.Lock()
	if !*ended {
		unix.Kill(-pid, unix.SIGKILL)
	}
	mu.Unlock()
}

// readRequest reads the client's three descriptors and its request.
func readRequest(c *net.UnixConn) ([]*os.File, *Request, error) {
	buf := make([]byte, 1)
	oob := make([]byte, unix.CmsgSpace(4*4))
	_, oobn, flags, _, err := c.ReadMsgUnix(buf, oob)
	if err != nil {
		return nil, nil, fmt.Errorf("reading the request: %w", err)
	}
	var files []*os.File
	msgs, _ := unix.ParseSocketControlMessage(oob[:oobn])
	for i := range msgs {
		fds, err := unix.ParseUnixRights(&msgs[i])
		if err != nil {
			continue
		}
		for _, fd := range fds {
			unix.CloseOnExec(fd)
			files = append(files, os.NewFile(uintptr(fd), "stdio"))
		}
	}
	if flags&unix.MSG_CTRUNC != 0 || len(files) != 3 {
		return files, nil, errors.New("the request must carry stdin, stdout and stderr")
	}
	var n uint32
	if err := binary.Read(c, binary.BigEndian, &n); err != nil {
		return files, nil, fmt.Errorf("reading the request: %w", err)
	}
	if n > maxRequest {
		return files, nil, fmt.Errorf("the command and its environment are over %d bytes", maxRequest)
	}
	data := make([]byte, n)
	if _, err := io.ReadFull(c, data); err != nil {
		return files, nil, fmt.Errorf("reading the request: %w", err)
	}
	var req Request
	if err := json.Unmarshal(data, &req); err != nil {
		return files, nil, fmt.Errorf("malformed request: %w", err)
	}
	if len(req.Args) == 0 || req.Args[0] == "" || !path.IsAbs(req.Dir) {
		return files, nil, errors.New("the request needs a command and an absolute working directory")
	}
	for _, s := range append(append([]string{req.Dir, req.User}, req.Args...), req.Env...) {
		if strings.IndexByte(s, 0) >= 0 {
			return files, nil, errors.New("the request holds a NUL byte")
		}
	}
	return files, &req, nil
}

// command builds the command of req, run as its target user with the
// client's descriptors.
func (s *Server) command(req *Request, files []*os.File, callerName string, uid, gid uint32) (*exec.Cmd, error) {
	name := req.User
	if name == "" {
		name = "root"
	}
	t, err := s.cfg.Lookup(name)
	if err != nil {
		return nil, fmt.Errorf("unknown user %s", name)
	}
	env := commandEnv(req, t.Name, t.Home, callerName, uid, gid)
	pathVar := securePath
	for _, kv := range env {
		if v, ok := strings.CutPrefix(kv, "PATH="); ok {
			pathVar = v
		}
	}
	prog, err := lookPath(req.Args[0], pathVar, req.Dir)
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: prog, Args: req.Args, Env: env, Dir: req.Dir,
		Stdin: files[0], Stdout: files[1], Stderr: files[2],
		SysProcAttr: &syscall.SysProcAttr{Setsid: true}}
	if os.Geteuid() == 0 && (t.UID != 0 || t.GID != 0) {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: t.UID, Gid: t.GID, Groups: t.Groups}
	}
	return cmd, nil
}

// lookPath finds prog as sudo does: a name with a slash as it is (under
// dir when relative), any other on pathVar.
func lookPath(prog, pathVar, dir string) (string, error) {
	if strings.Contains(prog, "/") {
		if !path.IsAbs(prog) {
			prog = path.Join(dir, prog)
		}
		if executable(prog) {
			return prog, nil
		}
		return "", fmt.Errorf("%s: command not found", prog)
	}
	for _, d := range filepath.SplitList(pathVar) {
		if d == "" || !path.IsAbs(d) {
			continue
		}
		if p := path.Join(d, prog); executable(p) {
			return p, nil
		}
	}
	return "", fmt.Errorf("%s: command not found", prog)
}

func executable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}
