// Package runsc is what the local runtime's gVisor tier says to gVisor's
// runsc: the OCI bundle a sandbox runs from and the commands that run,
// checkpoint, restore, signal and delete it. The supervisor, which starts
// at every sandbox start, links it: it imports nothing heavy.
package runsc

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// Dirs inside a gVisor sandbox: what the supervisor binds in from the host.
const (
	// InitPath is the daemon's program (the host's cove-sandbox, bound
	// read-only).
	InitPath = "/run/cove/init"
	// SocketDir holds the daemon's socket; the host sees the same
	// directory as HostSocketDir in the sandbox's state directory, and
	// connects to the socket the daemon binds there (runsc's
	// --host-uds=create lets it make a host socket).
	SocketDir = "/run/cove/guest"
	// SocketName is the daemon's socket in SocketDir.
	SocketName = "guest.sock"
	// HostSocketDir is SocketDir's host side, in the state directory.
	HostSocketDir = "gv"
	// ConfigEnv carries the daemon's settings (Config, as JSON) from the
	// supervisor to the daemon.
	ConfigEnv = "COVE_GVISOR_INIT"
)

// Signals the host sends the daemon (pid 1) through runsc kill: gVisor
// cannot save a host socket, so before a checkpoint the daemon closes its
// listener and every connection (Drop), and after a restore it listens
// again (Listen).
const (
	SignalDrop   = "USR2"
	SignalListen = "USR1"
)

// Config is what a gVisor sandbox's daemon needs to know; the rest (root
// filesystem, mounts, hostname, network) the bundle gives runsc.
type Config struct {
	Workspace string            `json:"workspace"`
	User      string            `json:"user"`
	UID       int               `json:"uid"`
	GID       int               `json:"gid"`
	Env       map[string]string `json:"env"`
	// Sudo says the daemon's program is bound over /usr/bin/sudo.
	Sudo bool `json:"sudo"`
	// Pids is the commands' pids limit (0: none), which gVisor's own
	// pids cgroup enforces inside the sandbox: the host's group holds
	// gVisor itself too, and a bomb that filled it would end the Sentry.
	Pids int `json:"pids,omitempty"`
	// MemoryBytes is the sandbox's memory limit (0: none). gVisor's
	// kernel has no OOM killer: past it, the host's would end the whole
	// sandbox, so the daemon ends the largest process itself first.
	MemoryBytes int64 `json:"memory_bytes,omitempty"`
}

// MemoryOverhead is what a gVisor sandbox's cgroup holds beyond its
// memory limit: gVisor's own processes (the Sentry's heap, the gofer)
// and the headroom in which the daemon notices a sandbox past its limit
// and ends a process, before the host's OOM killer would end the
// Sentry and with it the sandbox.
const MemoryOverhead = 192 << 20

// ProcessMemory is what each process of a gVisor sandbox costs the host
// beyond its own pages, which gVisor's view (its /proc/meminfo) does not
// show: the systrap stub process and its threads, and the Sentry's
// record of it. Measured: 1000 sleeping processes took 600 MB of the
// cgroup and 150 MB of gVisor's view. The daemon counts it against the
// memory limit, so a sandbox of many small processes meets its own OOM
// killer before the host's.
const ProcessMemory = 512 << 10

// Runsc runs runsc for one sandbox: Path is the program, Root its state
// directory for the sandbox (--root), ID the container's id.
type Runsc struct {
	Path string
	Root string
	ID   string
	// Network is "none" (loopback only) or "sandbox" (gVisor's netstack
	// over the interfaces of the bundle's network namespace).
	Network string
}

// Flags are the global flags every command of this sandbox takes; they
// must match between run, checkpoint and restore.
func (r Runsc) Flags() []string {
	return []string{
		"--root", r.Root,
		// systrap works everywhere (no KVM needed; this host's nested KVM
		// hangs gVisor's kvm platform).
		"--platform", "systrap",
		// Writes go to the sandbox's own disk (the bundle's root is its
		// overlay), not to an overlay in memory that a stop would lose.
		"--overlay2", "none",
		// The daemon's socket is one it binds in a directory of the host's.
		"--host-uds", "create",
		"--network", r.Network,
		// The supervisor starts runsc in the sandbox's cgroup, whose
		// limits then cover gVisor's own processes and all they run.
		"--ignore-cgroups",
	}
}

// Command is runsc with this sandbox's flags and args.
func (r Runsc) Command(ctx context.Context, args ...string) *exec.Cmd {
	if ctx == nil {
		return exec.Command(r.Path, append(r.Flags(), args...)...)
	}
	return exec.CommandContext(ctx, r.Path, append(r.Flags(), args...)...)
}

// Run runs cmd and returns its error with the last lines of what runsc
// said (runsc's words name host paths: callers log them, never show
// them to a tenant).
func run(cmd *exec.Cmd) error {
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("runsc %s: %w: %s", cmd.Args[len(cmd.Args)-1], err, sbutil.LastLines(out.String(), 3))
	}
	return nil
}

// Signal sends sig ("USR1", "KILL") to the sandbox's pid 1.
func (r Runsc) Signal(ctx context.Context, sig string) error {
	return run(r.Command(ctx, "kill", r.ID, sig))
}

// Checkpoint saves the sandbox's processes and memory into dir and ends
// the sandbox.
func (r Runsc) Checkpoint(ctx context.Context, dir string) error {
	return run(r.Command(ctx, "checkpoint", "--image-path", dir, r.ID))
}

// Delete removes what runsc keeps of the sandbox, killing it first if it
// still runs. A sandbox runsc does not know is not an error.
func (r Runsc) Delete(ctx context.Context) error {
	if _, err := os.Stat(r.Root); errors.Is(err, os.ErrNotExist) {
		return nil
	}
	err := run(r.Command(ctx, "delete", "--force", r.ID))
	if err != nil && strings.Contains(err.Error(), "does not exist") {
		return nil
	}
	return err
}

// Installed finds runsc: path if set, else runsc on PATH, else
// /usr/local/bin/runsc. It returns "" when there is none.
func Installed(path string) string {
	if path != "" {
		if fi, err := os.Stat(path); err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0 {
			return path
		}
		return ""
	}
	if p, err := exec.LookPath("runsc"); err == nil {
		if abs, err := filepath.Abs(p); err == nil {
			return abs
		}
	}
	if fi, err := os.Stat("/usr/local/bin/runsc"); err == nil && fi.Mode().IsRegular() {
		return "/usr/local/bin/runsc"
	}
	return ""
}

// MarshalConfig is c as the daemon reads it from ConfigEnv.
func MarshalConfig(c Config) (string, error) {
	b, err := json.Marshal(c)
	return string(b), err
}

// ForSandbox is runsc for the local sandbox in dir whose state is st:
// runsc's state lives in dir/runsc and the container is named by the
// sandbox's id.
func ForSandbox(dir string, st *sbdir.State) Runsc {
	network := "none"
	if st.Init.Net != nil {
		network = "sandbox"
	}
	return Runsc{Path: st.Runsc, Root: filepath.Join(dir, "runsc"), ID: st.Info.ID, Network: network}
}
