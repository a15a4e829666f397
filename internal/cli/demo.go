package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox"
)

// demo starts a sandbox (its daemon as a child process), writes a file,
// runs a command through the daemon with its output streamed, and deletes
// the sandbox.
func demo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("demo", flag.ContinueOnError)
	clibase.SetUsage(fs, "Usage: cove demo [--keep] [-- COMMAND ARGS...]\n\nStarts a sandbox, runs a command in it through its daemon, prints the output and deletes the sandbox.\n")
	keep := fs.Bool("keep", false, "keep the sandbox instead of deleting it")
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	cmd := fs.Args()
	if len(cmd) == 0 {
		cmd = []string{"sh", "-c", `echo "hello from $(pwd) as $(id -un)"; ls -la; cat hello.txt; echo "to stderr" >&2`}
	}
	// The isolated local runtime when we can (root), else the daemon as
	// a plain child process, said plainly.
	rt, fallback, err := runtimes.Machine("")
	kind := "isolated: namespaces, overlay root, seccomp"
	if fallback != nil {
		fmt.Fprintf(stderr, "→ %v\n  falling back to the hostproc runtime: NO isolation\n", fallback)
		kind = "daemon as a plain child process, no isolation"
	}
	if err != nil {
		return err
	}
	start := time.Now()
	fmt.Fprintf(stderr, "→ creating a sandbox (%s)\n", kind)
	s, err := rt.Create(ctx, sandbox.Spec{Env: map[string]string{"COVE_DEMO": "1"}})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "  sandbox %s ready in %s\n", s.ID(), time.Since(start).Round(time.Millisecond))
	defer func() {
		if *keep {
			fmt.Fprintf(stderr, "→ keeping sandbox %s\n", s.ID())
			return
		}
		rt.Delete(context.WithoutCancel(ctx), s.ID())
		fmt.Fprintf(stderr, "→ deleted sandbox %s\n", s.ID())
	}()
	fmt.Fprintln(stderr, "→ writing hello.txt")
	if err := s.WriteFile(ctx, "hello.txt", strings.NewReader("hello, workspace\n"), 0o644); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "→ running %q\n", strings.Join(cmd, " "))
	t := time.Now()
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: cmd[0], Args: cmd[1:], Stdout: stdout, Stderr: stderr})
	if err != nil {
		return err
	}
	fmt.Fprintf(stderr, "→ exit code %d in %s\n", st.Code, time.Since(t).Round(time.Millisecond))
	if !st.Success() {
		code := st.Code
		if code <= 0 {
			code = 1
		}
		return clibase.ExitError{Code: code}
	}
	return nil
}
