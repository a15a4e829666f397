package cli

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/front"
	"github.com/cove-sandbox/cove/sandbox"
)

// cliTarget is how much a CLI exec may cost beyond the in-process round
// trip: the start of the cove process, finding the sandbox, connecting.
const cliTarget = 3 * time.Millisecond

// benchCLI times the real cove binary running `cove sandbox exec ID --
// true` n times beside the same exec made in this process through the
// local runtime, and prints p50/p90 of each, their difference and ratio,
// and the time of `cove version`: what starting cove costs any command.
func benchCLI(ctx context.Context, n int, stdout, stderr io.Writer) error {
	if os.Geteuid() != 0 {
		fmt.Fprintln(stderr, "cli exec: skipped (cove sandbox runs the local runtime, which needs root)")
		return nil
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if f := os.Getenv(front.FrontEnv); f != "" {
		exe = f // the binary the user ran, not the full cove it handed to
	}
	dir, err := os.MkdirTemp("", "cove-bench-cli-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	// Where `cove sandbox --state-dir dir` looks; no pool (COVE_POOL is
	// not read), so deleting the one sandbox leaves nothing behind.
	rt, err := runtimes.BenchLocal(filepath.Join(dir, "sandboxes"), 0)
	if err != nil {
		return err
	}
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		return err
	}
	defer rt.Delete(context.WithoutCancel(ctx), s.ID())
	fmt.Fprintf(stderr, "→ cli exec: %d runs of cove sandbox exec ID -- true, and in process\n", n)
	inproc, err := timeAll(n, func() error {
		_, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
		return err
	})
	if err != nil {
		return err
	}
	env := cliEnv()
	cli, err := timeAll(n, func() error {
		cmd := exec.CommandContext(ctx, exe, "sandbox", "--state-dir", dir, "exec", s.ID(), "--", "true")
		cmd.Env = env
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("cove sandbox exec: %v: %s", err, out)
		}
		return nil
	})
	if err != nil {
		return err
	}
	// The start of cove alone, which every command pays before its work.
	start, err := timeAll(n, func() error {
		cmd := exec.CommandContext(ctx, exe, "version")
		cmd.Env = env
		return cmd.Run()
	})
	if err != nil {
		return err
	}
	// The floor of any command: starting a process that does nothing.
	floor, err := timeAll(n, func() error { return exec.CommandContext(ctx, "true").Run() })
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "measure\tcove CLI\tin process\tdifference\tratio\ttarget")
	for _, p := range []int{50, 90} {
		c, i := pct(cli, p), pct(inproc, p)
		target := ""
		if p == 50 {
			target = "difference < " + fmtDur(cliTarget)
		}
		fmt.Fprintf(tw, "sandbox exec true p%d\t%s\t%s\t%s\t%.1fx\t%s\n", p, fmtDur(c), fmtDur(i), fmtDur(c-i), float64(c)/float64(i), target)
	}
	fmt.Fprintf(tw, "cove version (the start alone) p50\t%s\t\t\t\t\n", fmtDur(pct(start, 50)))
	fmt.Fprintf(tw, "true (a process that does nothing) p50\t%s\t\t\t\t\n", fmtDur(pct(floor, 50)))
	// What no CLI can beat: its own start plus the exec it asks for.
	least := pct(start, 50) + pct(inproc, 50)
	fmt.Fprintf(tw, "cli exec / (cove version + in process) p50\t%.2fx\t\t\t\t\n", float64(pct(cli, 50))/float64(least))
	return tw.Flush()
}

// timeAll runs fn n times after one untimed run and returns each run's time.
func timeAll(n int, fn func() error) ([]time.Duration, error) {
	if err := fn(); err != nil {
		return nil, err
	}
	d := make([]time.Duration, n)
	for i := range d {
		t := time.Now()
		if err := fn(); err != nil {
			return nil, err
		}
		d[i] = time.Since(t)
	}
	return d, nil
}

// cliEnv is this environment without what would send the CLI elsewhere
// (a server) or make it do more than an exec (a pool).
func cliEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "COVE_SERVER", "COVE_POOL", "COVE_HOME":
			continue
		}
		env = append(env, kv)
	}
	return env
}
