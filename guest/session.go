package guest

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"sync"
	"time"

	"connectrpc.com/connect"

	fspb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/guest/gen/process/processconnect"
	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// SessionOptions configures a Session.
type SessionOptions struct {
	// ID is the sandbox id.
	ID string
	// Root is the workspace root inside the sandbox; "" means
	// sandbox.DefaultRoot. Every path is confined to it.
	Root string
	// Info describes the sandbox; the runtime owns its state.
	Info func(ctx context.Context) (sandbox.Info, error)
	// Check, when set, runs before every call; a non-nil error (say,
	// ErrState for a stopped sandbox) is returned instead of calling the
	// daemon.
	Check func(ctx context.Context) error
}

// Session is a sandbox.Session backed by a daemon. Every runtime that runs
// `cove guest` uses it.
type Session struct {
	c    *Client
	opts SessionOptions
}

var _ sandbox.Session = (*Session)(nil)

// NewSession returns a Session that operates through c.
func NewSession(c *Client, opts SessionOptions) *Session {
	if opts.Root == "" {
		opts.Root = sandbox.DefaultRoot
	}
	return &Session{c: c, opts: opts}
}

// Client returns the daemon client the session uses.
func (s *Session) Client() *Client { return s.c }

func (s *Session) ID() string { return s.opts.ID }

// SetEnv merges variables into the environment of every later process
// (Client.SetEnv): for a copied sandbox that gets its own, which last
// until it stops.
func (s *Session) SetEnv(ctx context.Context, env map[string]string) error {
	return s.c.SetEnv(ctx, env)
}

func (s *Session) Info(ctx context.Context) (sandbox.Info, error) {
	if s.opts.Info == nil {
		return sandbox.Info{ID: s.opts.ID, State: sandbox.StateRunning, Spec: sandbox.Spec{Root: s.opts.Root}}, nil
	}
	return s.opts.Info(ctx)
}

func (s *Session) check(ctx context.Context) error {
	if s.opts.Check != nil {
		return s.opts.Check(ctx)
	}
	return nil
}

// path confines p to the workspace.
func (s *Session) path(p string) (string, error) {
	return sandbox.ResolvePath(s.opts.Root, p)
}

// prep runs the session's state check and confines p to the workspace:
// the start of every file operation.
func (s *Session) prep(ctx context.Context, p string) (string, error) {
	if err := s.check(ctx); err != nil {
		return "", err
	}
	return s.path(p)
}

// rpcHeader marks a request as confined to the workspace so the daemon
// refuses symlinks that lead out of it, not only out of the sandbox.
func (s *Session) confine(h http.Header) { h.Set(ConfineHeader, s.opts.Root) }

func req[T any](s *Session, msg *T) *connect.Request[T] {
	r := connect.NewRequest(msg)
	s.confine(r.Header())
	return r
}

func (s *Session) startRequest(r sandbox.ExecRequest) (*pb.StartRequest, error) {
	if r.Cmd == "" {
		return nil, fmt.Errorf("empty command: set Cmd to the program to run: %w", sandbox.ErrInvalid)
	}
	if r.Timeout < 0 || r.Timeout > sandbox.MaxTimeout {
		return nil, fmt.Errorf("timeout %v: give a positive duration up to %v, or 0 for none: %w", r.Timeout, sandbox.MaxTimeout, sandbox.ErrInvalid)
	}
	cmd, args := r.Cmd, r.Args
	if r.Shell && len(args) == 0 {
		cmd, args = "/bin/sh", []string{"-c", r.Cmd}
	}
	dir := r.Dir
	if dir == "" {
		dir = s.opts.Root
	}
	dir, err := s.path(dir)
	if err != nil {
		return nil, fmt.Errorf("working directory: %w", err)
	}
	stdin := r.OpenStdin || r.Stdin != nil
	pr := &pb.StartRequest{
		Process: &pb.ProcessConfig{Cmd: cmd, Args: args, Envs: r.Env, Cwd: &dir},
		Stdin:   &stdin,
	}
	if r.Tag != "" {
		pr.Tag = &r.Tag
	}
	if r.PTY != nil {
		pr.Pty = &pb.PTY{Size: &pb.PTY_Size{Cols: uint32(r.PTY.Cols), Rows: uint32(r.PTY.Rows)}}
	}
	return pr, nil
}

func (s *Session) Exec(ctx context.Context, r sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	p, stream, err := s.open(ctx, r, ctx)
	if err != nil {
		return sandbox.ExitStatus{}, err
	}
	// Exec waits for the end anyway: reading the stream here rather than
	// in a pump goroutine saves a hand-off between goroutines per exec.
	p.pump(ctx, stream)
	st, err := p.Wait(ctx)
	if err != nil && ctx.Err() != nil {
		// The caller gave up: the command must not outlive it.
		kill, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		p.Signal(kill, sandbox.SIGKILL)
		cancel()
		return sandbox.ExitStatus{}, ctx.Err()
	}
	return st, err
}

func (s *Session) Start(ctx context.Context, r sandbox.ExecRequest) (sandbox.Process, error) {
	p, stream, err := s.open(ctx, r, context.Background())
	if err != nil {
		return nil, err
	}
	p.goPump(stream)
	return p, nil
}

// open opens the Start stream under streamCtx (the process's lifetime as
// seen by this handle) and reads, under ctx, the start event. The caller
// delivers the rest of the stream (pump or goPump).
func (s *Session) open(ctx context.Context, r sandbox.ExecRequest, streamCtx context.Context) (*process, *procEventStream, error) {
	sctx, cancel := context.WithCancel(streamCtx)
	streamID := newStreamID()
	stream, err := s.startStream(ctx, sctx, r, http.Header{StreamHeader: {streamID}})
	if err != nil {
		cancel()
		return nil, nil, err
	}
	p := newProcess(s, r.Tag, r.PTY != nil, r.Stdout, r.Stderr, cancel)
	p.streamID = streamID
	if err := p.first(ctx, stream); err != nil {
		cancel()
		return nil, nil, err
	}
	if r.Stdin != nil {
		go s.feed(p.selector(), r.Stdin, p.hasPTY)
	}
	return p, stream, nil
}

// startStream checks the session under ctx and opens a Start stream for
// r under sctx, with h's headers added.
func (s *Session) startStream(ctx, sctx context.Context, r sandbox.ExecRequest, h http.Header) (*procEventStream, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	pr, err := s.startRequest(r)
	if err != nil {
		return nil, err
	}
	h.Set(ConfineHeader, s.opts.Root)
	if r.Timeout > 0 {
		// Whole milliseconds, rounded up: never shorter than asked.
		h.Set(KillAfterHeader, strconv.FormatInt(int64((r.Timeout+time.Millisecond-1)/time.Millisecond), 10))
	}
	if r.User != "" {
		// envd names the user of a request in a Basic authorization header.
		h.Set("Authorization", "Basic "+wire.BasicUser(r.User))
	}
	stream, err := s.c.openStream(sctx, processconnect.ProcessStartProcedure, pr, h)
	if err != nil {
		return nil, wireError(err)
	}
	return stream, nil
}

func (s *Session) Attach(ctx context.Context, sel sandbox.ProcessSelector, stdout, stderr io.Writer) (sandbox.Process, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	p := newProcess(s, sel.Tag, false, stdout, stderr, nil)
	p.pid = sel.PID
	if err := p.connect(ctx); err != nil {
		return nil, err
	}
	return p, nil
}

func (s *Session) Processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	resp, err := s.c.Process.List(ctx, req(s, &pb.ListRequest{}))
	if err != nil {
		return nil, wireError(err)
	}
	var out []sandbox.ProcessInfo
	for _, p := range resp.Msg.Processes {
		out = append(out, sandbox.ProcessInfo{
			PID: int(p.Pid), Tag: p.GetTag(), Cmd: p.GetConfig().GetCmd(), Args: p.GetConfig().GetArgs(),
			Env: p.GetConfig().GetEnvs(), Dir: p.GetConfig().GetCwd(),
		})
	}
	return out, nil
}

func (s *Session) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	sp, err := s.prep(ctx, p)
	if err != nil {
		return nil, err
	}
	resp, err := s.c.do(ctx, http.MethodGet, "/files", url.Values{"path": {sp}}, nil, http.Header{ConfineHeader: {s.opts.Root}})
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", sp, err)
	}
	return resp.Body, nil
}

func (s *Session) WriteFile(ctx context.Context, p string, r io.Reader, perm uint32) error {
	sp, err := s.prep(ctx, p)
	if err != nil {
		return err
	}
	q := url.Values{"path": {sp}}
	if perm != 0 {
		q.Set("mode", "0"+strconv.FormatUint(uint64(perm&0o7777), 8))
	}
	if r == nil {
		r = bytes.NewReader(nil)
	}
	resp, err := s.c.do(ctx, http.MethodPost, "/files", q, io.NopCloser(r),
		http.Header{"Content-Type": {"application/octet-stream"}, ConfineHeader: {s.opts.Root}})
	if err != nil {
		return fmt.Errorf("writing %q: %w", sp, err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func (s *Session) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	sp, err := s.prep(ctx, p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	resp, err := s.c.FS.Stat(ctx, req(s, &fspb.StatRequest{Path: sp}))
	if err != nil {
		return sandbox.FileInfo{}, wireError(err)
	}
	return fileInfo(resp.Msg.Entry), nil
}

func (s *Session) List(ctx context.Context, p string, depth int) ([]sandbox.FileInfo, error) {
	sp, err := s.prep(ctx, p)
	if err != nil {
		return nil, err
	}
	if depth <= 0 {
		depth = 1
	}
	resp, err := s.c.FS.ListDir(ctx, req(s, &fspb.ListDirRequest{Path: sp, Depth: uint32(depth)}))
	if err != nil {
		return nil, wireError(err)
	}
	out := make([]sandbox.FileInfo, 0, len(resp.Msg.Entries))
	for _, e := range resp.Msg.Entries {
		out = append(out, fileInfo(e))
	}
	return out, nil
}

func (s *Session) Mkdir(ctx context.Context, p string) error {
	sp, err := s.prep(ctx, p)
	if err != nil {
		return err
	}
	_, err = s.c.FS.MakeDir(ctx, req(s, &fspb.MakeDirRequest{Path: sp}))
	if err == nil {
		return nil
	}
	err = wireError(err)
	if errors.Is(err, sandbox.ErrExist) || errors.Is(err, sandbox.ErrInvalid) {
		// envd refuses an existing path; our contract accepts an existing
		// directory.
		fi, serr := s.Stat(ctx, sp)
		switch {
		case serr == nil && fi.Type == sandbox.TypeDir:
			return nil
		case serr == nil:
			return fmt.Errorf("creating directory %q: a file is in the way: %w", sp, sandbox.ErrExist)
		}
	}
	return err
}

func (s *Session) Remove(ctx context.Context, p string) error {
	sp, err := s.prep(ctx, p)
	if err != nil {
		return err
	}
	if sp == s.opts.Root {
		return fmt.Errorf("removing %q: it is the workspace root; remove what is inside it instead: %w", sp, sandbox.ErrInvalid)
	}
	// envd's Remove succeeds on a missing path; the contract says
	// ErrNotFound.
	if _, err := s.c.FS.Stat(ctx, req(s, &fspb.StatRequest{Path: sp})); err != nil {
		return fmt.Errorf("removing %q: %w", sp, wireError(err))
	}
	if _, err := s.c.FS.Remove(ctx, req(s, &fspb.RemoveRequest{Path: sp})); err != nil {
		return wireError(err)
	}
	return nil
}

func (s *Session) Move(ctx context.Context, src, dst string) error {
	ss, err := s.prep(ctx, src)
	if err != nil {
		return err
	}
	ds, err := s.path(dst)
	if err != nil {
		return err
	}
	if ss == s.opts.Root {
		return fmt.Errorf("moving %q: it is the workspace root: %w", ss, sandbox.ErrInvalid)
	}
	// envd's Move replaces the destination; the contract refuses to.
	if _, err := s.c.FS.Stat(ctx, req(s, &fspb.StatRequest{Path: ds})); err == nil {
		return fmt.Errorf("moving %q to %q: the destination exists; remove it first: %w", ss, ds, sandbox.ErrExist)
	}
	// The check above names the problem; the header makes the daemon
	// refuse a destination that appears meanwhile (RENAME_NOREPLACE).
	mr := req(s, &fspb.MoveRequest{Source: ss, Destination: ds})
	mr.Header().Set(NoReplaceHeader, "1")
	if _, err := s.c.FS.Move(ctx, mr); err != nil {
		return wireError(err)
	}
	return nil
}

func (s *Session) SnapshotWorkspace(ctx context.Context, w io.Writer) error {
	if err := s.ReadDirTar(ctx, s.opts.Root, w); err != nil {
		return fmt.Errorf("snapshotting the workspace: %w", err)
	}
	return nil
}

func (s *Session) RestoreWorkspace(ctx context.Context, r io.Reader) error {
	if err := s.WriteDirTar(ctx, s.opts.Root, r); err != nil {
		return fmt.Errorf("restoring the workspace: %w", err)
	}
	return nil
}

var _ sandbox.Archiver = (*Session)(nil)

// ReadDirTar implements sandbox.Archiver.
func (s *Session) ReadDirTar(ctx context.Context, dir string, w io.Writer) error {
	sp, err := s.prep(ctx, dir)
	if err != nil {
		return err
	}
	resp, err := s.c.do(ctx, http.MethodGet, "/cove/tar", url.Values{"path": {sp}}, nil, http.Header{ConfineHeader: {s.opts.Root}})
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if _, err := io.Copy(w, resp.Body); err != nil {
		return wireError(err)
	}
	return nil
}

// WriteDirTar implements sandbox.Archiver.
func (s *Session) WriteDirTar(ctx context.Context, dir string, r io.Reader) error {
	sp, err := s.prep(ctx, dir)
	if err != nil {
		return err
	}
	resp, err := s.c.do(ctx, http.MethodPost, "/cove/tar", url.Values{"path": {sp}}, io.NopCloser(r),
		http.Header{"Content-Type": {"application/x-tar"}, ConfineHeader: {s.opts.Root}})
	if err != nil {
		return err
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return nil
}

func (s *Session) DialPort(ctx context.Context, port int) (net.Conn, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.c.DialPort(ctx, port)
}

var _ Endpointer = (*Session)(nil)

// Endpoint implements Endpointer: the address and access token of the
// session's daemon.
func (s *Session) Endpoint() (addr, token string) { return s.c.Endpoint() }

// DialDaemon implements DaemonDialer.
func (s *Session) DialDaemon(ctx context.Context) (net.Conn, error) { return s.c.DialDaemon(ctx) }

func fileInfo(e *fspb.EntryInfo) sandbox.FileInfo {
	fi := sandbox.FileInfo{
		Name: e.GetName(), Path: e.GetPath(), Size: e.GetSize(), Mode: e.GetMode() & 0o7777,
		Owner: e.GetOwner(), Group: e.GetGroup(), SymlinkTarget: e.GetSymlinkTarget(),
	}
	if e.ModifiedTime != nil {
		fi.ModTime = e.ModifiedTime.AsTime()
	}
	// envd reports a symlink with its target's type; symlink_target is
	// what marks it.
	switch {
	case e.SymlinkTarget != nil || e.GetType() == fspb.FileType_FILE_TYPE_SYMLINK:
		fi.Type = sandbox.TypeSymlink
	case e.GetType() == fspb.FileType_FILE_TYPE_DIRECTORY:
		fi.Type = sandbox.TypeDir
	default:
		fi.Type = sandbox.TypeFile
	}
	return fi
}

// process is a sandbox.Process over the daemon's process service.
type process struct {
	s      *Session
	tag    string
	hasPTY bool
	stdout io.Writer
	stderr io.Writer

	// mu guards the fields below.
	mu       sync.Mutex
	pid      int
	streamID string             // the current stream's StreamHeader id
	cancel   context.CancelFunc // ends the current stream
	detached bool
	// pumped is closed when the current stream's pump has stopped
	// delivering output.
	pumped chan struct{}
	status *sandbox.ExitStatus
	err    error
	done   chan struct{} // closed when the end event (or a final error) arrives
}

func newProcess(s *Session, tag string, hasPTY bool, stdout, stderr io.Writer, cancel context.CancelFunc) *process {
	if stdout == nil {
		stdout = io.Discard
	}
	if stderr == nil {
		stderr = io.Discard
	}
	return &process{s: s, tag: tag, hasPTY: hasPTY, stdout: stdout, stderr: stderr, cancel: cancel, done: make(chan struct{})}
}

// first reads the first event (the start, carrying the pid) under ctx:
// if ctx ends first, the stream is cancelled.
func (p *process) first(ctx context.Context, stream *procEventStream) error {
	p.mu.Lock()
	cancel := p.cancel
	p.mu.Unlock()
	pid, err := readStart(ctx, stream, cancel)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.pid = pid
	p.mu.Unlock()
	return nil
}

// readStart reads a stream's first event, the start, under ctx, and
// returns its pid; if ctx ends first, cancel ends the stream. On an error
// the stream is closed.
func readStart(ctx context.Context, stream *procEventStream, cancel context.CancelFunc) (int, error) {
	stop := context.AfterFunc(ctx, cancel)
	ok := stream.Receive()
	if !stop() {
		stream.Close()
		return 0, ctx.Err()
	}
	if !ok {
		stream.Close()
		err := stream.Err()
		if err == nil {
			err = fmt.Errorf("the sandbox daemon closed the stream before the process started: %w", sandbox.ErrUnavailable)
		}
		return 0, wireError(err)
	}
	st := stream.Msg().GetStart()
	if st == nil {
		stream.Close()
		return 0, fmt.Errorf("the sandbox daemon sent %T before the start event: %w", stream.Msg().GetEvent(), sandbox.ErrUnavailable)
	}
	return int(st.Pid), nil
}

// goPump delivers the rest of the stream in the background.
func (p *process) goPump(stream *procEventStream) {
	pumped := make(chan struct{})
	p.mu.Lock()
	p.pumped = pumped
	p.mu.Unlock()
	go func() {
		defer close(pumped)
		p.pump(context.Background(), stream)
	}()
}

// pump delivers output until the end event. If the stream breaks while
// the handle is attached and ctx has not ended (the stream's own context
// ends with ctx), it reconnects by pid and goes on from the output not yet
// delivered.
func (p *process) pump(ctx context.Context, stream *procEventStream) {
	for stream.Receive() {
		if p.handle(stream.Msg()) {
			// The end-of-stream envelope follows the end event at once;
			// reading it lets Close keep the connection for the next
			// exec instead of dialing the daemon again.
			stream.Receive()
			stream.Close()
			return
		}
	}
	stream.Close()
	p.mu.Lock()
	detached := p.detached
	p.mu.Unlock()
	if detached || ctx.Err() != nil {
		return
	}
	err := stream.Err()
	if err == nil {
		err = errors.New("the stream ended without an end event")
	}
	// Reconnect: the daemon may have restarted the connection.
	if rerr := p.reconnect(); rerr != nil {
		p.finish(nil, fmt.Errorf("lost the output stream of process %d (%v) and could not reattach: %w", p.PID(), err, rerr))
	}
}

func (p *process) reconnect() error {
	backoff := 50 * time.Millisecond
	deadline := time.Now().Add(10 * time.Second)
	for {
		ctx, cancel := context.WithTimeout(context.Background(), time.Second)
		// A sandbox that was stopped has ended its processes: no point
		// in waiting for a daemon that will not come back by itself.
		err := p.s.check(ctx)
		if err == nil {
			err = p.connect(ctx)
		}
		cancel()
		if err == nil || errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrState) || time.Now().After(deadline) {
			return err
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// connect opens a Connect stream by pid or tag and pumps it.
func (p *process) connect(ctx context.Context) error {
	sel := &pb.ProcessSelector{}
	if p.tag != "" {
		sel.Selector = &pb.ProcessSelector_Tag{Tag: p.tag}
	} else {
		sel.Selector = &pb.ProcessSelector_Pid{Pid: uint32(p.PID())}
	}
	sctx, cancel := context.WithCancel(context.Background())
	streamID := newStreamID()
	stream, err := p.s.c.openStream(sctx, processconnect.ProcessConnectProcedure, &pb.ConnectRequest{Process: sel},
		http.Header{ConfineHeader: {p.s.opts.Root}, StreamHeader: {streamID}})
	if err != nil {
		cancel()
		return wireError(err)
	}
	p.mu.Lock()
	p.cancel = cancel
	p.streamID = streamID
	p.detached = false
	p.mu.Unlock()
	if err := p.first(ctx, stream); err != nil {
		cancel()
		return err
	}
	p.goPump(stream)
	return nil
}

// handle processes one event; it reports true at the end.
func (p *process) handle(ev *pb.ProcessEvent) bool {
	switch e := ev.GetEvent().(type) {
	case *pb.ProcessEvent_Data:
		switch d := e.Data.GetOutput().(type) {
		case *pb.ProcessEvent_DataEvent_Stdout:
			p.stdout.Write(d.Stdout)
		case *pb.ProcessEvent_DataEvent_Stderr:
			p.stderr.Write(d.Stderr)
		case *pb.ProcessEvent_DataEvent_Pty:
			p.stdout.Write(d.Pty)
		}
	case *pb.ProcessEvent_End:
		p.finish(exitStatus(e.End), nil)
		return true
	}
	return false
}

func exitStatus(end *pb.ProcessEvent_EndEvent) *sandbox.ExitStatus {
	st := &sandbox.ExitStatus{Code: int(end.ExitCode), Error: end.GetError()}
	if !end.Exited {
		st.Code = -1
		switch {
		case end.Status == "oom: killed":
			st.OOM, st.Signal = true, "killed"
		case len(end.Status) > len("signal: "):
			st.Signal = end.Status[len("signal: "):]
		default:
			st.Signal = "unknown"
		}
	}
	return st
}

func (p *process) finish(st *sandbox.ExitStatus, err error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	select {
	case <-p.done:
		return
	default:
	}
	p.status, p.err = st, err
	close(p.done)
}

func (p *process) PID() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.pid
}

func (p *process) Tag() string { return p.tag }

func (p *process) Wait(ctx context.Context) (sandbox.ExitStatus, error) {
	p.mu.Lock()
	detached := p.detached
	p.mu.Unlock()
	if detached {
		return sandbox.ExitStatus{}, fmt.Errorf("process %d: this handle is detached; Attach again to wait: %w", p.PID(), sandbox.ErrState)
	}
	select {
	case <-p.done:
		p.mu.Lock()
		defer p.mu.Unlock()
		if p.err != nil {
			return sandbox.ExitStatus{}, p.err
		}
		return *p.status, nil
	case <-ctx.Done():
		return sandbox.ExitStatus{}, ctx.Err()
	}
}

func (p *process) selector() *pb.ProcessSelector {
	return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: uint32(p.PID())}}
}

func (p *process) Write(ctx context.Context, b []byte) error {
	return p.s.sendInput(ctx, p.selector(), b, p.hasPTY)
}

func (p *process) CloseStdin(ctx context.Context) error {
	return p.s.closeStdin(ctx, p.selector())
}

func (p *process) Signal(ctx context.Context, sig sandbox.Signal) error {
	return p.s.signal(ctx, p.selector(), sig)
}

func (p *process) Resize(ctx context.Context, size sandbox.PTYSize) error {
	_, err := p.s.c.Process.Update(ctx, req(p.s, &pb.UpdateRequest{
		Process: p.selector(), Pty: &pb.PTY{Size: &pb.PTY_Size{Cols: uint32(size.Cols), Rows: uint32(size.Rows)}},
	}))
	if err != nil && errors.Is(wireError(err), sandbox.ErrState) {
		return fmt.Errorf("process %d has no PTY: %w", p.PID(), sandbox.ErrInvalid)
	}
	return wireError(err)
}

func (p *process) Detach() error {
	p.mu.Lock()
	p.detached = true
	cancel, id, pumped := p.cancel, p.streamID, p.pumped
	p.mu.Unlock()
	var err error
	if id != "" {
		// Detach on the daemon first, so output from now on waits for the
		// next Attach instead of racing into this closing stream.
		ctx, stop := context.WithTimeout(context.Background(), 10*time.Second)
		var resp *http.Response
		resp, err = p.s.c.do(ctx, http.MethodPost, "/cove/detach", url.Values{"stream": {id}}, nil, nil)
		stop()
		if err == nil {
			resp.Body.Close()
			// The daemon has ended the stream; what it sent before is
			// still on its way. Deliver it before returning, or it is
			// lost: the daemon counts it sent, so no Attach resends it.
			if pumped != nil {
				select {
				case <-pumped:
				case <-time.After(5 * time.Second):
				}
			}
		}
	}
	if cancel != nil {
		cancel()
	}
	if err != nil {
		return fmt.Errorf("detaching from process %d: %w", p.PID(), err)
	}
	return nil
}

func newStreamID() string {
	var b [12]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// RuntimeSessionOptions builds the options of a session for a runtime
// that keeps each sandbox's state itself: Info comes from load, and every
// call first checks that the sandbox is running, telling the caller how
// to resume it if not.
func RuntimeSessionOptions(id, root string, load func(ctx context.Context) (sandbox.Info, error), resumeHint string) SessionOptions {
	return SessionOptions{
		ID:   id,
		Root: root,
		Info: load,
		Check: func(ctx context.Context) error {
			info, err := load(ctx)
			if err != nil {
				return err
			}
			if info.State != sandbox.StateRunning {
				return fmt.Errorf("sandbox %q is %s; resume it first%s: %w", id, info.State, resumeHint, sandbox.ErrState)
			}
			return nil
		},
	}
}

// Close releases the session's connections to the daemon (the sandbox
// keeps running). The session must not be used after.
func (s *Session) Close() error { return s.c.Close() }
