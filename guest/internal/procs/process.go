// Package procs is the daemon's process service: envd's Process Connect
// service (start, connect, list, input, signals, PTY size) over processes
// whose output waits in a bounded log per process, so a client that
// leaves and comes back (or another one) reads on from where the last one
// stopped. Package guest assembles it into the daemon.
package procs

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/creack/pty"
	"golang.org/x/sys/unix"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/guest/gen/process/processconnect"
	"github.com/cove-sandbox/cove/guest/internal/fsys"
	"github.com/cove-sandbox/cove/guest/internal/journal"
	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

const (
	// maxProcesses bounds the processes one daemon tracks at once.
	maxProcesses = 4096
	// finishedKeep is how long an ended process stays reachable by
	// Connect, so a client that lost its stream still gets the end.
	finishedKeep = 5 * time.Minute
	// maxFinished bounds the ended processes kept.
	maxFinished = 256
	// readChunk is the pipe read size; one data event carries at most this.
	readChunk = 32 << 10
	// maxBatch bounds events sent before a stream re-checks the log.
	maxBatch = 64
)

// proc is one process started by the daemon.
type proc struct {
	pid    int
	tag    string
	config *pb.ProcessConfig
	log    *outLog
	pty    *os.File // nil without a PTY

	// mu guards stdin and end.
	mu    sync.Mutex
	stdin *os.File // nil once closed or when not opened
	end   *pb.ProcessEvent_EndEvent

	exited   chan struct{} // closed when the process has ended and its output is drained
	finished time.Time
}

// Config configures a Manager.
type Config struct {
	// Workdir is the sandbox path processes without a cwd start in.
	Workdir string
	// KeepAlive is how often a quiet process stream gets a keepalive.
	KeepAlive time.Duration
	// OutputBuffer bounds the output kept per process for a client that
	// attaches later.
	OutputBuffer int
	// Reap makes the manager wait for every child, as pid 1 must.
	Reap bool
	// OOMCounter, when set, reads the sandbox's count of OOM kills.
	OOMCounter func() int64
	// Spawn starts every process (cmd.Start, or the runtime's own).
	Spawn func(cmd *exec.Cmd) error
	// FS resolves working directories and users inside the sandbox.
	FS *fsys.Service
	// Env copies the daemon's environment for processes (its
	// configuration plus envd's /init) into env.
	Env func(env map[string]string)
	// Journal, when set, gets a line for every process start and end.
	Journal *journal.Journal
}

// Manager implements the process service: it starts processes, keeps
// their output in a log per process for the streams that attach to it,
// and reaches them by pid or tag for input, signals and attaches. The
// daemon fills Config in (see guest.NewServer).
type Manager struct {
	cfg    Config
	reaper *reaper // nil unless the daemon reaps every child

	// mu guards the maps.
	mu       sync.Mutex
	running  map[int]*proc
	tags     map[string]*proc
	finished []*proc
	streams  map[string]*attachedStream // by wire.StreamHeader id

	// devNull is the stdin of processes started without one, opened once
	// (reads see end of file whatever other readers did); nil if it could
	// not be opened, and exec opens its own.
	devNull *os.File

	// oomMu guards oomSeen, the last OOM-kill count read per cgroup file.
	oomMu   sync.Mutex
	oomSeen map[string]int64
}

type attachedStream struct {
	log    *outLog
	cursor *cursor
	cancel context.CancelFunc
}

var _ processconnect.ProcessHandler = (*Manager)(nil)

// New returns a process manager for cfg.
func New(cfg Config) *Manager {
	m := &Manager{cfg: cfg, running: map[int]*proc{}, tags: map[string]*proc{}, streams: map[string]*attachedStream{}}
	if cfg.Reap {
		m.reaper = startReaper()
	}
	if f, err := os.Open(os.DevNull); err == nil {
		m.devNull = f
	}
	m.oomSeen = map[string]int64{}
	if f, n := oomKills(); n >= 0 {
		m.oomSeen[f] = n
	}
	if cfg.OOMCounter != nil {
		m.oomSeen["runtime"] = cfg.OOMCounter()
	}
	return m
}

// find looks a process up by selector among running and recently ended
// ones.
func (m *Manager) find(sel *pb.ProcessSelector) (*proc, error) {
	if sel == nil {
		return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("no process selector: give a pid or a tag"))
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	switch s := sel.Selector.(type) {
	case *pb.ProcessSelector_Pid:
		if p, ok := m.running[int(s.Pid)]; ok {
			return p, nil
		}
		for i := len(m.finished) - 1; i >= 0; i-- {
			if m.finished[i].pid == int(s.Pid) {
				return m.finished[i], nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with pid %d not found", s.Pid))
	case *pb.ProcessSelector_Tag:
		if p, ok := m.tags[s.Tag]; ok {
			return p, nil
		}
		for i := len(m.finished) - 1; i >= 0; i-- {
			if m.finished[i].tag == s.Tag {
				return m.finished[i], nil
			}
		}
		return nil, connect.NewError(connect.CodeNotFound, fmt.Errorf("process with tag %q not found", s.Tag))
	}
	return nil, connect.NewError(connect.CodeInvalidArgument, errors.New("empty process selector: give a pid or a tag"))
}

func (m *Manager) List(ctx context.Context, req *connect.Request[pb.ListRequest]) (*connect.Response[pb.ListResponse], error) {
	m.mu.Lock()
	out := make([]*pb.ProcessInfo, 0, len(m.running))
	for _, p := range m.running {
		info := &pb.ProcessInfo{Config: p.config, Pid: uint32(p.pid)}
		if p.tag != "" {
			info.Tag = &p.tag
		}
		out = append(out, info)
	}
	m.mu.Unlock()
	sort.Slice(out, func(i, j int) bool { return out[i].Pid < out[j].Pid })
	return connect.NewResponse(&pb.ListResponse{Processes: out}), nil
}

func (m *Manager) Start(ctx context.Context, req *connect.Request[pb.StartRequest], stream *connect.ServerStream[pb.StartResponse]) error {
	user, err := m.runAs(req.Header(), os.Geteuid())
	if err != nil {
		return wire.ConnectError(err)
	}
	killAfter, err := killAfter(req.Header())
	if err != nil {
		return wire.ConnectError(err)
	}
	p, err := m.start(ctx, req.Msg, user)
	if err != nil {
		m.logStartFailed(req.Msg.GetProcess(), err)
		return wire.ConnectError(err)
	}
	m.logStarted(p, user)
	if deadline, ok := ctx.Deadline(); ok {
		m.killAt(p, deadline)
	}
	if killAfter > 0 {
		m.killAt(p, time.Now().Add(killAfter))
	}
	start := &pb.StartResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}}
	if req.Header().Get(wire.DetachedHeader) != "" {
		// No cursor: the output waits in the log, from its first byte,
		// for the first Connect.
		return stream.Send(start)
	}
	c := p.log.attach(true)
	if err := stream.Send(start); err != nil {
		p.log.detach(c)
		return err
	}
	ctx, unregister := m.register(ctx, req.Header().Get(wire.StreamHeader), p, c)
	defer unregister()
	return m.stream(ctx, p, c, func(ev *pb.ProcessEvent) error { return stream.Send(&pb.StartResponse{Event: ev}) })
}

func (m *Manager) Connect(ctx context.Context, req *connect.Request[pb.ConnectRequest], stream *connect.ServerStream[pb.ConnectResponse]) error {
	p, err := m.find(req.Msg.GetProcess())
	if err != nil {
		return err
	}
	c := p.log.attach(false)
	if err := stream.Send(&pb.ConnectResponse{Event: &pb.ProcessEvent{Event: &pb.ProcessEvent_Start{Start: &pb.ProcessEvent_StartEvent{Pid: uint32(p.pid)}}}}); err != nil {
		p.log.detach(c)
		return err
	}
	ctx, unregister := m.register(ctx, req.Header().Get(wire.StreamHeader), p, c)
	defer unregister()
	return m.stream(ctx, p, c, func(ev *pb.ProcessEvent) error { return stream.Send(&pb.ConnectResponse{Event: ev}) })
}

// killAfter reads a Start call's wire.KillAfterHeader; 0 when absent.
func killAfter(h http.Header) (time.Duration, error) {
	v := h.Get(wire.KillAfterHeader)
	if v == "" {
		return 0, nil
	}
	ms, err := strconv.ParseInt(v, 10, 64)
	if err != nil || ms <= 0 || ms > int64(sandbox.MaxTimeout/time.Millisecond) {
		return 0, fmt.Errorf("%s %q: give a number of milliseconds, at least 1 and at most a year: %w", wire.KillAfterHeader, v, sandbox.ErrInvalid)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

// killAt kills p's process group (and, on a PTY, its session: see
// killCommand) at deadline unless it has ended by then. The deadline of
// a Start call (Connect-Timeout-Ms, which E2B's SDKs send as a command's
// timeoutMs, 60 s by default) is the command's,
// as in envd: it holds whether or not the client is still attached, and
// the stream itself ends at the same moment with deadline_exceeded. Cove's
// clients send wire.KillAfterHeader instead (sandbox.ExecRequest.Timeout),
// which kills the same way but leaves the stream to end with the process.
// The deadline of a Connect call (a client that reattaches for a while)
// does not limit the process.
func (m *Manager) killAt(p *proc, deadline time.Time) {
	t := time.AfterFunc(time.Until(deadline), func() {
		select {
		case <-p.exited:
			return
		default:
		}
		killCommand(p.pid, p.pty != nil)
	})
	go func() {
		<-p.exited
		t.Stop()
	}()
}

// register records a named stream so DetachStream can end it: the
// returned context ends when it does. The caller unregisters the stream
// when it ends. (Not context.AfterFunc: its goroutine would cost a
// wakeup per exec.)
func (m *Manager) register(ctx context.Context, id string, p *proc, c *cursor) (context.Context, func()) {
	if id == "" || len(id) > 128 {
		return ctx, func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	st := &attachedStream{log: p.log, cursor: c, cancel: cancel}
	m.mu.Lock()
	m.streams[id] = st
	m.mu.Unlock()
	return ctx, func() {
		m.mu.Lock()
		if m.streams[id] == st {
			delete(m.streams, id)
		}
		m.mu.Unlock()
		cancel()
	}
}

// DetachStream serves POST /cove/detach?stream=ID: the stream stops
// taking output before this returns. An unknown id is not an error: the
// stream has already ended.
func (m *Manager) DetachStream(w http.ResponseWriter, r *http.Request) {
	id := r.URL.Query().Get("stream")
	m.mu.Lock()
	st := m.streams[id]
	delete(m.streams, id)
	m.mu.Unlock()
	if st != nil {
		st.log.detachDelivered(st.cursor)
		st.cancel()
	}
	w.WriteHeader(http.StatusNoContent)
}

// stream sends a process's output from cursor c, keepalives while it is
// quiet, and the end event, until the process ends or the client leaves.
// The process outlives the stream.
func (m *Manager) stream(ctx context.Context, p *proc, c *cursor, send func(*pb.ProcessEvent) error) error {
	defer p.log.detach(c)
	keep := time.NewTicker(m.cfg.KeepAlive)
	defer keep.Stop()
	for {
		if err := ctx.Err(); err != nil {
			// The client left: what it has not been sent stays for the
			// next one.
			return err
		}
		evs, done, changed := p.log.read(c)
		if len(evs) > maxBatch {
			evs = evs[:maxBatch]
		}
		for _, ev := range evs {
			p.log.sending(c, 1)
			if err := send(dataEvent(ev)); err != nil {
				return err
			}
			if err := ctx.Err(); err != nil {
				// Gone while this was in flight: it may not have arrived,
				// so the next client gets it again (at least once rather
				// than lost). Cove clients detach explicitly and never
				// see this.
				return err
			}
			p.log.consume(c, 1)
		}
		if len(evs) > 0 {
			keep.Reset(m.cfg.KeepAlive)
			continue
		}
		if done {
			<-p.exited
			p.mu.Lock()
			end := p.end
			p.mu.Unlock()
			// The end of the stream follows at once: one write for both.
			holdFlushes(ctx)
			return send(&pb.ProcessEvent{Event: &pb.ProcessEvent_End{End: end}})
		}
		select {
		case <-changed:
		case <-keep.C:
			if err := send(&pb.ProcessEvent{Event: &pb.ProcessEvent_Keepalive{Keepalive: &pb.ProcessEvent_KeepAlive{}}}); err != nil {
				return err
			}
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func dataEvent(ev logEvent) *pb.ProcessEvent {
	d := &pb.ProcessEvent_DataEvent{}
	switch ev.kind {
	case kindStdout:
		d.Output = &pb.ProcessEvent_DataEvent_Stdout{Stdout: ev.data}
	case kindStderr:
		d.Output = &pb.ProcessEvent_DataEvent_Stderr{Stderr: ev.data}
	default:
		d.Output = &pb.ProcessEvent_DataEvent_Pty{Pty: ev.data}
	}
	return &pb.ProcessEvent{Event: &pb.ProcessEvent_Data{Data: d}}
}

// start launches a process and its output pumps.
func (m *Manager) start(ctx context.Context, req *pb.StartRequest, user *fsys.User) (*proc, error) {
	cfg := req.GetProcess()
	if err := m.admit(cfg, req.GetTag()); err != nil {
		return nil, err
	}
	cmd, err := m.command(ctx, cfg, user, req.Pty != nil)
	if err != nil {
		return nil, err
	}
	p := &proc{tag: req.GetTag(), config: cfg, log: newOutLog(m.cfg.OutputBuffer), exited: make(chan struct{})}
	pio, err := m.stdio(cmd, p, req)
	if err != nil {
		return nil, err
	}
	wait, pid, err := m.spawn(cmd)
	if err != nil {
		pio.fail(p)
		return nil, startError(cfg.Cmd, err)
	}
	pio.started()
	p.pid = pid

	m.mu.Lock()
	m.running[pid] = p
	if p.tag != "" {
		m.tags[p.tag] = p
	}
	m.mu.Unlock()
	go m.run(p, cmd, pio.readers, wait)
	return p, nil
}

// admit checks a start request against the daemon's limits and tags.
func (m *Manager) admit(cfg *pb.ProcessConfig, tag string) error {
	if cfg == nil || strings.TrimSpace(cfg.Cmd) == "" {
		return fmt.Errorf("no command: set process.cmd to the program to run: %w", sandbox.ErrInvalid)
	}
	if strings.IndexByte(cfg.Cmd, 0) >= 0 {
		return fmt.Errorf("command contains a NUL byte: %w", sandbox.ErrInvalid)
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if len(m.running) >= maxProcesses {
		return fmt.Errorf("%d processes are already running, the most one sandbox may have: %w", maxProcesses, sandbox.ErrLimit)
	}
	if tag != "" {
		if _, ok := m.tags[tag]; ok {
			return fmt.Errorf("a running process already has tag %q; pick another tag: %w", tag, sandbox.ErrExist)
		}
	}
	return nil
}

// command builds the command of cfg: its program on the sandbox's PATH,
// its working directory (confined), environment and user; tty is set
// for a process on a PTY.
func (m *Manager) command(ctx context.Context, cfg *pb.ProcessConfig, user *fsys.User, tty bool) (*exec.Cmd, error) {
	cwd := m.cfg.Workdir
	if wd := fsys.WorkdirOf(ctx); wd != "" {
		cwd = wd
	}
	if cfg.Cwd != nil && *cfg.Cwd != "" {
		cwd = *cfg.Cwd
	}
	sandboxDir, hostDir, err := m.cfg.FS.Resolve(ctx, cwd, true)
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	if fi, err := os.Stat(hostDir); err != nil || !fi.IsDir() {
		return nil, fmt.Errorf("working directory %q does not exist or is not a directory: %w", sandboxDir, sandbox.ErrInvalid)
	}
	env := m.processEnv(cfg.Envs, user, sandboxDir, tty)
	path, err := lookPath(cfg.Cmd, env["PATH"])
	if err != nil {
		return nil, err
	}
	cmd := &exec.Cmd{Path: path, Args: append([]string{cfg.Cmd}, cfg.Args...), Dir: hostDir, Env: envList(env)}
	cmd.SysProcAttr = &syscall.SysProcAttr{}
	if user != nil && os.Geteuid() == 0 && (user.UID != 0 || user.GID != 0) {
		cmd.SysProcAttr.Credential = &syscall.Credential{Uid: uint32(user.UID), Gid: uint32(user.GID), Groups: user.Groups}
	}
	return cmd, nil
}

// outReader is the parent's end of a child's output: a pipe or a PTY.
type outReader struct {
	f    *os.File
	kind byte
}

// procIO is what stdio set up for a child: the ends the parent reads and
// the child's ends, which the parent closes once the child has them.
type procIO struct {
	readers []outReader
	child   []*os.File
}

// started closes the child's ends in the parent.
func (pio *procIO) started() {
	for _, f := range pio.child {
		f.Close()
	}
}

// fail closes everything of a child that did not start.
func (pio *procIO) fail(p *proc) {
	pio.started()
	for _, r := range pio.readers {
		r.f.Close()
	}
	if p.stdin != nil {
		p.stdin.Close()
	}
}

// stdio gives cmd its standard input and output: a PTY when req asks for
// one, else pipes (stdin only when req keeps it open).
func (m *Manager) stdio(cmd *exec.Cmd, p *proc, req *pb.StartRequest) (*procIO, error) {
	pio := &procIO{}
	if req.Pty != nil {
		ptmx, tty, err := pty.Open()
		if err != nil {
			return nil, fmt.Errorf("opening a pseudo-terminal: %w", err)
		}
		if sz := req.Pty.GetSize(); sz != nil && sz.Cols > 0 && sz.Rows > 0 {
			pty.Setsize(ptmx, &pty.Winsize{Cols: uint16(sz.Cols), Rows: uint16(sz.Rows)})
		}
		cmd.Stdin, cmd.Stdout, cmd.Stderr = tty, tty, tty
		cmd.SysProcAttr.Setsid = true
		cmd.SysProcAttr.Setctty = true
		pio.child = append(pio.child, tty)
		p.pty = ptmx
		pio.readers = append(pio.readers, outReader{ptmx, kindPTY})
		return pio, nil
	}
	cmd.SysProcAttr.Setpgid = true
	if req.Stdin == nil || *req.Stdin {
		r, w, err := os.Pipe()
		if err != nil {
			return nil, err
		}
		cmd.Stdin = r
		pio.child = append(pio.child, r)
		p.stdin = w
	} else if m.devNull != nil {
		cmd.Stdin = m.devNull
	}
	for _, kind := range []byte{kindStdout, kindStderr} {
		r, w, err := outputPipe()
		if err != nil {
			pio.fail(p)
			return nil, err
		}
		if kind == kindStdout {
			cmd.Stdout = w
		} else {
			cmd.Stderr = w
		}
		pio.child = append(pio.child, w)
		pio.readers = append(pio.readers, outReader{r, kind})
	}
	return pio, nil
}

// pump copies what a child writes to f into p's log, until f ends.
func (p *proc) pump(f *os.File, kind byte) {
	defer f.Close()
	buf := make([]byte, readChunk)
	for {
		n, err := f.Read(buf)
		if n > 0 {
			p.log.append(context.Background(), kind, append([]byte(nil), buf[:n]...))
		}
		if err != nil {
			// EIO on a PTY master means the terminal side closed.
			return
		}
	}
}

// run reads a started process's output until it ends, then records how
// it ended and moves it to the ended processes.
func (m *Manager) run(p *proc, cmd *exec.Cmd, readers []outReader, wait func() exitInfo) {
	// Without a PTY, the goroutine that waits for the process reads its
	// stdout itself (the end waits for all output anyway): a goroutine and
	// a hand-off fewer per process. A PTY is read until shortly after the
	// process ends, as descendants may hold it open for good.
	inline := -1
	if p.pty == nil {
		inline = 0
	}
	var pumps sync.WaitGroup
	for i, r := range readers {
		if i == inline {
			continue
		}
		pumps.Add(1)
		go func() {
			defer pumps.Done()
			p.pump(r.f, r.kind)
		}()
	}
	if inline >= 0 {
		p.pump(readers[inline].f, readers[inline].kind)
	}
	info := wait()
	cmd.Process.Release()
	if p.pty != nil {
		// Descendants may hold the terminal open; the shell is gone,
		// so stop reading after a short drain.
		go func() { time.Sleep(100 * time.Millisecond); p.pty.Close() }()
	}
	pumps.Wait()
	end := endEvent(info, m.oomKilled)
	if n := p.log.droppedBytes(); n > 0 && end.Error == nil {
		msg := fmt.Sprintf("%d bytes of output were dropped while no client was attached (the daemon keeps at most the last %d bytes per process)", n, m.cfg.OutputBuffer)
		end.Error = &msg
	}
	m.logEnded(p, end)
	p.mu.Lock()
	p.end = end
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.mu.Unlock()
	m.mu.Lock()
	delete(m.running, p.pid)
	if p.tag != "" && m.tags[p.tag] == p {
		delete(m.tags, p.tag)
	}
	p.finished = time.Now()
	m.finished = append(m.finished, p)
	m.pruneLocked()
	m.mu.Unlock()
	// exited before the log closes: a stream that sees the log done
	// sends the end at once instead of waiting on exited.
	close(p.exited)
	p.log.close()
}

// outputPipe makes a pipe for a child's output. Only the parent's read end
// is non-blocking and in the poller: os.Pipe would set up both ends so,
// and the child's end would be set back to blocking for the exec (about
// ten system calls per process more).
func outputPipe() (r, w *os.File, err error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC); err != nil {
		return nil, nil, os.NewSyscallError("pipe2", err)
	}
	if _, err := unix.FcntlInt(uintptr(p[0]), syscall.F_SETFL, syscall.O_NONBLOCK); err != nil {
		syscall.Close(p[0])
		syscall.Close(p[1])
		return nil, nil, os.NewSyscallError("fcntl", err)
	}
	return os.NewFile(uintptr(p[0]), "|0"), os.NewFile(uintptr(p[1]), "|1"), nil
}

// pruneLocked forgets ended processes past their keep time or count.
func (m *Manager) pruneLocked() {
	cut := 0
	for cut < len(m.finished) && (len(m.finished)-cut > maxFinished || time.Since(m.finished[cut].finished) > finishedKeep) {
		cut++
	}
	m.finished = append([]*proc(nil), m.finished[cut:]...)
}

// oomKilled reports whether the out-of-memory killer has killed anything
// since it was last asked: its cgroup counter rose. It is asked only when
// a process died of SIGKILL, so the counter is not read on every start.
func (m *Manager) oomKilled() bool {
	f, n := oomKills()
	if m.cfg.OOMCounter != nil {
		f, n = "runtime", m.cfg.OOMCounter()
	}
	if n < 0 {
		return false
	}
	m.oomMu.Lock()
	defer m.oomMu.Unlock()
	// A cgroup not seen before counts from zero: sandboxes get fresh ones.
	rose := n > m.oomSeen[f]
	m.oomSeen[f] = n
	return rose
}

// endEvent describes how a process ended, in envd's terms.
func endEvent(info exitInfo, oomKilled func() bool) *pb.ProcessEvent_EndEvent {
	ws := info.status
	end := &pb.ProcessEvent_EndEvent{}
	switch {
	case info.err != nil:
		end.ExitCode = -1
		msg := info.err.Error()
		end.Error = &msg
		end.Status = "unknown"
	case ws.Exited():
		end.ExitCode = int32(ws.ExitStatus())
		end.Exited = true
		end.Status = "exit status " + strconv.Itoa(ws.ExitStatus())
	case ws.Signaled():
		end.ExitCode = -1
		end.Status = "signal: " + ws.Signal().String()
		if ws.Signal() == syscall.SIGKILL && oomKilled() {
			end.Status = "oom: killed"
			msg := "the process was killed by the out-of-memory killer: it used more memory than the sandbox's limit"
			end.Error = &msg
		}
	}
	return end
}

// startError turns a failed exec into a sentinel error a user can act on.
func startError(cmd string, err error) error {
	switch {
	case errors.Is(err, exec.ErrNotFound), errors.Is(err, os.ErrNotExist):
		return fmt.Errorf("starting %q: program not found; check the name and the PATH: %w", cmd, sandbox.ErrNotFound)
	case errors.Is(err, os.ErrPermission):
		return fmt.Errorf("starting %q: not executable: %w", cmd, sandbox.ErrPermission)
	case errors.Is(err, syscall.EAGAIN):
		return fmt.Errorf("starting %q: too many processes in the sandbox: %w", cmd, sandbox.ErrLimit)
	}
	return fmt.Errorf("starting %q: %w", cmd, err)
}

// lookPath finds a program on the sandbox's PATH (not the daemon's).
func lookPath(cmd, pathEnv string) (string, error) {
	if strings.Contains(cmd, "/") {
		return cmd, nil
	}
	for _, dir := range filepath.SplitList(pathEnv) {
		if dir == "" {
			continue
		}
		p := filepath.Join(dir, cmd)
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", fmt.Errorf("starting %q: program not found on PATH %q: %w", cmd, pathEnv, sandbox.ErrNotFound)
}

const defaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// processEnv builds a process's environment: defaults (a terminal's too
// when tty is set), the daemon's configured env, then the request's.
func (m *Manager) processEnv(req map[string]string, user *fsys.User, dir string, tty bool) map[string]string {
	env := map[string]string{"PATH": defaultPath, "HOME": "/", "LANG": "C.UTF-8"}
	if user != nil {
		env["HOME"], env["USER"], env["LOGNAME"] = user.Home, user.Name, user.Name
	}
	if tty {
		m.terminalEnv(env, user)
	}
	m.cfg.Env(env)
	for k, v := range req {
		env[k] = v
	}
	env["PWD"] = dir
	return env
}

// defaultTerm is the TERM of a process on a PTY whose request and
// daemon set none: what the web terminal (xterm.js-like), E2B's PTY
// clients and most terminal emulators speak, so clear, colours, less,
// top and editors work.
const defaultTerm = "xterm-256color"

// terminalEnv adds to env what an interactive program expects on a
// terminal: TERM, SHELL (the user's login shell, else bash, else sh),
// and for a process of the daemon's own user its /etc/passwd name and
// home. A process without a PTY gets none of this: a pipe is no terminal.
func (m *Manager) terminalEnv(env map[string]string, user *fsys.User) {
	env["TERM"] = defaultTerm
	if user == nil {
		if user = m.cfg.FS.UserByID(os.Geteuid()); user != nil {
			env["USER"], env["LOGNAME"] = user.Name, user.Name
			if m.cfg.FS.Exists(user.Home, true) {
				env["HOME"] = user.Home
			}
		}
	}
	env["SHELL"] = "/bin/sh"
	shells := []string{"/bin/bash"}
	if user != nil && user.Shell != "" && !strings.HasSuffix(user.Shell, "/nologin") && !strings.HasSuffix(user.Shell, "/false") {
		shells = []string{user.Shell, "/bin/bash"}
	}
	for _, sh := range shells {
		if m.cfg.FS.Exists(sh, false) {
			env["SHELL"] = sh
			return
		}
	}
}

func envList(env map[string]string) []string {
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	sort.Strings(out)
	return out
}

func (m *Manager) Update(ctx context.Context, req *connect.Request[pb.UpdateRequest]) (*connect.Response[pb.UpdateResponse], error) {
	p, err := m.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if sz := req.Msg.GetPty().GetSize(); sz != nil {
		if p.pty == nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has no PTY to resize; start it with a pty", p.pid))
		}
		if err := pty.Setsize(p.pty, &pty.Winsize{Cols: uint16(sz.Cols), Rows: uint16(sz.Rows)}); err != nil {
			return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("resizing the PTY of process %d: %w", p.pid, err))
		}
	}
	return connect.NewResponse(&pb.UpdateResponse{}), nil
}

// write sends input to a process's stdin or PTY.
func (p *proc) write(in *pb.ProcessInput) error {
	switch v := in.GetInput().(type) {
	case *pb.ProcessInput_Pty:
		if p.pty == nil {
			return fmt.Errorf("process %d has no PTY; send stdin instead: %w", p.pid, sandbox.ErrState)
		}
		select {
		case <-p.exited:
			return fmt.Errorf("process %d has ended: %w", p.pid, sandbox.ErrState)
		default:
		}
		_, err := p.pty.Write(v.Pty)
		return err
	case *pb.ProcessInput_Stdin:
		if p.pty != nil {
			_, err := p.pty.Write(v.Stdin)
			return err
		}
		p.mu.Lock()
		w := p.stdin
		p.mu.Unlock()
		if w == nil {
			return fmt.Errorf("process %d has ended, closed its stdin or was started without one: %w", p.pid, sandbox.ErrState)
		}
		if _, err := w.Write(v.Stdin); err != nil {
			return fmt.Errorf("writing to the stdin of process %d: %w: %w", p.pid, sandbox.ErrState, err)
		}
		return nil
	}
	return fmt.Errorf("empty input: set stdin or pty: %w", sandbox.ErrInvalid)
}

func (m *Manager) SendInput(ctx context.Context, req *connect.Request[pb.SendInputRequest]) (*connect.Response[pb.SendInputResponse], error) {
	p, err := m.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if err := p.write(req.Msg.GetInput()); err != nil {
		return nil, wire.ConnectError(err)
	}
	return connect.NewResponse(&pb.SendInputResponse{}), nil
}

func (m *Manager) StreamInput(ctx context.Context, stream *connect.ClientStream[pb.StreamInputRequest]) (*connect.Response[pb.StreamInputResponse], error) {
	var p *proc
	for stream.Receive() {
		switch ev := stream.Msg().GetEvent().(type) {
		case *pb.StreamInputRequest_Start:
			var err error
			if p, err = m.find(ev.Start.GetProcess()); err != nil {
				return nil, err
			}
		case *pb.StreamInputRequest_Data:
			if p == nil {
				return nil, connect.NewError(connect.CodeFailedPrecondition, errors.New("input before a start event: send the process selector first"))
			}
			if err := p.write(ev.Data.GetInput()); err != nil {
				return nil, wire.ConnectError(err)
			}
		}
	}
	if err := stream.Err(); err != nil {
		return nil, err
	}
	return connect.NewResponse(&pb.StreamInputResponse{}), nil
}

func (m *Manager) SendSignal(ctx context.Context, req *connect.Request[pb.SendSignalRequest]) (*connect.Response[pb.SendSignalResponse], error) {
	p, err := m.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	sig := syscall.Signal(req.Msg.Signal)
	if _, known := pb.Signal_name[int32(req.Msg.Signal)]; !known || sig == 0 {
		return nil, connect.NewError(connect.CodeInvalidArgument, fmt.Errorf("signal %d is not supported: use SIGNAL_SIGTERM, SIGNAL_SIGKILL, SIGNAL_SIGINT, SIGNAL_SIGHUP, SIGNAL_SIGQUIT, SIGNAL_SIGUSR1 or SIGNAL_SIGUSR2", req.Msg.Signal))
	}
	select {
	case <-p.exited:
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d has already ended", p.pid))
	default:
	}
	// The process leads its own group: signal the group so children of a
	// shell go too.
	if err := syscall.Kill(-p.pid, sig); err != nil {
		if err := syscall.Kill(p.pid, sig); err != nil && err != syscall.ESRCH {
			return nil, connect.NewError(connect.CodeInternal, fmt.Errorf("signalling process %d: %w", p.pid, err))
		}
	}
	return connect.NewResponse(&pb.SendSignalResponse{}), nil
}

func (m *Manager) CloseStdin(ctx context.Context, req *connect.Request[pb.CloseStdinRequest]) (*connect.Response[pb.CloseStdinResponse], error) {
	p, err := m.find(req.Msg.GetProcess())
	if err != nil {
		return nil, err
	}
	if p.pty != nil {
		return nil, connect.NewError(connect.CodeFailedPrecondition, fmt.Errorf("process %d runs on a PTY: send Ctrl-D (0x04) instead of closing stdin", p.pid))
	}
	p.mu.Lock()
	if p.stdin != nil {
		p.stdin.Close()
		p.stdin = nil
	}
	p.mu.Unlock()
	return connect.NewResponse(&pb.CloseStdinResponse{}), nil
}

// CloseAll kills every running process group.
func (m *Manager) CloseAll() {
	m.mu.Lock()
	defer m.mu.Unlock()
	for pid := range m.running {
		syscall.Kill(-pid, syscall.SIGKILL)
		syscall.Kill(pid, syscall.SIGKILL)
	}
}

// oomFile is the cgroup file whose oom_kill counter covers the daemon's
// processes: v2 memory.events or v1 memory.oom_control. It is looked up
// each time (only after a SIGKILL) since the daemon may be moved into its
// sandbox's cgroup after it starts.
func oomFile() string {
	data, err := os.ReadFile("/proc/self/cgroup")
	if err != nil {
		return ""
	}
	for _, line := range strings.Split(strings.TrimSpace(string(data)), "\n") {
		parts := strings.SplitN(line, ":", 3)
		if len(parts) != 3 {
			continue
		}
		var file string
		switch {
		case parts[0] == "0" && parts[1] == "":
			file = filepath.Join("/sys/fs/cgroup", parts[2], "memory.events")
		case strings.Contains(","+parts[1]+",", ",memory,"):
			file = filepath.Join("/sys/fs/cgroup/memory", parts[2], "memory.oom_control")
		default:
			continue
		}
		if _, ok := readCounter(file, "oom_kill"); ok {
			return file
		}
	}
	return ""
}

// oomKills reads how many processes the out-of-memory killer has ended in
// the daemon's cgroup; -1 if unknown. A rise by the time a process died of
// SIGKILL means the kill was the OOM killer's. (The sandbox's processes
// share the counter, so an OOM kill of a grandchild can be attributed to
// a process that was SIGKILLed at the same moment; they share the memory
// limit anyway.)
func oomKills() (file string, n int64) {
	f := oomFile()
	if f == "" {
		return "", -1
	}
	n, ok := readCounter(f, "oom_kill")
	if !ok {
		return "", -1
	}
	return f, n
}

func readCounter(file, key string) (int64, bool) {
	f, err := os.Open(file)
	if err != nil {
		return 0, false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), " ")
		if ok && k == key {
			n, err := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n, err == nil
		}
	}
	return 0, false
}
