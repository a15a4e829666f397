// Package runtimes opens the sandbox runtimes a command works on (the
// local runtime, hostproc, a Cove server's) and finds Cove's state
// directory. It is the light part of the wiring: `cove sandbox` runs on
// it alone, without the server's, the harness's or the store's packages
// (whose start-up every one-shot CLI command would otherwise pay).
package runtimes

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
