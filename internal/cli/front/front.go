// Package front is the cove binary that make build ships: a small
// program that runs the one-shot sandbox commands itself and hands every
// other command to the full cove it carries.
//
// A Go program initialises every package it links before main runs. The
// full cove links the server, the harness, the store, the model clients
// and OpenTelemetry, whose start-up costs a one-shot `cove sandbox exec
// ID -- true` several times the exec itself. The front links only the
// runtimes (internal/app/runtimes), so those commands start as fast as a
// small Go program; `cove serve`, `cove run` and the rest pay one more
// exec (about the start of the front) for the same cove as before.
package front

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"syscall"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/internal/cli/sandboxbin"
	"github.com/cove-sandbox/cove/internal/cli/sandboxcli"
)

// FrontEnv names the front's own path in the full cove's environment, so
// that cove bench times the binary a user runs, not the copy it hands to.
const FrontEnv = "COVE_FRONT"

// Light reports whether the front runs args itself: cove sandbox and
// cove version. Help, the hidden roles and everything else go to the
// full cove.
func Light(args []string) bool {
	return len(args) > 0 && (args[0] == "sandbox" || args[0] == "version")
}

// Run runs a light command line (Light).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	switch {
	case len(args) > 0 && args[0] == "sandbox":
		err := sandboxcli.Cmd(ctx, args[1:], stdout, stderr)
		if errors.Is(err, clibase.ErrHelp) {
			return nil
		}
		return err
	case len(args) > 0 && args[0] == "version":
		fmt.Fprintln(stdout, "cove", clibase.Version)
		return nil
	}
	return fmt.Errorf("the front runs only cove sandbox and cove version, not %q", args)
}

// Full is the full cove the front carries: gzip-compressed, with the hex
// SHA-256 of the program itself, computed by make build.
type Full struct {
	Gzip []byte
	Sum  string
}

// Install puts the full cove in Cove's state directory (bin/, beside the
// sandbox programs, checked the same way: hashed when written or first
// met, then trusted by a stamp of its identity) and returns its path.
func (f Full) Install() (string, error) {
	if len(f.Gzip) == 0 {
		return "", fmt.Errorf("this cove carries no full cove to run the command: build it with make build")
	}
	dir := filepath.Join(runtimes.DataDir(""), "bin")
	path, err := sandboxbin.Install(dir, "cove-full", f.unpack, f.Sum)
	if err != nil {
		return "", err
	}
	dropOthers(dir, path)
	return path, nil
}

// dropOthers removes the copies of other builds' full cove from dir (an
// upgrade leaves the last one's 100 MB behind); a process still running
// one keeps it until it ends.
func dropOthers(dir, keep string) {
	old, _ := filepath.Glob(filepath.Join(dir, "cove-full-*"))
	for _, p := range old {
		if p != keep && p != keep+".verified" {
			os.Remove(p)
		}
	}
}

func (f Full) unpack() ([]byte, error) {
	zr, err := gzip.NewReader(bytes.NewReader(f.Gzip))
	if err != nil {
		return nil, fmt.Errorf("the full cove carried is not gzip: rebuild cove with make build: %w", err)
	}
	return io.ReadAll(zr)
}

// Exec replaces this process with the full cove, running args; it
// returns only on failure.
func (f Full) Exec(args []string) error {
	path, err := f.Install()
	if err != nil {
		return err
	}
	env := os.Environ()
	if self, err := os.Executable(); err == nil {
		env = append(env, FrontEnv+"="+self)
	}
	argv := append([]string{os.Args[0]}, args...)
	if err := syscall.Exec(path, argv, env); err != nil {
		return fmt.Errorf("starting the full cove %s: %w", path, err)
	}
	return nil
}
