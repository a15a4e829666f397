package local

import (
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// The sandbox's state directory is shared with the supervisor and pid 1,
// which run as their own programs (packages shim and pid1): its types and
// files are package sbdir's, named here as the runtime has always named
// them.

// state is what the runtime and the supervisor share about one sandbox, in
// state.json (sbdir.State).
type state = sbdir.State

// initConfig is what the supervisor hands the sandbox's first process, in
// init.json (sbdir.Init).
type initConfig = sbdir.Init

// readState reads a sandbox's state from disk.
func readState(dir string) (*state, error) { return sbdir.Read(dir) }

// cachedState is readState answered from memory while the file is
// unchanged; the result must not be modified.
func cachedState(dir string) (*state, error) { return sbdir.Cached(dir) }

func writeState(dir string, st *state) error { return sbdir.Write(dir, st) }

// updateState applies fn to the sandbox's state under its lock.
func updateState(dir string, fn func(*state) error) (*state, error) {
	return sbdir.Update(dir, fn)
}

// defaultPath is the supervisor's and pid 1's PATH.
const defaultPath = sbdir.DefaultPath
