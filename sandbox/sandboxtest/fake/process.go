package fake

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"syscall"

	"github.com/cove-sandbox/cove/sandbox"
)

// fakeProcess is one run of a scripted program.
type fakeProcess struct {
	s     *Session
	pid   int
	tag   string
	info  sandbox.ProcessInfo
	pty   bool
	stdin *stdinPipe
	out   *output
	ctx   context.Context // ends when a fatal signal is delivered
	kill  context.CancelCauseFunc
	done  chan struct{} // closed once status is set and output delivered
	once  sync.Once     // ends the process: by run, or by watch on a signal

	mu      sync.Mutex // guards the fields below
	status  sandbox.ExitStatus
	ptySize sandbox.PTYSize
}

// signalCause is the cancel cause of a process killed by a signal.
type signalCause struct{ sig sandbox.Signal }

func (c signalCause) Error() string { return syscall.Signal(c.sig).String() }

// deliver sends sig to the process: every signal whose default action
// ends a process ends it (a no-op once it has ended); the others are
// ignored, as the fake has no job control.
func (p *fakeProcess) deliver(sig sandbox.Signal) {
	switch syscall.Signal(sig) {
	case 0, syscall.SIGCHLD, syscall.SIGCONT, syscall.SIGURG, syscall.SIGWINCH,
		syscall.SIGSTOP, syscall.SIGTSTP, syscall.SIGTTIN, syscall.SIGTTOU:
		return
	}
	p.kill(signalCause{sig})
}

func (p *fakeProcess) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Exec runs a scripted command to completion.
func (s *Session) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	p, _, err := s.start(ctx, req)
	if err != nil {
		return sandbox.ExitStatus{}, fmt.Errorf("running %q: %w", req.Cmd, err)
	}
	select {
	case <-p.done:
	case <-ctx.Done():
		p.deliver(sandbox.SIGKILL)
		<-p.done
		return sandbox.ExitStatus{}, ctx.Err()
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.status, nil
}

// Start runs a scripted command in the background.
func (s *Session) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	p, att, err := s.start(ctx, req)
	if err != nil {
		return nil, fmt.Errorf("starting %q: %w", req.Cmd, err)
	}
	return &fakeHandle{p: p, att: att}, nil
}

// start checks a request in the order a real runtime fails it (a bad
// request, a stopped sandbox, a bad directory, then a missing program),
// registers the process and runs its program.
func (s *Session) start(ctx context.Context, req sandbox.ExecRequest) (*fakeProcess, *attachment, error) {
	if err := ctx.Err(); err != nil {
		return nil, nil, err
	}
	argv, err := commandLine(req)
	if err != nil {
		return nil, nil, err
	}
	if err := checkEnv(req.Env); err != nil {
		return nil, nil, err
	}
	if req.Timeout < 0 || req.Timeout > sandbox.MaxTimeout {
		return nil, nil, fmt.Errorf("timeout %v: give a positive duration up to %v, or 0 for none: %w", req.Timeout, sandbox.MaxTimeout, sandbox.ErrInvalid)
	}
	if err := s.lock(ctx); err != nil {
		return nil, nil, err
	}
	p, pr, prog, err := s.newProcessLocked(req, argv)
	s.mu.Unlock()
	if err != nil {
		return nil, nil, err
	}
	att := &attachment{stdout: req.Stdout, stderr: req.Stderr}
	p.out.attach(att)
	switch {
	case req.Stdin != nil:
		go p.stdin.copyFrom(req.Stdin, !req.OpenStdin)
	case !req.OpenStdin && req.PTY == nil:
		p.stdin.close()
	}
	go p.run(prog, pr)
	p.killAfter(req.Timeout)
	go p.watch()
	return p, att, nil
}

// newProcessLocked makes and registers the process req asks for, with
// the Proc its program sees; s.mu is held.
func (s *Session) newProcessLocked(req sandbox.ExecRequest, argv []string) (*fakeProcess, *Proc, Program, error) {
	dir := s.root
	if req.Dir != "" {
		r, err := s.resolve(req.Dir, true)
		if err != nil {
			return nil, nil, nil, fmt.Errorf("working directory: %w", err)
		}
		if n := s.files[r]; n == nil || n.typ != sandbox.TypeDir {
			return nil, nil, nil, fmt.Errorf("working directory %q is not a directory: %w", req.Dir, sandbox.ErrInvalid)
		}
		dir = r
	}
	if req.Tag != "" {
		for _, q := range s.procs {
			if q.tag == req.Tag {
				return nil, nil, nil, fmt.Errorf("process tag %q is in use by pid %d: %w", req.Tag, q.pid, sandbox.ErrExist)
			}
		}
	}
	if limit := s.spec.Limits.Pids; limit > 0 && len(s.procs) >= limit {
		return nil, nil, nil, fmt.Errorf("the sandbox's %d-process limit is reached: %w", limit, sandbox.ErrLimit)
	}
	prog, err := s.rt.program(argv[0])
	if err != nil {
		return nil, nil, nil, err
	}
	pid := s.nextPID
	s.nextPID++
	env := map[string]string{"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": s.root}
	maps.Copy(env, s.spec.Env)
	maps.Copy(env, req.Env)
	env["PWD"] = dir
	user := cmp.Or(req.User, s.spec.User, "user")
	pctx, kill := context.WithCancelCause(context.Background())
	bufSize := s.rt.OutputBuffer
	if bufSize <= 0 {
		bufSize = DefaultOutputBuffer
	}
	p := &fakeProcess{
		s:   s,
		pid: pid,
		tag: req.Tag,
		info: sandbox.ProcessInfo{
			PID: pid, Tag: req.Tag, Cmd: req.Cmd, Args: slices.Clone(req.Args),
			Env: maps.Clone(req.Env), Dir: dir,
		},
		pty:   req.PTY != nil,
		stdin: newStdinPipe(req.PTY != nil),
		out:   &output{max: bufSize, pty: req.PTY != nil},
		ctx:   pctx,
		kill:  kill,
		done:  make(chan struct{}),
	}
	if req.PTY != nil {
		p.ptySize = *req.PTY
	}
	s.procs[pid] = p
	pr := &Proc{
		Args: argv, Dir: dir, Env: env, User: user,
		Stdin:   procStdin{p.stdin, pctx},
		Stdout:  streamWriter{p.out, 1, pctx},
		Stderr:  streamWriter{p.out, 2, pctx},
		Session: s,
	}
	return p, pr, prog, nil
}

// run runs the program and ends the process with its exit code, unless a
// signal ended it first.
func (p *fakeProcess) run(prog Program, pr *Proc) {
	code := prog(p.ctx, pr)
	p.finish(sandbox.ExitStatus{Code: code})
}

// watch ends the process as soon as a signal kills it, whether or not its
// program notices: a scripted program need not watch its context.
func (p *fakeProcess) watch() {
	<-p.ctx.Done()
	var sc signalCause
	if errors.As(context.Cause(p.ctx), &sc) {
		p.finish(sandbox.ExitStatus{})
	}
}

// finish ends the process once: with the killing signal's status if a
// signal killed it, else with status. Output after this is dropped.
func (p *fakeProcess) finish(status sandbox.ExitStatus) {
	var sc signalCause
	if errors.As(context.Cause(p.ctx), &sc) {
		status = sandbox.ExitStatus{Code: -1, Signal: syscall.Signal(sc.sig).String()}
	}
	p.once.Do(func() {
		p.out.close()
		if n := p.out.droppedBytes(); n > 0 {
			status.Error = fmt.Sprintf("%d bytes of output were dropped while no reader was attached", n)
		}
		p.stdin.broken()
		p.s.processEnded(p)
		p.mu.Lock()
		p.status = status
		p.mu.Unlock()
		p.kill(errExited)
		close(p.done)
	})
}

var errExited = errors.New("process exited")

// processEnded moves p from the running table to the recently ended list, unless
// Stop already cleared it.
func (s *Session) processEnded(p *fakeProcess) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.procs[p.pid] != p {
		return
	}
	delete(s.procs, p.pid)
	s.ended = append(s.ended, p)
	if len(s.ended) > maxEnded {
		s.ended = slices.Delete(s.ended, 0, len(s.ended)-maxEnded)
	}
}

// commandLine returns the argv a request runs.
func commandLine(req sandbox.ExecRequest) ([]string, error) {
	if strings.TrimSpace(req.Cmd) == "" {
		return nil, fmt.Errorf("empty command: %w", sandbox.ErrInvalid)
	}
	if strings.IndexByte(req.Cmd, 0) >= 0 {
		return nil, fmt.Errorf("command contains a NUL byte: %w", sandbox.ErrInvalid)
	}
	if req.Shell {
		return append([]string{"sh", "-c", req.Cmd}, req.Args...), nil
	}
	return append([]string{req.Cmd}, req.Args...), nil
}

// Attach reattaches to a running or recently ended process.
func (s *Session) Attach(ctx context.Context, sel sandbox.ProcessSelector, stdout, stderr io.Writer) (sandbox.Process, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("attaching: %w", err)
	}
	p := s.findLocked(sel)
	s.mu.Unlock()
	if p == nil {
		if sel.Tag == "" && sel.PID == 0 {
			return nil, fmt.Errorf("attaching: no pid or tag given: %w", sandbox.ErrInvalid)
		}
		return nil, fmt.Errorf("attaching to %s: %w", selString(sel), sandbox.ErrNotFound)
	}
	att := &attachment{stdout: stdout, stderr: stderr}
	p.out.attach(att)
	return &fakeHandle{p: p, att: att}, nil
}

func selString(sel sandbox.ProcessSelector) string {
	if sel.Tag != "" {
		return fmt.Sprintf("process tagged %q", sel.Tag)
	}
	return fmt.Sprintf("pid %d", sel.PID)
}

// findLocked finds a process by tag (running first, then the most
// recently ended) or pid; s.mu is held.
func (s *Session) findLocked(sel sandbox.ProcessSelector) *fakeProcess {
	match := func(p *fakeProcess) bool {
		if sel.Tag != "" {
			return p.tag == sel.Tag
		}
		return sel.PID != 0 && p.pid == sel.PID
	}
	for _, p := range s.procs {
		if match(p) {
			return p
		}
	}
	for i := len(s.ended) - 1; i >= 0; i-- {
		if match(s.ended[i]) {
			return s.ended[i]
		}
	}
	return nil
}

// Processes lists the running processes by pid.
func (s *Session) Processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("listing processes: %w", err)
	}
	defer s.mu.Unlock()
	out := make([]sandbox.ProcessInfo, 0, len(s.procs))
	for _, p := range s.procs {
		info := p.info
		info.Args = slices.Clone(info.Args)
		info.Env = maps.Clone(info.Env)
		out = append(out, info)
	}
	slices.SortFunc(out, func(a, b sandbox.ProcessInfo) int { return a.PID - b.PID })
	return out, nil
}

// fakeHandle is one caller's handle on a process: Start's, or Attach's.
type fakeHandle struct {
	p   *fakeProcess
	att *attachment
}

func (h *fakeHandle) PID() int    { return h.p.pid }
func (h *fakeHandle) Tag() string { return h.p.tag }

func (h *fakeHandle) Wait(ctx context.Context) (sandbox.ExitStatus, error) {
	select {
	case <-h.p.done:
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		return h.p.status, nil
	case <-ctx.Done():
		return sandbox.ExitStatus{}, ctx.Err()
	}
}

func (h *fakeHandle) Write(ctx context.Context, b []byte) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if h.p.ended() {
		return fmt.Errorf("writing to pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	if err := h.p.stdin.write(b); err != nil {
		return fmt.Errorf("writing to pid %d: %w", h.p.pid, err)
	}
	return nil
}

// CloseStdin signals EOF; on a PTY it does what sending 0x04 does.
func (h *fakeHandle) CloseStdin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if h.p.ended() {
		return fmt.Errorf("closing stdin of pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	h.p.stdin.close()
	return nil
}

// Signal delivers sig. SIGKILL, SIGTERM, SIGINT and every other signal
// whose default action ends a process end the fake process; a signal to a
// process that has ended is ErrState.
func (h *fakeHandle) Signal(ctx context.Context, sig sandbox.Signal) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if sig < 0 || sig > 64 {
		return fmt.Errorf("signalling pid %d: no signal %d: %w", h.p.pid, sig, sandbox.ErrInvalid)
	}
	if h.p.ended() {
		return fmt.Errorf("signalling pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	h.p.deliver(sig)
	return nil
}

func (h *fakeHandle) Resize(ctx context.Context, size sandbox.PTYSize) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if !h.p.pty {
		return fmt.Errorf("resizing pid %d: it has no PTY: %w", h.p.pid, sandbox.ErrInvalid)
	}
	if h.p.ended() {
		return fmt.Errorf("resizing pid %d: process has ended: %w", h.p.pid, sandbox.ErrState)
	}
	h.p.mu.Lock()
	h.p.ptySize = size
	h.p.mu.Unlock()
	return nil
}

// Detach stops delivering output to this handle; with no other handle
// attached, output is buffered for the next Attach. Detaching twice is
// not an error.
func (h *fakeHandle) Detach() error {
	h.p.out.detach(h.att)
	return nil
}

// attachment is where one handle's output goes; nil writers discard.
type attachment struct {
	stdout, stderr io.Writer
}

// output fans a process's output out to the attached handles, or buffers
// it (bounded, oldest dropped) while none is attached.
type output struct {
	max int
	pty bool // stderr goes to stdout

	mu      sync.Mutex // guards the fields below; held while writing out
	atts    []*attachment
	buf     []chunk
	size    int
	dropped int64
	closed  bool // the process has ended: later writes are dropped
}

type chunk struct {
	stream int // 1 stdout, 2 stderr
	data   []byte
}

func (o *output) write(stream int, p []byte) {
	if o.pty {
		stream = 1
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.closed {
		return
	}
	if len(o.atts) == 0 {
		o.buffer(stream, p)
		return
	}
	for _, a := range o.atts {
		a.write(stream, p)
	}
}

func (a *attachment) write(stream int, p []byte) {
	w := a.stdout
	if stream == 2 {
		w = a.stderr
	}
	if w != nil {
		w.Write(p) // a failing reader loses output, as a closed pipe would
	}
}

// buffer keeps p, dropping the oldest output beyond max; o.mu is held.
func (o *output) buffer(stream int, p []byte) {
	if len(p) > o.max {
		o.dropped += int64(len(p) - o.max)
		p = p[len(p)-o.max:]
	}
	o.buf = append(o.buf, chunk{stream, bytes.Clone(p)})
	o.size += len(p)
	for o.size > o.max {
		excess := o.size - o.max
		if c := &o.buf[0]; len(c.data) > excess {
			c.data = c.data[excess:]
			o.size -= excess
			o.dropped += int64(excess)
		} else {
			o.size -= len(c.data)
			o.dropped += int64(len(c.data))
			o.buf = o.buf[1:]
		}
	}
}

// attach delivers the buffered output to a and adds it to the readers.
func (o *output) attach(a *attachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, c := range o.buf {
		a.write(c.stream, c.data)
	}
	o.buf, o.size = nil, 0
	o.atts = append(o.atts, a)
}

func (o *output) detach(a *attachment) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.atts = slices.DeleteFunc(o.atts, func(x *attachment) bool { return x == a })
}

// close drops every later write: a killed program's goroutine may still
// be writing when its process has ended.
func (o *output) close() {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.closed = true
}

func (o *output) droppedBytes() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.dropped
}

// streamWriter is a process's stdout or stderr. Writes fail once the
// process has been killed, which stops a program that writes in a loop.
type streamWriter struct {
	o      *output
	stream int
	ctx    context.Context
}

func (w streamWriter) Write(p []byte) (int, error) {
	if err := w.ctx.Err(); err != nil {
		return 0, err
	}
	w.o.write(w.stream, p)
	return len(p), nil
}

// stdinPipe is a process's standard input: bytes written by Process.Write
// or copied from ExecRequest.Stdin, read by the program.
type stdinPipe struct {
	pty    bool
	notify chan struct{} // a token when data or EOF arrives

	mu     sync.Mutex // guards the fields below
	buf    []byte
	eof    bool // no more input after buf
	closed bool // the process has ended: writes fail
}

func newStdinPipe(pty bool) *stdinPipe {
	return &stdinPipe{pty: pty, notify: make(chan struct{}, 1)}
}

func (p *stdinPipe) wake() {
	select {
	case p.notify <- struct{}{}:
	default:
	}
}

func (p *stdinPipe) write(b []byte) error {
	p.mu.Lock()
	defer p.mu.Unlock()
	switch {
	case p.closed:
		return fmt.Errorf("process has ended: %w", sandbox.ErrState)
	case p.eof:
		return fmt.Errorf("stdin is closed: %w", sandbox.ErrState)
	case len(p.buf)+len(b) > maxStdinBytes:
		return fmt.Errorf("more than %d bytes of unread input: %w", maxStdinBytes, sandbox.ErrLimit)
	}
	if i := bytes.IndexByte(b, 0x04); p.pty && i >= 0 {
		b, p.eof = b[:i], true // ^D on a terminal: end of input
	}
	p.buf = append(p.buf, b...)
	p.wake()
	return nil
}

func (p *stdinPipe) close() {
	p.mu.Lock()
	p.eof = true
	p.mu.Unlock()
	p.wake()
}

// broken makes further writes fail: the reader is gone.
func (p *stdinPipe) broken() {
	p.mu.Lock()
	p.closed = true
	p.mu.Unlock()
}

// copyFrom copies r into the pipe, then closes it when closeAfter is set.
func (p *stdinPipe) copyFrom(r io.Reader, closeAfter bool) {
	buf := make([]byte, 32<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			p.mu.Lock()
			closed := p.closed
			if !closed {
				p.buf = append(p.buf, buf[:n]...)
			}
			p.mu.Unlock()
			if closed {
				return
			}
			p.wake()
		}
		if err != nil {
			break
		}
	}
	if closeAfter {
		p.close()
	}
}

// procStdin reads a stdinPipe, giving up when the process is killed.
type procStdin struct {
	p   *stdinPipe
	ctx context.Context
}

func (r procStdin) Read(b []byte) (int, error) {
	for {
		r.p.mu.Lock()
		if len(r.p.buf) > 0 {
			n := copy(b, r.p.buf)
			r.p.buf = r.p.buf[n:]
			r.p.mu.Unlock()
			return n, nil
		}
		eof := r.p.eof
		r.p.mu.Unlock()
		if eof {
			return 0, io.EOF
		}
		select {
		case <-r.p.notify:
		case <-r.ctx.Done():
			return 0, r.ctx.Err()
		}
	}
}
