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
