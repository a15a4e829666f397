// Package app is Cove's wiring: it turns the configuration (flags,
// COVE_HOME, COVE_SERVER, COVE_API_KEY and the other COVE_ variables)
// into the concrete runtime, store, model and server the commands run on.
// It is the one package that imports the implementations (sandbox/local,
// sandbox/hostproc, sandbox/remote, store/sqlite, agent/model/openai);
// internal/cli keeps the subcommands, flags and terminal output.
package app

import (
	"os"
	"path/filepath"
)

// DataDir is Cove's state directory, where sandboxes and templates live:
// override (--state-dir) when given, else $COVE_HOME, else /var/lib/cove
// as root, else $XDG_DATA_HOME/cove or ~/.local/share/cove.
func DataDir(override string) string {
	if override != "" {
		return override
	}
	if h := os.Getenv("COVE_HOME"); h != "" {
		return h
	}
	if os.Geteuid() == 0 {
		return "/var/lib/cove"
	}
	if x := os.Getenv("XDG_DATA_HOME"); x != "" {
		return filepath.Join(x, "cove")
	}
	if h, err := os.UserHomeDir(); err == nil {
		return filepath.Join(h, ".local/share/cove")
	}
	return filepath.Join(os.TempDir(), "cove")
}

// ServerURL is where a command's sandboxes are: flag (--server) when given,
// else $COVE_SERVER; "" is this machine.
func ServerURL(flag string) string {
	if flag != "" {
		return flag
	}
	return os.Getenv("COVE_SERVER")
}
