package sandboxtool

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
)

// execArgs are exec_command's arguments with the SDK's defaults applied.
type execArgs struct {
	cmd, workdir, shell string
	login, tty          bool
	yield               time.Duration
	maxTokens           int // 0: Options.DefaultMaxOutputTokens
}

func parseExecArgs(raw string) (execArgs, error) {
	a := execArgs{login: true, yield: defaultExecYield}
	f, err := parseObject("exec_command", raw, `{"cmd": "ls -la"}`)
	if err != nil {
		return a, err
	}
	if a.cmd, err = f.str("cmd"); err != nil {
		return a, err
	}
	if a.cmd == "" {
		return a, fmt.Errorf(`exec_command: "cmd" is required: give the shell command line to run, as in {"cmd": "ls -la"}: %w`, sandbox.ErrInvalid)
	}
	if a.workdir, err = f.str("workdir"); err != nil {
		return a, err
	}
	if a.shell, err = f.str("shell"); err != nil {
		return a, err
	}
	if a.login, err = f.boolean("login", a.login); err != nil {
		return a, err
	}
	if a.tty, err = f.boolean("tty", a.tty); err != nil {
		return a, err
	}
	if a.yield, err = f.yield(a.yield); err != nil {
		return a, err
	}
	a.maxTokens, err = f.maxTokens()
	return a, err
}

// stdinArgs are write_stdin's arguments with the SDK's defaults applied.
type stdinArgs struct {
	session   int
	chars     string
	yield     time.Duration
	maxTokens int
}

func parseStdinArgs(raw string) (stdinArgs, error) {
	a := stdinArgs{yield: defaultStdinYield}
	f, err := parseObject("write_stdin", raw, `{"session_id": 1234, "chars": "q\n"}`)
	if err != nil {
		return a, err
	}
	id, ok, err := f.integer("session_id")
	if err != nil {
		return a, err
	}
	if !ok {
		return a, fmt.Errorf(`write_stdin: "session_id" is required: give the session ID exec_command printed: %w`, sandbox.ErrInvalid)
	}
	a.session = int(id)
	if a.chars, err = f.str("chars"); err != nil {
		return a, err
	}
	if a.yield, err = f.yield(a.yield); err != nil {
		return a, err
	}
	a.maxTokens, err = f.maxTokens()
	return a, err
}

// clampYield keeps a wait within the SDK's bounds (clamp_pty_yield_time_ms).
func clampYield(d time.Duration) time.Duration { return min(max(d, minYield), maxYield) }

// maxTokens is the output bound of one answer: the call's, or the default,
// never more than the per-process buffer holds.
func (t *Tools) maxTokens(requested int) int {
	if requested <= 0 {
		requested = t.opts.DefaultMaxOutputTokens
	}
	return min(requested, t.opts.OutputBufferBytes/bytesPerToken)
}

func (t *Tools) execCommand(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	began := time.Now()
	a, err := parseExecArgs(call.Arguments)
	if err != nil {
		return agent.ToolResult{}, err
	}
	t.changes.begin(ctx)
	p := newProcess(a.cmd, a.tty, t.opts.OutputBufferBytes)
	p.h, err = t.start(ctx, a, p)
	if err != nil {
		return agent.ToolResult{}, err
	}
	if err := t.register(p); err != nil {
		p.kill(ctx, "the run ended")
		return agent.ToolResult{}, fmt.Errorf("exec_command: %w", err)
	}
	limit := t.opts.MaxLifetime
	p.mu.Lock()
	p.lifetime = time.AfterFunc(limit, func() {
		if err := p.kill(context.Background(), fmt.Sprintf("it ran longer than the maximum lifetime of %s", limit)); err != nil {
			t.log.Warn("killing a process past its lifetime", "session", p.id, "err", err)
		}
	})
	p.mu.Unlock()
	go p.watch()

	if err := p.acquire(ctx); err != nil {
		return agent.ToolResult{}, err
	}
	defer p.release()
	base := agent.Event{CallID: call.ID, Tool: call.Name, CallView: agent.CallView{Command: a.cmd}}
	exited, out, err := p.collect(ctx, a.yield, call.Emit, base)
	if err != nil {
		return agent.ToolResult{}, err // the process stays for Close
	}
	t.changes.end(ctx, fileEmitter(call, a.cmd))
	return t.answer(p, exited, out, a.maxTokens, began), nil
}

// start starts the command line through the shell. A missing default
// shell falls back to sh (and later commands go to sh directly); a
// missing shell the model named is its error to fix.
func (t *Tools) start(ctx context.Context, a execArgs, p *process) (sandbox.Process, error) {
	shell, named := a.shell, a.shell != ""
	if !named {
		shell = t.defaultShell()
	}
	args := []string{"-c", a.cmd}
	if a.login {
		// "-l -c" rather than "-lc": the same to every shell, and simple
		// ones take one flag per argument.
		args = []string{"-l", "-c", a.cmd}
	}
	req := sandbox.ExecRequest{
		Cmd: shell, Args: args, Dir: t.resolve(a.workdir), User: t.opts.User,
		Stdout: streamWriter{p, "stdout"}, Stderr: streamWriter{p, "stderr"},
	}
	if a.tty {
		size := ptySize
		req.PTY, req.OpenStdin = &size, true
	}
	h, err := t.sess.Start(ctx, req)
	if err != nil && errors.Is(err, sandbox.ErrNotFound) && !named && shell != "sh" {
		t.mu.Lock()
		t.noDefaultShell = true
		t.mu.Unlock()
		t.log.Info("default shell missing, using sh", "shell", shell, "err", err)
		req.Cmd = "sh"
		h, err = t.sess.Start(ctx, req)
	}
	switch {
	case err == nil:
		return h, nil
	case errors.Is(err, sandbox.ErrNotFound) && named:
		return nil, fmt.Errorf("exec_command: shell %q is not installed in the sandbox; leave \"shell\" out to use the default: %w", shell, err)
	case errors.Is(err, sandbox.ErrNotFound):
		return nil, fmt.Errorf("exec_command: the sandbox has no shell to run the command (tried %s and sh): %w", shell, err)
	case errors.Is(err, sandbox.ErrInvalid) && a.workdir != "":
		return nil, fmt.Errorf("exec_command: workdir %q must be an existing directory inside the workspace: %w", a.workdir, err)
	default:
		return nil, fmt.Errorf("exec_command: starting the command: %w", err)
	}
}

func (t *Tools) defaultShell() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	switch {
	case t.noDefaultShell:
		return "sh"
	case t.opts.DefaultShell != "":
		return t.opts.DefaultShell
	default:
		// The SDK runs "sh -lc"; bash, where there is one, runs the
		// bash-isms models write (source, [[ ]], pipefail) that a plain
		// POSIX sh such as dash rejects.
		return "bash"
	}
}

func (t *Tools) writeStdin(ctx context.Context, call agent.ToolCall) (agent.ToolResult, error) {
	began := time.Now()
	a, err := parseStdinArgs(call.Arguments)
	if err != nil {
		return agent.ToolResult{}, err
	}
	p, err := t.lookup(a.session)
	if err != nil {
		return agent.ToolResult{}, err
	}
	if a.chars != "" && !p.tty {
		// The SDK's words: commands without a TTY read an empty stdin, so
		// one that waits for input ends instead of hanging.
		return agent.ToolResult{}, fmt.Errorf("write_stdin: stdin is not available for this process. Start the command with `tty=true` in `exec_command` before using `write_stdin`: %w", sandbox.ErrState)
	}
	if err := p.acquire(ctx); err != nil {
		return agent.ToolResult{}, err
	}
	defer p.release()
	// A parallel call may have read the end while this one waited.
	if _, err := t.lookup(a.session); err != nil {
		return agent.ToolResult{}, err
	}
	if a.chars != "" {
		// Input to a process that has just ended is not an error: its
		// last output and exit code follow.
		err := p.h.Write(ctx, []byte(a.chars))
		gone := errors.Is(err, sandbox.ErrState) || errors.Is(err, sandbox.ErrNotFound) || p.ended()
		if err != nil && !gone {
			return agent.ToolResult{}, fmt.Errorf("write_stdin: writing to session %d: %w", p.id, err)
		}
	}
	t.changes.begin(ctx)
	yield := a.yield
	if a.chars == "" {
		yield = max(yield, minEmptyYield) // a bare poll waits longer, as the SDK's
	}
	base := agent.Event{CallID: call.ID, Tool: call.Name, CallView: agent.CallView{Command: p.cmd}, SessionID: p.id}
	exited, out, err := p.collect(ctx, yield, call.Emit, base)
	if err != nil {
		return agent.ToolResult{}, err
	}
	t.changes.end(ctx, fileEmitter(call, p.cmd))
	return t.answer(p, exited, out, a.maxTokens, began), nil
}

// answer formats what one read of p produced; an ended process is
// forgotten once its end is told.
func (t *Tools) answer(p *process, exited bool, out text, maxTokens int, began time.Time) agent.ToolResult {
	output, original := truncate(out, t.maxTokens(maxTokens))
	r := response{original: original}
	var res agent.ToolResult
	if exited {
		code, notices := p.outcome()
		for i := len(notices) - 1; i >= 0; i-- {
			output = prependNotice(output, notices[i])
		}
		r.exitCode, res.ExitCode = &code, &code
		t.finish(p, code)
	} else {
		r.session, res.SessionID = p.id, p.id
	}
	r.output = output
	r.wall = time.Since(began)
	res.Output = []agent.Content{{Type: agent.ContentText, Text: r.String()}}
	return res
}

// fileEmitter returns how a call reports the files its command changed:
// its events, with the command line, or nil when it has no Emit.
func fileEmitter(call agent.ToolCall, cmd string) func(agent.Event) {
	if call.Emit == nil {
		return nil
	}
	return func(ev agent.Event) {
		ev.CallView.Command = cmd
		call.Emit(ev)
	}
}
