package server

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coder/websocket"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/fleet"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/tarball"
	"github.com/cove-sandbox/cove/server/internal/web"
)

// ioRoutes: what runs and moves inside a sandbox: exec streams, background
// processes, a PTY over WebSocket, files and directory tars.
func (s *Server) ioRoutes() {
	s.handle("POST /v1/sandboxes/{id}/exec", s.exec)
	s.handle("GET /v1/sandboxes/{id}/pty", s.pty)
	s.handle("GET /v1/sandboxes/{id}/processes", s.listProcesses)
	// A process is named by pid, or by the tag it was started with under
	// its own prefix, so a numeric tag is never taken for a pid.
	for _, p := range []string{"/v1/sandboxes/{id}/processes/{pid}", "/v1/sandboxes/{id}/processes/tag/{tag}"} {
		s.handle("POST "+p+"/attach", s.attach)
		s.handle("POST "+p+"/signal", s.signal)
		s.handle("POST "+p+"/stdin", s.stdin)
		s.handle("POST "+p+"/stdin/close", s.closeStdin)
	}
	s.handle("GET /v1/sandboxes/{id}/files", s.readFile)
	s.handle("PUT /v1/sandboxes/{id}/files", s.writeFile)
	s.handle("DELETE /v1/sandboxes/{id}/files", s.removeFile)
	s.handle("GET /v1/sandboxes/{id}/files/stat", s.statFile)
	s.handle("GET /v1/sandboxes/{id}/files/list", s.listFiles)
	s.handle("POST /v1/sandboxes/{id}/files/mkdir", s.mkdir)
	s.handle("POST /v1/sandboxes/{id}/files/move", s.move)
	s.handle("GET /v1/sandboxes/{id}/tar", s.readTar)
	s.handle("PUT /v1/sandboxes/{id}/tar", s.writeTar)
}

// killTimeout bounds the kill of a process whose client left.
const killTimeout = 5 * time.Second

// ---- exec and attach streams ----

func (s *Server) exec(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.Exec
	if !s.decode(w, r, &req) {
		return
	}
	// Reading the body to its end lets the server notice a client that
	// hangs up, which cancels the request's context and so the process.
	io.Copy(io.Discard, r.Body)
	if req.Cmd == "" {
		s.fail(w, r, invalid("cmd: give the program to run (or a command line with shell: true)"))
		return
	}
	timeout, err := seconds("timeout_seconds", req.TimeoutSeconds, s.fleet.MaxTTL())
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rec, sess, end, ok := s.inUse(w, r, c)
	if !ok {
		return
	}
	defer end()
	started, failed := time.Now(), true
	defer func() { s.metrics.Exec(time.Since(started), failed) }()
	xr := sandbox.ExecRequest{
		Cmd: req.Cmd, Args: req.Args, Shell: req.Shell, Dir: req.Dir, Env: req.Env, User: req.User, Tag: req.Tag,
	}
	switch {
	case req.Stdin != nil:
		xr.Stdin = bytes.NewReader(req.Stdin)
		s.countIn(rec.ID, int64(len(req.Stdin)))
	case req.Background:
		// A background process reads what POST .../stdin sends; a
		// foreground one with no stdin reads EOF, as under a shell with
		// </dev/null, so `cat` does not hang.
		xr.OpenStdin = true
	}
	if req.Background {
		failed = !s.execBackground(w, r, rec.ID, sess, xr, timeout)
		return
	}
	es := web.NewEventStream(w, func(n int64) { s.countOut(rec.ID, n) })
	defer es.Close()
	xr.Stdout, xr.Stderr = es.Output("stdout"), es.Output("stderr")
	proc, err := sess.Start(r.Context(), xr)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	if timeout > 0 {
		t := time.AfterFunc(timeout, func() {
			es.TimedOut.Store(true)
			kill(proc)
		})
		defer t.Stop()
	}
	es.Start(proc.PID())
	wctx, stopWait := s.streamContext(r.Context())
	defer stopWait()
	st, err := proc.Wait(wctx)
	switch {
	case s.closing() && r.Context().Err() == nil && wctx.Err() != nil:
		// The server is stopping: say so rather than cut the stream.
		kill(proc)
		es.Fail(api.CodeUnavailable, "the server is shutting down, so the command was stopped; run it again once it is back")
	case r.Context().Err() != nil:
		// The client left: a foreground process does not outlive its
		// stream.
		kill(proc)
	case err != nil:
		kill(proc)
		es.Fail(s.public(r, err))
	default:
		es.Exit(st)
		failed = false
	}
}

// execBackground starts a background process detached, so its output
// waits in the sandbox for an attach, and answers with the start event
// alone. The server keeps nothing of the process, its timeout included
// (the sandbox enforces it): attach, signal and stdin reach it by pid or
// tag through the session, from this server or another. It reports
// whether the process started.
func (s *Server) execBackground(w http.ResponseWriter, r *http.Request, id string, sess sandbox.Session, xr sandbox.ExecRequest, timeout time.Duration) bool {
	xr.Timeout = timeout
	pid, err := sess.StartDetached(r.Context(), xr)
	if err != nil {
		s.fail(w, r, err)
		return false
	}
	es := web.NewEventStream(w, func(n int64) { s.countOut(id, n) })
	defer es.Close()
	es.Start(pid)
	return true
}

func (s *Server) attach(w http.ResponseWriter, r *http.Request, c *caller) {
	sel, err := selector(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rec, sess, end, ok := s.inUse(w, r, c)
	if !ok {
		return
	}
	defer end()
	es := web.NewEventStream(w, func(n int64) { s.countOut(rec.ID, n) })
	defer es.Close()
	proc, err := sess.Attach(r.Context(), sel, es.Output("stdout"), es.Output("stderr"))
	if err != nil {
		s.fail(w, r, fmt.Errorf("attaching to process %s in sandbox %s: %w", selString(sel), rec.ID, err))
		return
	}
	es.Start(proc.PID())
	wctx, stopWait := s.streamContext(r.Context())
	defer stopWait()
	st, err := proc.Wait(wctx)
	switch {
	case s.closing() && r.Context().Err() == nil && wctx.Err() != nil:
		// The process goes on; its output waits for the next attach.
		proc.Detach()
		es.Fail(api.CodeUnavailable, "the server is shutting down; the process keeps running: attach to it again once the server is back")
	case r.Context().Err() != nil:
		// The client left; the process goes on, its output kept for the
		// next attach.
		proc.Detach()
	case err != nil:
		proc.Detach()
		es.Fail(s.public(r, err))
	default:
		es.Exit(st)
	}
}

func (s *Server) listProcesses(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	ps, err := sess.Processes(r.Context())
	if err != nil {
		s.fail(w, r, sandbox.WrapIDf(rec.ID, err, "listing the processes of sandbox %s", rec.ID))
		return
	}
	out := api.ProcessList{Processes: make([]api.Process, 0, len(ps))}
	for _, p := range ps {
		out.Processes = append(out.Processes, api.Process{PID: p.PID, Tag: p.Tag, Cmd: p.Cmd, Args: p.Args, Dir: p.Dir})
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) signal(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.Signal
	if !s.decode(w, r, &req) {
		return
	}
	sig, err := parseSignal(req.Signal)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	s.withProcess(w, r, c, func(ctx context.Context, sess sandbox.Session, sel sandbox.ProcessSelector) error {
		return sess.Signal(ctx, sel, sig)
	})
}

func (s *Server) stdin(w http.ResponseWriter, r *http.Request, c *caller) {
	if r.ContentLength > s.cfg.MaxUploadBytes {
		s.tooLarge(w, r)
		return
	}
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)}
	s.withProcess(w, r, c, func(ctx context.Context, sess sandbox.Session, sel sandbox.ProcessSelector) error {
		// Only here is the sandbox known to be the caller's.
		defer func() { s.countIn(r.PathValue("id"), body.n) }()
		buf := make([]byte, 64<<10)
		for {
			n, err := body.Read(buf)
			if n > 0 {
				if werr := sess.WriteStdin(ctx, sel, buf[:n]); werr != nil {
					return werr
				}
			}
			if err == io.EOF {
				return nil
			}
			if err != nil {
				return err
			}
		}
	})
}

func (s *Server) closeStdin(w http.ResponseWriter, r *http.Request, c *caller) {
	s.withProcess(w, r, c, func(ctx context.Context, sess sandbox.Session, sel sandbox.ProcessSelector) error {
		return sess.CloseStdin(ctx, sel)
	})
}

// withProcess runs f on the session and the process the path names, and
// answers 204, or the error.
func (s *Server) withProcess(w http.ResponseWriter, r *http.Request, c *caller, f func(context.Context, sandbox.Session, sandbox.ProcessSelector) error) {
	sel, err := selector(r)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rec, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	if err := f(r.Context(), sess, sel); err != nil {
		s.fail(w, r, fmt.Errorf("process %s in sandbox %s: %w", selString(sel), rec.ID, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// selector reads the process a path names: {pid} or tag/{tag}.
func selector(r *http.Request) (sandbox.ProcessSelector, error) {
	if tag := r.PathValue("tag"); tag != "" {
		return sandbox.ProcessSelector{Tag: tag}, nil
	}
	v := r.PathValue("pid")
	pid, err := strconv.Atoi(v)
	if err != nil || pid <= 0 {
		return sandbox.ProcessSelector{}, invalid("process %q: give a pid (a positive number), or name a tagged process as /processes/tag/{tag}/...", v)
	}
	return sandbox.ProcessSelector{PID: pid}, nil
}

func selString(sel sandbox.ProcessSelector) string {
	if sel.Tag != "" {
		return "tagged " + strconv.Quote(sel.Tag)
	}
	return strconv.Itoa(sel.PID)
}

var signalNames = map[string]sandbox.Signal{
	"HUP": sandbox.SIGHUP, "INT": sandbox.SIGINT, "QUIT": sandbox.SIGQUIT, "KILL": sandbox.SIGKILL,
	"USR1": sandbox.SIGUSR1, "USR2": sandbox.SIGUSR2, "TERM": sandbox.SIGTERM,
}

// parseSignal reads a signal name (TERM, SIGTERM, term) or number.
func parseSignal(v string) (sandbox.Signal, error) {
	name := strings.TrimPrefix(strings.ToUpper(strings.TrimSpace(v)), "SIG")
	if sig, ok := signalNames[name]; ok {
		return sig, nil
	}
	if n, err := strconv.Atoi(name); err == nil && n > 0 && n <= 64 {
		return sandbox.Signal(n), nil
	}
	return 0, invalid("signal %q: use TERM, KILL, INT, HUP, QUIT, USR1, USR2 or a signal number", v)
}

// kill ends a process, even when the request that owned it has ended.
func kill(p sandbox.Process) {
	ctx, cancel := context.WithTimeout(context.Background(), killTimeout)
	defer cancel()
	p.Signal(ctx, sandbox.SIGKILL)
}

// public is what a client sees of err: its status, code and message (an
// internal error's cause goes to the log, the client gets the request id).
func (s *Server) public(r *http.Request, err error) (code, msg string) {
	_, code, msg = s.failure(r, err)
	return code, msg
}

// ---- PTY ----

// defaultShell runs when a PTY request names no command: bash when the
// template has it, sh otherwise.
const defaultShell = "command -v bash >/dev/null 2>&1 && exec bash || exec sh"

// pty serves an interactive terminal over a WebSocket. Binary messages
// carry the terminal's bytes both ways; text messages are api.PTYMessage:
// "resize" from the client, "exit" from the server before it closes.
// Authentication is the same header as every endpoint (browsers, which
// cannot set headers on a WebSocket, are not served yet).
func (s *Server) pty(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	cmd := q.Get("cmd")
	if cmd == "" {
		cmd = defaultShell
	}
	size := sandbox.PTYSize{Cols: 80, Rows: 24}
	for _, d := range []struct {
		name string
		v    *uint16
	}{{"cols", &size.Cols}, {"rows", &size.Rows}} {
		if v := q.Get(d.name); v != "" {
			n, err := strconv.Atoi(v)
			if err != nil || n < 1 || n > 1000 {
				s.fail(w, r, invalid("%s: give 1 to 1000", d.name))
				return
			}
			*d.v = uint16(n)
		}
	}
	rec, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	if !strings.EqualFold(r.Header.Get("Upgrade"), "websocket") {
		writeError(w, r, http.StatusUpgradeRequired, api.CodeInvalid, "this endpoint is a WebSocket: connect with a WebSocket client")
		return
	}
	end := s.begin(rec.ID)
	defer end()

	// The process starts before the upgrade so a bad command is a plain
	// HTTP error; its first output waits for the connection.
	ctx, cancel := context.WithCancel(context.WithoutCancel(r.Context()))
	defer cancel()
	out := &wsWriter{ctx: ctx, ready: make(chan struct{}), count: func(n int64) { s.countOut(rec.ID, n) }}
	proc, err := sess.Start(r.Context(), sandbox.ExecRequest{Cmd: cmd, Shell: true, PTY: &size, OpenStdin: true, Stdout: out, Stderr: out})
	if err != nil {
		close(out.ready)
		s.fail(w, r, err)
		return
	}
	conn, err := websocket.Accept(w, r, nil)
	if err != nil {
		close(out.ready)
		kill(proc)
		return
	}
	conn.SetReadLimit(1 << 20)
	out.conn = conn
	close(out.ready)

	readErr := make(chan error, 1)
	go func() { readErr <- s.ptyInput(ctx, conn, proc, rec.ID) }()
	type result struct {
		st  sandbox.ExitStatus
		err error
	}
	done := make(chan result, 1)
	go func() {
		st, err := proc.Wait(ctx)
		done <- result{st, err}
	}()
	select {
	case res := <-done:
		if res.err != nil {
			_, msg := s.public(r, res.err)
			conn.Close(websocket.StatusInternalError, truncate(msg, 120))
			kill(proc)
			return
		}
		code := res.st.Code
		data, _ := json.Marshal(api.PTYMessage{Type: "exit", ExitCode: &code, Signal: res.st.Signal, OOM: res.st.OOM, Error: res.st.Error})
		wctx, wcancel := context.WithTimeout(ctx, 5*time.Second)
		conn.Write(wctx, websocket.MessageText, data)
		wcancel()
		conn.Close(websocket.StatusNormalClosure, "")
	case err := <-readErr:
		// The client hung up or broke the protocol: the terminal's
		// process ends with it.
		kill(proc)
		var ce websocket.CloseError
		if errors.As(err, &ce) {
			conn.Close(websocket.StatusNormalClosure, "")
		} else {
			conn.Close(websocket.StatusUnsupportedData, truncate(err.Error(), 120))
		}
	}
}

// ptyInput copies the client's messages to the process until the
// connection ends or a message is malformed.
func (s *Server) ptyInput(ctx context.Context, conn *websocket.Conn, proc sandbox.Process, id string) error {
	for {
		typ, data, err := conn.Read(ctx)
		if err != nil {
			return err
		}
		s.countIn(id, int64(len(data)))
		if typ == websocket.MessageBinary {
			if err := proc.Write(ctx, data); err != nil && !errors.Is(err, sandbox.ErrState) {
				return err
			}
			continue
		}
		var m api.PTYMessage
		if err := json.Unmarshal(data, &m); err != nil {
			return fmt.Errorf("text messages are JSON: %v", err)
		}
		switch m.Type {
		case "resize":
			if m.Cols == 0 || m.Rows == 0 || m.Cols > 1000 || m.Rows > 1000 {
				return fmt.Errorf("resize: give cols and rows of 1 to 1000")
			}
			if err := proc.Resize(ctx, sandbox.PTYSize{Cols: m.Cols, Rows: m.Rows}); err != nil && !errors.Is(err, sandbox.ErrState) {
				return err
			}
		default:
			return fmt.Errorf("unknown message type %q: send binary messages for input, or {\"type\":\"resize\",...}", m.Type)
		}
	}
}

// wsWriter sends a PTY's output as binary messages once the connection
// is up (or drops it if it never comes).
type wsWriter struct {
	ctx   context.Context
	ready chan struct{}
	conn  *websocket.Conn // set before ready is closed
	count func(int64)
}

func (w *wsWriter) Write(p []byte) (int, error) {
	<-w.ready
	if w.conn == nil {
		return len(p), nil
	}
	if err := w.conn.Write(w.ctx, websocket.MessageBinary, p); err != nil {
		return 0, err
	}
	w.count(int64(len(p)))
	return len(p), nil
}

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n]
}

// ---- files ----

// filePath reads ?path=; "" (the workspace root) only where allowed.
func filePath(r *http.Request, required bool) (string, error) {
	p := r.URL.Query().Get("path")
	if p == "" && required {
		return "", invalid("path: give ?path=, absolute inside the sandbox or relative to the workspace root")
	}
	return p, nil
}

func (s *Server) readFile(w http.ResponseWriter, r *http.Request, c *caller) {
	p, err := filePath(r, true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	rec, sess, end, ok := s.inUse(w, r, c)
	if !ok {
		return
	}
	defer end()
	rc, err := sess.ReadFile(r.Context(), p)
	if err != nil {
		if errors.Is(err, sandbox.ErrInvalid) {
			if fi, serr := sess.Stat(r.Context(), p); serr == nil && fi.Type == sandbox.TypeDir {
				err = invalid("%s is a directory: list it with GET /v1/sandboxes/%s/files/list?path=..., or download it as a tar with GET /v1/sandboxes/%s/tar?path=...", fi.Path, rec.ID, rec.ID)
			}
		}
		s.fail(w, r, err)
		return
	}
	defer rc.Close()
	w.Header().Set("Content-Type", "application/octet-stream")
	s.sendBody(w, r, rec.ID, func(dst io.Writer) error {
		_, err := io.Copy(dst, rc)
		return err
	})
}

// sendBody streams what produce writes as the response. An error before
// the first byte is an error response; after it, the connection is cut so
// the client sees a broken transfer rather than a short file.
func (s *Server) sendBody(w http.ResponseWriter, r *http.Request, id string, produce func(io.Writer) error) {
	http.NewResponseController(w).SetWriteDeadline(time.Time{})
	lw := &lazyWriter{w: w}
	err := produce(lw)
	s.countOut(id, lw.n)
	switch {
	case err == nil && !lw.started:
		w.WriteHeader(http.StatusOK)
	case err == nil, lw.werr != nil:
		// Done, or the client left.
	case !lw.started:
		s.fail(w, r, err)
	default:
		s.log.Warn("response cut short", "request_id", requestID(r), "path", r.URL.Path, "err", err)
		panic(http.ErrAbortHandler)
	}
}

// lazyWriter writes the status on the first byte and remembers the first
// write error (the client's side).
type lazyWriter struct {
	w       http.ResponseWriter
	started bool
	n       int64
	werr    error
}

func (l *lazyWriter) Write(p []byte) (int, error) {
	if l.werr != nil {
		return 0, l.werr
	}
	l.started = true
	n, err := l.w.Write(p)
	l.n += int64(n)
	if err != nil {
		l.werr = err
	}
	return n, err
}

func (s *Server) writeFile(w http.ResponseWriter, r *http.Request, c *caller) {
	p, err := filePath(r, true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	var mode uint32
	if v := r.URL.Query().Get("mode"); v != "" {
		m, err := strconv.ParseUint(v, 8, 32)
		if err != nil || m > 0o7777 {
			s.fail(w, r, invalid("mode %q: give octal permission bits such as 644 or 0755", v))
			return
		}
		mode = uint32(m)
	}
	if r.ContentLength > s.cfg.MaxUploadBytes {
		s.tooLarge(w, r)
		return
	}
	rec, sess, end, ok := s.inUse(w, r, c)
	if !ok {
		return
	}
	defer end()
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)}
	err = sess.WriteFile(r.Context(), p, body, mode)
	s.countIn(rec.ID, body.n)
	var mbe *http.MaxBytesError
	if errors.As(body.err, &mbe) {
		s.tooLarge(w, r)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) tooLarge(w http.ResponseWriter, r *http.Request) {
	writeError(w, r, http.StatusRequestEntityTooLarge, api.CodeTooLarge, fmt.Sprintf("the upload is over this server's limit of %d bytes; nothing was written", s.cfg.MaxUploadBytes))
}

// countingReader counts what is read and keeps the first error, which
// may not survive the runtime's wrapping.
type countingReader struct {
	r   io.Reader
	n   int64
	err error
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	if err != nil && err != io.EOF && c.err == nil {
		c.err = err
	}
	return n, err
}

// fileOp is the shape of the small file calls: the path, the session,
// then 204 or the error.
func (s *Server) fileOp(w http.ResponseWriter, r *http.Request, c *caller, f func(ctx context.Context, sess sandbox.Session, p string) error) {
	p, err := filePath(r, true)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	_, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	if err := f(r.Context(), sess, p); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) removeFile(w http.ResponseWriter, r *http.Request, c *caller) {
	s.fileOp(w, r, c, func(ctx context.Context, sess sandbox.Session, p string) error { return sess.Remove(ctx, p) })
}

func (s *Server) mkdir(w http.ResponseWriter, r *http.Request, c *caller) {
	s.fileOp(w, r, c, func(ctx context.Context, sess sandbox.Session, p string) error { return sess.Mkdir(ctx, p) })
}

func (s *Server) move(w http.ResponseWriter, r *http.Request, c *caller) {
	var req api.Move
	if !s.decode(w, r, &req) {
		return
	}
	if req.From == "" || req.To == "" {
		s.fail(w, r, invalid("give from and to, absolute inside the sandbox or relative to the workspace root"))
		return
	}
	_, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	if err := sess.Move(r.Context(), req.From, req.To); err != nil {
		s.fail(w, r, err)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

func (s *Server) statFile(w http.ResponseWriter, r *http.Request, c *caller) {
	p, err := filePath(r, false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	_, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	fi, err := sess.Stat(r.Context(), p)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, fileView(fi))
}

// maxListDepth bounds a recursive listing.
const maxListDepth = 64

func (s *Server) listFiles(w http.ResponseWriter, r *http.Request, c *caller) {
	p, err := filePath(r, false)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	depth := 1
	if v := r.URL.Query().Get("depth"); v != "" {
		depth, err = strconv.Atoi(v)
		if err != nil || depth < 1 || depth > maxListDepth {
			s.fail(w, r, invalid("depth: give 1 (the directory's children) to %d", maxListDepth))
			return
		}
	}
	_, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	fis, err := sess.List(r.Context(), p, depth)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := api.FileList{Files: make([]api.FileInfo, 0, len(fis))}
	for _, fi := range fis {
		out.Files = append(out.Files, fileView(fi))
	}
	writeJSON(w, http.StatusOK, out)
}

func fileView(fi sandbox.FileInfo) api.FileInfo {
	return api.FileInfo{Name: fi.Name, Path: fi.Path, Type: string(fi.Type), Size: fi.Size, Mode: fi.Mode,
		ModTime: fi.ModTime, Owner: fi.Owner, Group: fi.Group, SymlinkTarget: fi.SymlinkTarget}
}

// ---- tar ----

// tarDir resolves ?path= (default the workspace root) to an absolute
// directory in the sandbox, and whether it is the root.
func tarDir(r *http.Request, root string) (dir string, isRoot bool, err error) {
	if root == "" {
		root = sandbox.DefaultRoot
	}
	dir, err = sandbox.ResolvePath(root, r.URL.Query().Get("path"))
	if err != nil {
		return "", false, err
	}
	return dir, dir == root, nil
}

func (s *Server) readTar(w http.ResponseWriter, r *http.Request, c *caller) {
	rec, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	dir, isRoot, err := tarDir(r, rec.Spec.Root)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	fi, err := sess.Stat(r.Context(), dir)
	if err == nil && fi.Type != sandbox.TypeDir {
		err = invalid("%s is not a directory; read a file with GET /v1/sandboxes/%s/files?path=...", dir, rec.ID)
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	end := s.begin(rec.ID)
	defer end()
	w.Header().Set("Content-Type", "application/x-tar")
	w.Header().Set("Content-Disposition", fmt.Sprintf("attachment; filename=%q", tarFileName(dir)))
	s.sendBody(w, r, rec.ID, func(dst io.Writer) error {
		if isRoot {
			return sess.SnapshotWorkspace(r.Context(), dst)
		}
		return tarball.ReadDir(r.Context(), sess, dir, dst)
	})
}

func tarFileName(dir string) string {
	b := path.Base(dir)
	if b == "/" || b == "." {
		b = "workspace"
	}
	return b + ".tar"
}

func (s *Server) writeTar(w http.ResponseWriter, r *http.Request, c *caller) {
	if r.ContentLength > s.cfg.MaxUploadBytes {
		s.tooLarge(w, r)
		return
	}
	rec, sess, ok := s.session(w, r, c)
	if !ok {
		return
	}
	dir, isRoot, err := tarDir(r, rec.Spec.Root)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	end := s.begin(rec.ID)
	defer end()
	// The whole tar is checked before any of it reaches the sandbox, so
	// a bad member refuses the upload with nothing written.
	body := &countingReader{r: http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes)}
	spool, err := s.spoolTar(body)
	s.countIn(rec.ID, body.n)
	var mbe *http.MaxBytesError
	if errors.As(body.err, &mbe) {
		s.tooLarge(w, r)
		return
	}
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer func() {
		spool.Close()
		os.Remove(spool.Name())
	}()
	if isRoot {
		err = sess.RestoreWorkspace(r.Context(), spool)
	} else {
		err = tarball.WriteDir(r.Context(), sess, dir, spool)
	}
	if err != nil {
		s.fail(w, r, fmt.Errorf("extracting into %s: %w", dir, err))
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// spoolTar copies a tar stream to a temp file, checking every member's
// header on the way; the file is returned at its start.
func (s *Server) spoolTar(body io.Reader) (_ *os.File, err error) {
	dir := s.tempDir()
	fleet.SweepTemps(dir, time.Now())
	f, err := os.CreateTemp(dir, ".tmp-upload-*.tar")
	if err != nil {
		return nil, fmt.Errorf("spooling an upload: %w", err)
	}
	defer func() {
		if err != nil {
			f.Close()
			os.Remove(f.Name())
		}
	}()
	tee := io.TeeReader(body, f)
	tr := tar.NewReader(tee)
	for {
		hdr, err := tr.Next()
		if err == io.EOF {
			break
		}
		if err != nil {
			var pe *os.PathError
			if errors.As(err, &pe) {
				return nil, fmt.Errorf("spooling an upload: %w", err)
			}
			if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, tar.ErrHeader) || strings.HasPrefix(err.Error(), "archive/tar:") {
				return nil, invalid("the body is not a whole tar stream (%v)", err)
			}
			return nil, err
		}
		if _, err := tarball.CheckHeader(hdr); err != nil {
			return nil, err
		}
	}
	// The end-of-archive blocks, and any padding after them.
	if _, err := io.Copy(io.Discard, tee); err != nil {
		return nil, err
	}
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return nil, err
	}
	return f, nil
}

// tempDir is where uploads are spooled.
func (s *Server) tempDir() string {
	if s.cfg.DataDir == "" {
		return os.TempDir()
	}
	d := filepath.Join(s.cfg.DataDir, "tmp")
	os.MkdirAll(d, 0o700)
	return d
}
