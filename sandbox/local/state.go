package local

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
)

// state is what the runtime and the supervisor share about one sandbox, in
// state.json. The supervisor owns Running/ShimPID/InitPID while it lives;
// anyone may find it dead and mark the sandbox stopped.
type state struct {
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
	Init initConfig `json:"init"`
}

func statePath(dir string) string { return filepath.Join(dir, "state.json") }

// states caches parsed state files for the check before every call.
var states sbutil.JSONFiles[state]

// readState reads a sandbox's state from disk.
func readState(dir string) (*state, error) {
	st, err := states.Read(statePath(dir))
	return stateResult(dir, st, err)
}

// cachedState is readState answered from memory while the file is
// unchanged; the result must not be modified.
func cachedState(dir string) (*state, error) {
	st, err := states.Cached(statePath(dir))
	return stateResult(dir, st, err)
}

func stateResult(dir string, st state, err error) (*state, error) {
	switch {
	case errors.Is(err, os.ErrNotExist):
		return nil, fmt.Errorf("sandbox %q: %w", filepath.Base(dir), sandbox.ErrNotFound)
	case err != nil:
		return nil, fmt.Errorf("reading sandbox %q: %w", filepath.Base(dir), err)
	}
	return &st, nil
}

func writeState(dir string, st *state) error { return sbutil.WriteJSON(statePath(dir), st) }

// lockDir takes the sandbox's lock (flock on DIR/lock) for a
// read-modify-write of its state; the returned func releases it.
func lockDir(dir string) (func(), error) {
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

// updateState applies fn to the sandbox's state under its lock.
func updateState(dir string, fn func(*state) error) (*state, error) {
	unlock, err := lockDir(dir)
	if err != nil {
		return nil, err
	}
	defer unlock()
	st, err := readState(dir)
	if err != nil {
		return nil, err
	}
	if err := fn(st); err != nil {
		return nil, err
	}
	return st, writeState(dir, st)
}
