// Package sandboxtool gives the model the Codex-style tools of a sandbox
// session: exec_command (run a shell command, get its output or a session
// ID if it is still running), write_stdin (type into or poll such a
// session) and view_image (look at an image in the workspace).
//
// It is the bridge between the harness (package agent) and the compute
// plane (package sandbox) for these tools and sees a sandbox only through
// sandbox.Session, so the same tools work on every runtime. Names, JSON
// schemas, defaults and the text the model reads ("Chunk ID: ...",
// "Process running with session ID ...", "…N tokens truncated…") follow
// the OpenAI Agents SDK's sandbox tools so prompts written for them carry
// over. Where the SDK trusts the model this package does not: output is
// always truncated (to Options.DefaultMaxOutputTokens when the call sets
// no max_output_tokens), a process's unread output is held in a bounded
// buffer, background processes have a maximum lifetime and a cap on their
// number, and Close kills what is left at the end of a run.
package sandboxtool

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math/rand/v2"
	"path"
	"slices"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
)

// Defaults for the zero fields of Options.
const (
	// DefaultMaxLifetime is how long a background process may run before
	// it is killed.
	DefaultMaxLifetime = 10 * time.Minute
	// DefaultMaxProcesses caps the processes kept at once (running, or
	// ended with output the model has not read).
	DefaultMaxProcesses = 16
	// DefaultMaxOutputTokens bounds one answer's output when the call
	// gives no max_output_tokens (about 40 kB).
	DefaultMaxOutputTokens = 10_000
	// DefaultOutputBufferBytes is the unread output kept per process: its
	// first and last halves. It also caps max_output_tokens (at a quarter
	// of it, 4 bytes a token).
	DefaultOutputBufferBytes = 1 << 20
)

// The SDK's limits (pty_types.py), kept so the model's habits hold.
const (
	minYield          = 250 * time.Millisecond
	maxYield          = 30 * time.Second
	minEmptyYield     = 5 * time.Second // a write_stdin that only polls waits at least this
	defaultExecYield  = 10 * time.Second
	defaultStdinYield = 250 * time.Millisecond

	minSessionID = 1_000
	maxSessionID = 100_000 // exclusive
	// protectedRecent processes, the most recently used, are never pruned
	// to make room for a new one.
	protectedRecent = 8
)

const (
	// maxEventBytes bounds the output queued for the run's event stream
	// between two reads; beyond it the display is told how much it missed
	// (the model still gets head and tail).
	maxEventBytes = 64 << 10
	// flushInterval spaces the output events of one read.
	flushInterval = 50 * time.Millisecond
	// maxGone bounds the ended session IDs remembered to explain a late
	// write_stdin.
	maxGone = 256
	// killTimeout bounds the signal sent to kill a process.
	killTimeout = 10 * time.Second
)

// ptySize is the terminal a tty=true command gets.
var ptySize = sandbox.PTYSize{Cols: 80, Rows: 24}

// Options configure Tools. Zero values mean the defaults.
type Options struct {
	// User runs the commands; "" means the sandbox's user.
	User string
	// DefaultShell runs commands whose call names no shell. "" means
	// bash, or sh where the sandbox has no bash; any default that is
	// missing falls back to sh.
	DefaultShell string
	// Workdir is where commands run when the call gives no workdir, and
	// what relative workdir and image paths are resolved against (the
	// manifest's root). "" means the sandbox's workspace root.
	Workdir string
	// MaxLifetime kills a process (SIGKILL) that runs longer; the model
	// is told on its next read. 0 means DefaultMaxLifetime.
	MaxLifetime time.Duration
	// MaxProcesses caps the processes kept at once; starting one more
	// forgets the least recently used ended one, or kills the least
	// recently used running one. 0 means DefaultMaxProcesses.
	MaxProcesses int
	// DefaultMaxOutputTokens truncates output when a call sets no
	// max_output_tokens. 0 means DefaultMaxOutputTokens.
	DefaultMaxOutputTokens int
	// OutputBufferBytes is the unread output kept per process. 0 means
	// DefaultOutputBufferBytes.
	OutputBufferBytes int
	// Root is the workspace root, whose files the tools compare after
	// each call to report what commands created, changed or deleted
	// (agent.EventFileChanged). "" means the sandbox's.
	Root string
	// MaxTrackedFiles is the largest workspace (in files, noise
	// directories such as .git and node_modules left out) compared after
	// each call; past it, changes are not reported for the rest of the
	// run. 0 means DefaultMaxTrackedFiles.
	MaxTrackedFiles int
	// Edits are the paths other tools reported with their own events
	// (apply_patch); they are not reported again. nil means none.
	Edits *agent.Edits
	// Logger receives failures the model cannot act on (a kill that did
	// not go through); nil discards them.
	Logger *slog.Logger
}

// Tools are the sandbox tools of one run over one session, with the
// background processes they started. Their methods are safe for
// concurrent use; parallel tool calls are fine.
type Tools struct {
	sess    sandbox.Session
	opts    Options
	log     *slog.Logger
	changes *changes

	mu sync.Mutex // guards the fields below
	// procs are the processes the model may still read, by session ID.
	procs map[int]*process
	// gone says why a session ID no longer answers, for a late write_stdin.
	gone      map[int]string
	goneOrder []int
	// noDefaultShell is set once the default shell was found missing, so
	// later commands go to sh directly.
	noDefaultShell bool
	closed         bool
}

// New returns the tools for sess.
func New(sess sandbox.Session, opts Options) *Tools {
	if opts.MaxLifetime <= 0 {
		opts.MaxLifetime = DefaultMaxLifetime
	}
	if opts.MaxProcesses <= 0 {
		opts.MaxProcesses = DefaultMaxProcesses
	}
	if opts.DefaultMaxOutputTokens <= 0 {
		opts.DefaultMaxOutputTokens = DefaultMaxOutputTokens
	}
	if opts.OutputBufferBytes <= 0 {
		opts.OutputBufferBytes = DefaultOutputBufferBytes
	}
	if opts.MaxTrackedFiles <= 0 {
		opts.MaxTrackedFiles = DefaultMaxTrackedFiles
	}
	opts.OutputBufferBytes = max(opts.OutputBufferBytes, 2*bytesPerToken)
	log := opts.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	ch := &changes{sess: sess, root: opts.Root, edits: opts.Edits, max: opts.MaxTrackedFiles, log: log.Info}
	return &Tools{sess: sess, opts: opts, log: log, changes: ch, procs: map[int]*process{}, gone: map[int]string{}}
}

// ExecCommand is the exec_command tool. It judges its calls
// (agent.RiskAssessor: RiskyCommand) and shows each as its command line
// (agent.Describer); it also has a method Command(arguments string)
// string, as the package-level Command.
func (t *Tools) ExecCommand() agent.Tool { return execTool{t} }

// WriteStdin is the write_stdin tool. Its calls are never risky (they feed
// a command exec_command started) and are shown as a command's.
func (t *Tools) WriteStdin() agent.Tool {
	return stdinTool{tool{spec: writeStdinSpec, call: t.writeStdin, view: agent.CallView{Kind: agent.CallCommand}}}
}

// ViewImage is the view_image tool. Its calls are never risky: it only
// reads.
func (t *Tools) ViewImage() agent.Tool { return tool{spec: viewImageSpec, call: t.viewImage} }

// All returns exec_command, write_stdin and view_image.
func (t *Tools) All() []agent.Tool {
	return []agent.Tool{t.ExecCommand(), t.WriteStdin(), t.ViewImage()}
}

// Close kills every process the tools started that still runs and waits
// (bounded by ctx) for them to end. The runner calls it at the end of a
// run; later calls of the tools fail. Closing twice is not an error.
func (t *Tools) Close(ctx context.Context) error {
	t.mu.Lock()
	procs := slices.Collect(maps.Values(t.procs))
	t.procs = map[int]*process{}
	t.closed = true
	t.mu.Unlock()

	var errs []error
	for _, p := range procs {
		if err := p.kill(ctx, "the run ended"); err != nil {
			errs = append(errs, err)
		}
	}
	for _, p := range procs {
		select {
		case <-p.done:
		case <-ctx.Done():
			return fmt.Errorf("closing sandbox tools: waiting for session %d to end: %w", p.id, ctx.Err())
		}
	}
	return errors.Join(errs...)
}

// tool adapts a function to agent.Tool, with the view of its calls.
type tool struct {
	spec func() agent.ToolSpec
	call func(context.Context, agent.ToolCall) (agent.ToolResult, error)
	view agent.CallView
}

func (t tool) Spec() agent.ToolSpec { return t.spec() }

// Describe implements agent.Describer.
func (t tool) Describe(string) agent.CallView { return t.view }

func (t tool) Call(ctx context.Context, c agent.ToolCall) (agent.ToolResult, error) {
	return t.call(ctx, c)
}

// execTool is exec_command; it has its own type to judge and show its
// calls by their command line.
type execTool struct{ t *Tools }

var (
	_ agent.RiskAssessor = execTool{}
	_ agent.Describer    = execTool{}
	_ agent.RiskAssessor = tool{}
	_ agent.Describer    = tool{}
	_ agent.RiskAssessor = stdinTool{}
)

func (e execTool) Spec() agent.ToolSpec { return execCommandSpec() }

func (e execTool) Call(ctx context.Context, c agent.ToolCall) (agent.ToolResult, error) {
	return e.t.execCommand(ctx, c)
}

// Command returns the command line of an exec_command call, as the
// package-level Command.
func (execTool) Command(arguments string) string { return Command(arguments) }

// Describe implements agent.Describer: a call is shown as the command
// line it runs.
func (execTool) Describe(arguments string) agent.CallView {
	return agent.CallView{Kind: agent.CallCommand, Command: Command(arguments)}
}

// Command returns the command line ("cmd") of exec_command arguments, for
// display; "" when they hold none. It reads them as the call does.
func Command(arguments string) string {
	f, err := parseObject("exec_command", arguments, "")
	if err != nil {
		return ""
	}
	cmd, _ := f.str("cmd")
	return cmd
}

// resolve makes a model-given path relative to Options.Workdir; the
// session confines the result to the workspace.
func (t *Tools) resolve(p string) string {
	if p == "" {
		return t.opts.Workdir
	}
	if path.IsAbs(p) || t.opts.Workdir == "" {
		return p
	}
	return path.Join(t.opts.Workdir, p)
}

// register gives p a session ID and keeps it, making room under
// MaxProcesses first. It fails once the tools are closed.
func (t *Tools) register(p *process) error {
	t.mu.Lock()
	if t.closed {
		t.mu.Unlock()
		return errClosed
	}
	victim := t.pruneLocked()
	for {
		id := minSessionID + rand.IntN(maxSessionID-minSessionID)
		if t.procs[id] == nil && t.gone[id] == "" {
			p.id = id
			break
		}
	}
	p.lastUsed = time.Now()
	t.procs[p.id] = p
	t.mu.Unlock()
	if victim != nil {
		// Killed outside the lock: a signal is a round trip to the sandbox.
		if err := victim.kill(context.Background(), fmt.Sprintf("more than %d processes were kept and it was the least recently used", t.opts.MaxProcesses)); err != nil {
			t.log.Warn("killing a pruned process", "session", victim.id, "err", err)
		}
	}
	return nil
}

// pruneLocked makes room for one more process, as the SDK's
// process_id_to_prune_from_meta: the least recently used ended process
// goes first, then the least recently used running one, never one of the
// most recently used. It returns a running process the caller must kill.
// t.mu is held.
func (t *Tools) pruneLocked() *process {
	if len(t.procs) < t.opts.MaxProcesses {
		return nil
	}
	byRecency := slices.SortedFunc(maps.Values(t.procs), func(a, b *process) int {
		return b.lastUsed.Compare(a.lastUsed)
	})
	candidates := byRecency[min(protectedRecent, t.opts.MaxProcesses-1, len(byRecency)):]
	slices.Reverse(candidates) // least recently used first
	victim := candidates[0]
	for _, p := range candidates {
		if p.ended() {
			victim = p
			break
		}
	}
	delete(t.procs, victim.id)
	if victim.ended() {
		t.forgetLocked(victim.id, "ended while more than the allowed number of processes were kept, and its last output was discarded")
		return nil
	}
	t.forgetLocked(victim.id, fmt.Sprintf("was killed to make room: at most %d processes are kept, and it was the least recently used", t.opts.MaxProcesses))
	return victim
}

// forgetLocked remembers why id no longer answers. t.mu is held.
func (t *Tools) forgetLocked(id int, why string) {
	if _, ok := t.gone[id]; !ok {
		t.goneOrder = append(t.goneOrder, id)
	}
	t.gone[id] = why
	if len(t.goneOrder) > maxGone {
		delete(t.gone, t.goneOrder[0])
		t.goneOrder = t.goneOrder[1:]
	}
}

// lookup returns the process with session ID id, or an error saying why
// there is none.
func (t *Tools) lookup(id int) (*process, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil, errClosed
	}
	if p := t.procs[id]; p != nil {
		p.lastUsed = time.Now()
		return p, nil
	}
	if why := t.gone[id]; why != "" {
		return nil, fmt.Errorf("write_stdin: session ID %d %s; start the command again with exec_command if you need it: %w", id, why, sandbox.ErrNotFound)
	}
	return nil, fmt.Errorf("write_stdin: no session with ID %d; use the session ID that exec_command printed for a command still running: %w", id, sandbox.ErrNotFound)
}

// finish forgets an ended process once its last output was returned.
func (t *Tools) finish(p *process, code int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.procs[p.id] == p {
		delete(t.procs, p.id)
	}
	t.forgetLocked(p.id, fmt.Sprintf("has exited (code %d) and its last output was already returned", code))
}

var errClosed = fmt.Errorf("the sandbox tools are closed: the run has ended: %w", sandbox.ErrState)
