// Package sandbox defines the compute plane's contract: a Runtime creates and
// manages isolated Linux workspaces, and a Session runs commands and moves
// files inside one. It holds types, small interfaces and sentinel errors
// only; implementations live in sub-packages named for their technology
// (sandbox/local, sandbox/remote, ...) and the harness and server depend on
// this package alone.
package sandbox

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"
)

// Sentinel errors. Implementations wrap them with %w and context
// ("starting process %q: %w") so callers test with errors.Is; the remote
// client maps wire errors back to these so errors.Is works across the API.
var (
	// ErrNotFound: the sandbox, process, file or snapshot does not exist.
	ErrNotFound = errors.New("not found")
	// ErrInvalid: the request is malformed: a path that escapes the
	// workspace, an empty command, a bad tar member, an unknown option.
	ErrInvalid = errors.New("invalid argument")
	// ErrExist: the target already exists (Mkdir on a file, Move onto an
	// existing path, a duplicate process tag).
	ErrExist = errors.New("already exists")
	// ErrState: the operation does not fit the current state (exec in a
	// stopped sandbox, stdin to an exited process, delete of a template in
	// use).
	ErrState = errors.New("wrong state")
	// ErrLimit: a limit was hit (disk full, too many processes, output or
	// buffer cap, quota).
	ErrLimit = errors.New("limit exceeded")
	// ErrUnavailable: the sandbox or its daemon cannot be reached right now;
	// retrying may help.
	ErrUnavailable = errors.New("unavailable")
	// ErrPermission: the caller may not do this (bad access token, a path
	// the sandbox user cannot write).
	ErrPermission = errors.New("permission denied")
)

// State is the lifecycle state of a sandbox.
type State string

const (
	StateRunning State = "running"
	// StateStopped: no process runs, the disk (workspace) is kept and
	// Resume brings it back.
	StateStopped State = "stopped"
)

// Limits caps a sandbox's resources. Zero means "runtime default".
type Limits struct {
	CPUs        float64 `json:"cpus,omitempty"`         // CPU quota in cores
	MemoryBytes int64   `json:"memory_bytes,omitempty"` // hard memory limit; exceeding it OOM-kills inside the sandbox
	Pids        int     `json:"pids,omitempty"`         // max processes/threads; 0: the runtime's default, NoPidsLimit: none
	DiskBytes   int64   `json:"disk_bytes,omitempty"`   // max bytes the sandbox may write to its own disk
}

// NoPidsLimit as Limits.Pids asks for no pids limit at all, where 0 takes
// the runtime's default (a finite one: a sandbox without a limit can
// take every pid of the host). Runtimes that serve tenants refuse it
// unless their operator allows it.
const NoPidsLimit = -1

// Network says what the sandbox may reach.
type Network struct {
	// Mode is "none" (loopback only, the default), "internet" (egress
	// to public addresses, never the host, private ranges or link-local)
	// or "allow" (egress only to Allow). A runtime refuses modes it
	// cannot enforce.
	Mode string `json:"mode,omitempty"`
	// Allow lists what Mode "allow" may reach: addresses, CIDRs or host
	// names, each with an optional ":port".
	Allow []string `json:"allow,omitempty"`
}

// Spec describes a sandbox to create.
type Spec struct {
	// Template names the root filesystem (e.g. "host", "python"). Empty
	// means the runtime's default.
	Template string `json:"template,omitempty"`
	// Root is the absolute workspace path inside the sandbox; "" means
	// DefaultRoot.
	Root string `json:"root,omitempty"`
	// Env is added to every process's environment.
	Env map[string]string `json:"env,omitempty"`
	// User runs commands ("" means the runtime default, an unprivileged
	// user).
	User    string  `json:"user,omitempty"`
	Limits  Limits  `json:"limits,omitempty"`
	Network Network `json:"network,omitempty"`
	// TTL stops the sandbox this long after it starts; 0 means no TTL.
	TTL time.Duration `json:"ttl,omitempty"`
	// Labels are caller metadata, stored and returned as is.
	Labels map[string]string `json:"labels,omitempty"`
	// Isolation is the wall between the sandbox and the host: "native"
	// (the default, also "") or "gvisor". A runtime refuses a tier it
	// does not have with ErrUnavailable.
	Isolation string `json:"isolation,omitempty"`
}

// The isolation tiers (Spec.Isolation).
const (
	// IsolationNative: the host's kernel, behind namespaces, cgroups,
	// seccomp, Landlock and dropped capabilities.
	IsolationNative = "native"
	// IsolationGVisor: gVisor's user-space kernel (runsc) between the
	// sandbox's programs and the host's kernel, which they never call.
	IsolationGVisor = "gvisor"
)

// DefaultRoot is the workspace root when a Spec or manifest names none.
const DefaultRoot = "/workspace"

// Info describes an existing sandbox.
type Info struct {
	ID        string    `json:"id"`
	State     State     `json:"state"`
	Spec      Spec      `json:"spec"`
	CreatedAt time.Time `json:"created_at"`
	// Deadline is when the TTL stops the sandbox; zero when it has none
	// or its clock has not started (the TTL counts from the first start).
	Deadline time.Time `json:"deadline,omitzero"`
	// Paused says a stopped sandbox kept its memory (Pauser): Resume
	// brings back its processes as they were.
	Paused bool `json:"paused,omitempty"`
}

// Runtime creates and manages sandboxes. Implementations must be safe for
// concurrent use.
type Runtime interface {
	// Create makes and starts a sandbox. ErrInvalid for a bad spec,
	// ErrNotFound for an unknown template, ErrLimit when out of capacity.
	Create(ctx context.Context, spec Spec) (Session, error)
	// Get returns a handle to an existing sandbox, running or stopped.
	// ErrNotFound if no sandbox has that id.
	Get(ctx context.Context, id string) (Session, error)
	// List returns every sandbox the runtime knows, in creation order.
	List(ctx context.Context) ([]Info, error)
	// Stop ends every process of the sandbox and keeps its disk.
	// Stopping a stopped sandbox is not an error. ErrNotFound if unknown.
	Stop(ctx context.Context, id string) error
	// Resume starts a stopped sandbox again with its disk as it was and
	// returns a live session; resuming a running sandbox returns it as is.
	// ErrNotFound if unknown.
	Resume(ctx context.Context, id string) (Session, error)
	// Delete stops the sandbox and removes its disk. ErrNotFound if unknown.
	Delete(ctx context.Context, id string) error
}

// Session operates inside one sandbox. File paths are absolute inside the
// sandbox or relative to the workspace root, and every one is confined to
// the workspace: a path that leads out of it (through "..", a symlink, an
// absolute path elsewhere, a NUL byte, an over-long name) gets ErrInvalid
// and nothing is changed. Commands are not confined this way: they run as
// the sandbox's user with whatever the runtime's isolation allows. Calls on a stopped sandbox get
// ErrState. Implementations must be safe for concurrent use.
type Session interface {
	// ID is the sandbox id.
	ID() string
	// Info returns the sandbox's current description.
	Info(ctx context.Context) (Info, error)

	// Exec runs a command to completion, streaming its output to
	// req.Stdout and req.Stderr as it is produced, and returns how it
	// ended. A command that runs but fails is not an error: see
	// ExitStatus. ErrInvalid for an empty command or a bad working
	// directory; ErrNotFound when the program does not exist. When ctx
	// ends the process is killed and ctx.Err() is returned.
	Exec(ctx context.Context, req ExecRequest) (ExitStatus, error)
	// Start runs a command in the background and returns at once. The
	// process outlives ctx (ctx bounds only the start); its output goes to
	// req.Stdout/req.Stderr until it ends or the Process is detached.
	Start(ctx context.Context, req ExecRequest) (Process, error)
	// Attach reattaches to a running (or recently ended) background
	// process by pid or tag, sending output produced since the last
	// attached reader left to stdout and stderr (either may be nil).
	// ErrNotFound if no such process.
	Attach(ctx context.Context, sel ProcessSelector, stdout, stderr io.Writer) (Process, error)
	// Processes lists the running processes started through the session.
	Processes(ctx context.Context) ([]ProcessInfo, error)

	// The calls below reach a background process by pid or tag without a
	// handle, so a caller that keeps none (a server that restarted, a
	// second client) can still drive a process another session started:
	// the process's state, its output included, lives in the sandbox.
	// They are on Session, not an optional interface, because every
	// runtime's daemon speaks them and a wrapper that embeds a Session
	// passes them on.

	// StartDetached runs a command in the background, as Start does, but
	// no handle takes its output: the output waits in the sandbox
	// (bounded, as after Detach) for the first Attach, which gets it from
	// its first byte. It returns the process's pid. req.Stdout and
	// req.Stderr must be nil (ErrInvalid): nothing would read them.
	// req.Stdin, when set, is copied to the process's standard input,
	// which is then closed; with OpenStdin the input stays open for
	// WriteStdin. Errors as Start's.
	StartDetached(ctx context.Context, req ExecRequest) (pid int, err error)
	// Signal delivers sig to the background process sel names and its
	// group. ErrNotFound if there is no such process; ErrState if it has
	// ended; ErrInvalid for a signal the runtime cannot deliver.
	Signal(ctx context.Context, sel ProcessSelector, sig Signal) error
	// WriteStdin sends p to the standard input (or the PTY) of the
	// process sel names. ErrNotFound if there is no such process;
	// ErrState if it has ended, or its standard input is closed or was
	// never open (see ExecRequest.OpenStdin).
	WriteStdin(ctx context.Context, sel ProcessSelector, p []byte) error
	// CloseStdin signals end of file on the standard input of the
	// process sel names; closing it twice is not an error. ErrNotFound if
	// there is no such process. A process that has ended may get ErrState
	// or nil (its input is closed either way); a process on a PTY may get
	// ErrState: send 0x04 instead.
	CloseStdin(ctx context.Context, sel ProcessSelector) error

	// ReadFile opens a file for reading. ErrNotFound if missing,
	// ErrInvalid if it is a directory.
	ReadFile(ctx context.Context, path string) (io.ReadCloser, error)
	// WriteFile creates or replaces a file with r's content, creating
	// parent directories. ErrLimit when the disk is full.
	WriteFile(ctx context.Context, path string, r io.Reader, perm uint32) error
	// Stat describes one entry without following a final symlink.
	Stat(ctx context.Context, path string) (FileInfo, error)
	// List returns the entries under a directory, recursing to depth
	// levels (depth 1 is the directory's own children; 0 means 1).
	List(ctx context.Context, path string, depth int) ([]FileInfo, error)
	// Mkdir creates a directory and its parents; an existing directory is
	// not an error, an existing file is ErrExist.
	Mkdir(ctx context.Context, path string) error
	// Remove deletes a file or a directory tree. ErrNotFound if missing.
	// Removing the workspace root itself is ErrInvalid.
	Remove(ctx context.Context, path string) error
	// Move renames src to dst, creating dst's parents. ErrNotFound if src
	// is missing.
	Move(ctx context.Context, src, dst string) error

	// SnapshotWorkspace writes the workspace as a tar stream (members
	// relative to the workspace root) to w.
	SnapshotWorkspace(ctx context.Context, w io.Writer) error
	// RestoreWorkspace extracts a tar stream into the workspace. Absolute
	// names, "..", device nodes, fifos, and links that point out of the
	// workspace (absolute symlink targets included: a restored workspace
	// must not depend on the host it came from) are refused with
	// ErrInvalid naming the member; members before the bad one may have
	// been written.
	RestoreWorkspace(ctx context.Context, r io.Reader) error

	// DialPort connects to a TCP port listening inside the sandbox (on its
	// own loopback), without needing any host network. ErrUnavailable if
	// nothing listens there.
	DialPort(ctx context.Context, port int) (net.Conn, error)
}

// ExecRequest describes a command to run.
type ExecRequest struct {
	// Cmd is the program; when Args is empty and Shell is true, Cmd is a
	// shell command line run with /bin/sh -c.
	Cmd   string
	Args  []string
	Shell bool
	// Dir is the working directory; "" means the workspace root.
	Dir string
	// Env is added to the sandbox's environment for this process.
	Env map[string]string
	// User overrides the spec's user for this process.
	User string
	// Tag names a background process so it can be found again by Attach.
	Tag string
	// Stdin, when set, is copied to the process's standard input, which is
	// then closed. When nil and OpenStdin is false the process reads EOF.
	Stdin io.Reader
	// OpenStdin keeps standard input open for Process.Write.
	OpenStdin bool
	// Stdout and Stderr receive output as it is produced; nil discards.
	// With a PTY both streams arrive on Stdout.
	Stdout, Stderr io.Writer
	// PTY runs the process on a pseudo-terminal of this size.
	PTY *PTYSize
	// Timeout, when positive, kills the process (SIGKILL, to its group
	// too) this long after it starts, whether or not anyone waits for it:
	// the sandbox enforces it, so it holds after the caller is gone. The
	// process then ends as killed by a signal. Negative, or over
	// MaxTimeout, is ErrInvalid.
	Timeout time.Duration
}

// MaxTimeout is the longest ExecRequest.Timeout.
const MaxTimeout = 365 * 24 * time.Hour

// PTYSize is a terminal size.
type PTYSize struct {
	Cols, Rows uint16
}

// ProcessSelector picks a background process by pid or by tag (Tag wins
// when both are set).
type ProcessSelector struct {
	PID int
	Tag string
}

// ProcessInfo describes a running process.
type ProcessInfo struct {
	PID  int               `json:"pid"`
	Tag  string            `json:"tag,omitempty"`
	Cmd  string            `json:"cmd"`
	Args []string          `json:"args,omitempty"`
	Env  map[string]string `json:"env,omitempty"`
	Dir  string            `json:"dir,omitempty"`
}

// ExitStatus says how a process ended.
type ExitStatus struct {
	// Code is the exit code, or -1 when killed by a signal.
	Code int `json:"exit_code"`
	// Signal names the signal that killed it ("killed", "terminated"), ""
	// when it exited on its own.
	Signal string `json:"signal,omitempty"`
	// OOM is true when the kernel's out-of-memory killer ended it.
	OOM bool `json:"oom,omitempty"`
	// Error describes a failure that is not the program's (for example
	// output lost while no reader was attached).
	Error string `json:"error,omitempty"`
}

// Success reports whether the process exited with code 0.
func (s ExitStatus) Success() bool { return s.Code == 0 && s.Signal == "" && !s.OOM }

// Signal is a signal to send to a process, numbered as on Linux.
type Signal int

// The signals every runtime delivers.
const (
	SIGHUP  Signal = 1
	SIGINT  Signal = 2
	SIGQUIT Signal = 3
	SIGKILL Signal = 9
	SIGUSR1 Signal = 10
	SIGUSR2 Signal = 12
	SIGTERM Signal = 15
)

// Process is a handle to a background process.
type Process interface {
	// PID is the process id inside the sandbox.
	PID() int
	// Tag is the tag it was started with, or "".
	Tag() string
	// Wait blocks until the process ends and its output has been
	// delivered, or ctx ends (then ctx.Err(); the process keeps running).
	Wait(ctx context.Context) (ExitStatus, error)
	// Write sends bytes to standard input (or the PTY). ErrState if the
	// process has ended or its stdin is closed.
	Write(ctx context.Context, p []byte) error
	// CloseStdin signals EOF on standard input (not for PTYs: send 0x04).
	CloseStdin(ctx context.Context) error
	// Signal delivers a signal to the process and its group.
	Signal(ctx context.Context, sig Signal) error
	// Resize changes the PTY size. ErrInvalid without a PTY.
	Resize(ctx context.Context, size PTYSize) error
	// Detach stops delivering output to this handle; the process keeps
	// running and its output is buffered (bounded) for the next Attach.
	Detach() error
}

// FileType is the kind of a filesystem entry.
type FileType string

const (
	TypeFile    FileType = "file"
	TypeDir     FileType = "dir"
	TypeSymlink FileType = "symlink"
)

// FileInfo describes a filesystem entry.
type FileInfo struct {
	Name          string    `json:"name"`
	Path          string    `json:"path"` // absolute inside the sandbox
	Type          FileType  `json:"type"`
	Size          int64     `json:"size"`
	Mode          uint32    `json:"mode"` // permission bits
	ModTime       time.Time `json:"mod_time"`
	Owner         string    `json:"owner,omitempty"`
	Group         string    `json:"group,omitempty"`
	SymlinkTarget string    `json:"symlink_target,omitempty"`
}

// Forker is a Runtime that can copy a sandbox: its disk (workspace and
// everything installed) goes into a new sandbox with the same spec.
type Forker interface {
	// Fork copies sandbox id, running or stopped, into a new running
	// sandbox. A running sandbox is paused for the copy when the runtime
	// can, so the copy is consistent. ErrNotFound if unknown.
	Fork(ctx context.Context, id string) (Session, error)
}

// Pauser is a Runtime that can stop a sandbox with its memory: every
// process, its memory and open files are kept beside the disk, and
// Resume brings them back running where they were (a REPL keeps its
// variables, a server its port). Only some tiers can (gVisor);
// ErrUnavailable says the sandbox's cannot, and Stop is what remains.
type Pauser interface {
	// Pause stops running sandbox id keeping its memory; its Info then
	// has State stopped and Paused set. ErrState if it is not running,
	// ErrNotFound if unknown.
	Pause(ctx context.Context, id string) error
}

// IsolationLister is a Runtime that says which isolation tiers it can
// give a sandbox now (a host without runsc has no gvisor tier).
type IsolationLister interface {
	// Isolations lists the tiers Create accepts, IsolationNative first.
	Isolations() []string
}

// MemoryForker is a Forker whose copies of a running sandbox can start
// with its processes and memory too, as Pause and Resume would keep them.
type MemoryForker interface {
	// ForkMemory copies running sandbox id, its disk and its memory,
	// into n new running sandboxes (the source is checkpointed once and
	// keeps running). ErrUnavailable if the sandbox's tier cannot.
	ForkMemory(ctx context.Context, id string, n int) ([]Session, error)
}

// Pinger is a Runtime that depends on a service which can be away (the
// kube runtime's API server): Ping says whether it answers now, so a
// server's readiness can include it.
type Pinger interface {
	// Ping returns nil if the runtime can serve requests now.
	Ping(ctx context.Context) error
}

// Deadliner is a Runtime whose sandboxes' TTL can be moved after
// creation; the runtime enforces it even when nothing else runs.
type Deadliner interface {
	// SetDeadline makes sandbox id stop at t (the zero time: never),
	// running or stopped. A stopped sandbox whose deadline is cleared or
	// moved into the future can be resumed. ErrNotFound if unknown.
	SetDeadline(ctx context.Context, id string, t time.Time) error
}

// Archiver is a Session that moves whole directories as tar streams, in
// one request instead of one per file.
type Archiver interface {
	// ReadDirTar writes the tree under dir (members relative to dir) to w.
	ReadDirTar(ctx context.Context, dir string, w io.Writer) error
	// WriteDirTar extracts a tar stream into dir, creating it, with the
	// same refusals as RestoreWorkspace.
	WriteDirTar(ctx context.Context, dir string, r io.Reader) error
}

// Normalize fills a spec's defaults (Root: DefaultRoot) and checks what
// every runtime needs: an absolute, clean workspace root below /, a user
// name from the POSIX portable set (see ValidUserName) or none, valid
// environment variable names, non-negative limits and TTL. Errors wrap
// ErrInvalid and say what to change. Runtimes call it first in Create.
func (s *Spec) Normalize() error {
	if s.Root == "" {
		s.Root = DefaultRoot
	}
	// A runtime may make the user's home from the name (/home/NAME): a
	// name with "/" or ".." would lead that out of the sandbox.
	if s.User != "" {
		if err := ValidUserName(s.User); err != nil {
			return err
		}
	}
	if !strings.HasPrefix(s.Root, "/") {
		return fmt.Errorf("workspace root %q: want an absolute path such as %s: %w", s.Root, DefaultRoot, ErrInvalid)
	}
	root, err := ResolvePath("/", s.Root)
	if err != nil || root == "/" {
		return fmt.Errorf("workspace root %q: want an absolute path below /, such as %s: %w", s.Root, DefaultRoot, ErrInvalid)
	}
	s.Root = root
	for k := range s.Env {
		if k == "" || strings.ContainsAny(k, "=\x00") {
			return fmt.Errorf("environment variable name %q is not valid: names are non-empty and hold no '=' or NUL: %w", k, ErrInvalid)
		}
	}
	switch s.Isolation {
	case "", IsolationNative, IsolationGVisor:
	default:
		return fmt.Errorf("isolation %q: want %q (the default) or %q: %w", s.Isolation, IsolationNative, IsolationGVisor, ErrInvalid)
	}
	l := s.Limits
	if l.CPUs < 0 || l.MemoryBytes < 0 || l.Pids < NoPidsLimit || l.DiskBytes < 0 || s.TTL < 0 {
		return fmt.Errorf("negative limit or TTL in %+v (ttl %s): limits are 0 (none) or positive: %w", l, s.TTL, ErrInvalid)
	}
	return nil
}

// MaxUserNameLen is the longest user name a sandbox may run as (the
// limit of Linux's useradd and of utmp records).
const MaxUserNameLen = 32

// ValidUserName returns nil if name can name a sandbox's user: 1 to
// MaxUserNameLen characters of the POSIX portable filename set (letters,
// digits, '.', '_', '-'), not starting with '-', and neither "." nor "..".
// A numeric name is a uid. Anything else is an error wrapping ErrInvalid
// that says what is allowed; it does not repeat the name, which may look
// like a path.
func ValidUserName(name string) error {
	ok := name != "" && len(name) <= MaxUserNameLen && name[0] != '-' && name != "." && name != ".."
	for i := 0; ok && i < len(name); i++ {
		c := name[i]
		ok = 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '.' || c == '_' || c == '-'
	}
	if !ok {
		return fmt.Errorf("user name: use 1 to %d letters, digits, '.', '_' or '-', not starting with '-' and not \".\" or \"..\" (a user of the sandbox such as user or root, or a numeric uid): %w", MaxUserNameLen, ErrInvalid)
	}
	return nil
}
