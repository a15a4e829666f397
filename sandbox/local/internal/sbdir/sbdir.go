// Package sbdir is what the local runtime, a sandbox's supervisor and its
// pid 1 share: the sandbox's state directory (state.json, init.json, its
// lock) and the types written there. The three run as separate programs
// and the supervisor and pid 1 start at every sandbox start, so this
// package imports nothing heavy: no guest, template, cgroups or nftables.
package sbdir

import (
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
)

// State is what the runtime and the supervisor share about one sandbox, in
// state.json. The supervisor owns Running/ShimPID/InitPID while it lives;
// anyone may find it dead and mark the sandbox stopped.
type State struct {
	Info     sandbox.Info `json:"info"`
	Token    string       `json:"token"`
	Template string       `json:"template_digest,omitempty"`
	ShimPID  int          `json:"shim_pid,omitempty"`
	InitPID  int          `json:"init_pid,omitempty"`
	// Deadline is when the TTL stops the sandbox; zero for none. It is
	// absolute so a resumed or re-attached supervisor keeps the clock.
	Deadline time.Time `json:"deadline,omitempty"`
	// StopReason says why the sandbox last stopped ("ttl", "stopped",
	// "exited: ...").
	StopReason string `json:"stop_reason,omitempty"`
	// CreatorPID is the process still creating the sandbox (0 once it
	// is made): if that process dies mid-create, the next List or Get
	// deletes what it left.
	CreatorPID int `json:"creator_pid,omitempty"`
	// Pooled marks a sandbox started ahead of demand and not yet given
	// out: List hides it, Create claims it.
	Pooled bool `json:"pooled,omitempty"`
	// CgroupRoot is where the sandbox's cgroup lives (cgroup.Root's text
	// form), so any process can find it again.
	CgroupRoot string `json:"cgroup_root,omitempty"`
	// Init is the config handed to pid 1.
	Init Init `json:"init"`
	// Runsc is the runsc program of a gVisor sandbox (Spec.Isolation),
	// found when it was made.
	Runsc string `json:"runsc,omitempty"`
}

// Init is what the supervisor hands the sandbox's first process,
// written to init.json in the sandbox's directory.
type Init struct {
	Dir       string            `json:"dir"`       // the sandbox's state directory (host path)
	Lower     string            `json:"lower"`     // template root filesystem (read-only lower layer)
	Binds     []string          `json:"binds"`     // host directories bound read-only at the same path
	Upper     string            `json:"upper"`     // the sandbox's own disk
	Work      string            `json:"work"`      // overlayfs work dir, on the same filesystem as Upper
	Workspace string            `json:"workspace"` // sandbox path of the workspace
	UID       int               `json:"uid"`
	GID       int               `json:"gid"`
	User      string            `json:"user"`
	Hostname  string            `json:"hostname"`
	Env       map[string]string `json:"env"`
	TmpSize   string            `json:"tmp_size"`
	Harden    bool              `json:"harden"`
	// OOMFile is the host path of the sandbox cgroup's OOM counter
	// (memory.events or memory.oom_control), opened before pivot_root.
	OOMFile string `json:"oom_file,omitempty"`
	// WorkTasks are the host paths of the tasks files (one per cgroup v1
	// hierarchy) of the group the sandbox's commands run in, apart from
	// the daemon (see package host); pid 1 opens them before pivot_root,
	// and the thread it starts commands from joins that group through
	// them. None on cgroup v2 or without cgroups.
	WorkTasks []string `json:"work_tasks,omitempty"`
	// WorkOOMFile is the OOM counter of the commands' group; its kills
	// count there, not in OOMFile (v1 counts each group's own).
	WorkOOMFile string `json:"work_oom_file,omitempty"`
	// Net is the sandbox's network beyond loopback (nil: none).
	Net *Net `json:"net,omitempty"`
}

// Network modes of sandbox.Network.Mode.
const (
	NetworkNone     = "none"
	NetworkInternet = "internet"
	NetworkAllow    = "allow"
)

// Net is a networked sandbox's network. The policy (Mode, Allow, DNS)
// and the interface names are fixed when the sandbox is made; its /30 is
// not: the supervisor picks one host-wide at every start (Range says
// where from) and the host's own interfaces are the registry, so a
// stopped sandbox holds no addresses and may get others when it resumes.
type Net struct {
	Mode string `json:"mode"`
	// HostIf is the host end of the veth pair; PeerIf the sandbox end
	// until it is renamed eth0 inside the sandbox.
	HostIf string `json:"host_if"`
	PeerIf string `json:"peer_if"`
	// Range is where the sandbox's /30 comes from.
	Range netip.Prefix `json:"range"`
	// Gateway (the host end) and Addr (the sandbox's eth0) are the /30
	// of the sandbox's current run, or of its last one once stopped;
	// invalid before its first start.
	Gateway netip.Prefix `json:"gateway"`
	Addr    netip.Prefix `json:"addr"`
	Allow   []AllowRule  `json:"allow,omitempty"`
	DNS     []netip.Addr `json:"dns,omitempty"`
}

// AllowRule lets a sandbox reach Net, on Port (TCP and UDP) when set.
type AllowRule struct {
	Net  netip.Prefix `json:"net"`
	Port uint16       `json:"port,omitempty"`
}

// IPNet is p in the form netlink takes.
func IPNet(p netip.Prefix) *net.IPNet {
	return &net.IPNet{IP: net.IP(p.Addr().AsSlice()), Mask: net.CIDRMask(p.Bits(), 32)}
}

const (
	// ListenFD is the descriptor of the daemon's listening socket, which
	// the runtime hands the supervisor and the supervisor pid 1
	// (ExtraFiles[0]).
	ListenFD = 3
	// DefaultPath is the PATH of the supervisor and pid 1.
	DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
	// TokenEnv carries the daemon's access token from the supervisor to
	// pid 1. It is guest.TokenEnv, spelled out so the supervisor need not
	// link the daemon (package local's tests check that they agree).
	TokenEnv = "COVE_GUEST_TOKEN"
)

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// states caches parsed state files for the check before every call.
var states sbutil.JSONFiles[State]

// Read reads a sandbox's state from disk; ErrNotFound if it has none.
func Read(dir string) (*State, error) {
	st, err := states.Read(statePath(dir))
	return result(dir, st, err)
}

// Cached is Read answered from memory while the file is unchanged; the
// result must not be modified.
func Cached(dir string) (*State, error) {
	st, err := states.Cached(statePath(dir))
	return result(dir, st, err)
}

func result(dir string, st State, err error) (*State, error) {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("sandbox %q: %w", filepath.Base(dir), sandbox.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("reading sandbox %q: %w", filepath.Base(dir), err)
	}
	return &st, nil
}

// Write replaces a sandbox's state.
func Write(dir string, st *State) error {
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return replaceFile(statePath(dir), data)
}

// replaceFile replaces the file at path with data: through a new file
// renamed over it, so no reader sees half of it; but on a full host
// filesystem, where the new file gets no block, by overwriting the file
// in place, in the blocks it already has (a stop must be recorded, and a
// stopped sandbox resumed, on a full host; a few KiB of JSON fit in the
// file's block, and one block is written whole).
func replaceFile(path string, data []byte) error {
	tmp := path + ".tmp"
	err := os.WriteFile(tmp, data, 0o600)
	if err == nil {
		return os.Rename(tmp, path)
	}
	os.Remove(tmp)
	if !errors.Is(err, syscall.ENOSPC) && !errors.Is(err, syscall.EDQUOT) {
		return err
	}
	// No O_TRUNC: truncating would give back the blocks the write needs.
	f, ferr := os.OpenFile(path, os.O_WRONLY, 0)
	if ferr != nil {
		return err
	}
	_, err = f.WriteAt(data, 0)
	if err == nil {
		err = f.Truncate(int64(len(data)))
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// Lock takes the sandbox's lock (flock on DIR/lock) for a
// read-modify-write of its state; the returned func releases it.
// ErrNotFound if the directory is gone.
func Lock(dir string) (func(), error) {
	f, err := os.OpenFile(filepath.Join(dir, "lock"), os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		if errors.Is(err, os.ErrNotExist) {
			return nil, fmt.Errorf("sandbox %q: %w", filepath.Base(dir), sandbox.ErrNotFound)
		}
		return nil, err
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, err
	}
	return func() { syscall.Flock(int(f.Fd()), syscall.LOCK_UN); f.Close() }, nil
}

// Update applies fn to the sandbox's state under its lock and writes the
// result, unless fn fails (then its error is returned).
func Update(dir string, fn func(*State) error) (*State, error) {
	unlock, err := Lock(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, err := Read(dir)
	if err != nil {
		return nil, err
	}
	if err := fn(st); err != nil {
		return nil, err
	}
	return st, Write(dir, st)
}

func initPath(dir string) string { return filepath.Join(dir, "init.json") }

// WriteInit saves the pid-1 config next to the state.
func WriteInit(dir string, cfg *Init) error {
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return replaceFile(initPath(dir), data)
}

// ReadInit reads what WriteInit saved.
func ReadInit(dir string) (*Init, error) {
	data, err := os.ReadFile(initPath(dir))
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox's init config: %w", err)
	}
	var cfg Init
	if err := json.Unmarshal(data, &cfg); err != nil {
		return nil, fmt.Errorf("reading the sandbox's init config: %w", err)
	}
	return &cfg, nil
}

// NetLockPath is the lock of every Cove process on this host that
// changes sandbox networks: the addresses, routes and nftables tables
// they make are the host's, whatever state directory a runtime uses (the
// CLI's and cove serve's differ), so the lock lives in one fixed place.
const NetLockPath = "/run/cove/net.lock"

// LockNetwork takes the host-wide network lock (NetLockPath): it
// serialises picking a sandbox's subnet, the ruleset changes and the
// forwarding switch of all Cove installs on the host.
func LockNetwork() (unlock func(), err error) {
	if err := os.MkdirAll(filepath.Dir(NetLockPath), 0o755); err != nil {
		return nil, fmt.Errorf("locking the sandbox networks: %w", err)
	}
	f, err := os.OpenFile(NetLockPath, os.O_CREATE|os.O_RDWR|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking the sandbox networks: %w", err)
	}
	if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX); err != nil {
		f.Close()
		return nil, fmt.Errorf("locking the sandbox networks: %w", err)
	}
	return func() { f.Close() }, nil
}
