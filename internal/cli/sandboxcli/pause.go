package sandboxcli

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox"
)

// `cove sandbox pause` and `cove sandbox fork --count`: what the tier
// can keep. A gvisor sandbox's pause keeps its processes and memory; a
// native one's cannot, and pause then stops it (its disk is kept) and
// says so on stderr, unless --keep-memory asks for memory, which is
// refused there. A pause that quietly kept less than it said would lose
// an agent's work; one that refused on native would make scripts check
// the tier first for nothing, as E2B's pause does not either.

// tierOf is a sandbox's isolation tier, "native" when its spec names
// none.
func tierOf(in sandbox.Info) string {
	if in.Spec.Isolation == "" {
		return sandbox.IsolationNative
	}
	return in.Spec.Isolation
}

// sandboxPause pauses sandboxes: with their memory where the runtime and
// the tier can, else (without --keep-memory) stopped with their disk.
func sandboxPause(ctx context.Context, rt sandbox.Runtime, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("pause", flag.ContinueOnError)
	clibase.SetUsage(fs, sandboxHelp["pause"])
	keep := fs.Bool("keep-memory", false, "fail rather than stop a sandbox whose tier cannot keep its memory (native)")
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	return eachID(fs.Args(), func(id string) error {
		return pauseOne(ctx, rt, id, *keep, stderr)
	}, stdout, "paused")
}

// pauseOne pauses sandbox id (see sandboxPause).
func pauseOne(ctx context.Context, rt sandbox.Runtime, id string, keep bool, stderr io.Writer) error {
	s, err := rt.Get(ctx, id)
	if err != nil {
		return err
	}
	in, err := s.Info(ctx)
	if err != nil {
		return err
	}
	if in.State != sandbox.StateRunning {
		return fmt.Errorf("sandbox %s is %s, not running: nothing to pause: %w", id, in.State, sandbox.ErrState)
	}
	p, ok := rt.(sandbox.Pauser)
	if ok && tierOf(in) == sandbox.IsolationGVisor {
		return p.Pause(ctx, id)
	}
	why := fmt.Sprintf("it runs on the %s tier", tierOf(in))
	if tierOf(in) == sandbox.IsolationGVisor {
		why = "this runtime cannot keep memory"
	}
	if keep {
		return fmt.Errorf("sandbox %s cannot be paused with its memory: %s, whose pause keeps the disk only; pause without --keep-memory, or create the sandbox with --isolation gvisor: %w", id, why, sandbox.ErrInvalid)
	}
	if err := rt.Stop(ctx, id); err != nil {
		return err
	}
	fmt.Fprintf(stderr, "cove: sandbox %s was stopped with its disk; its processes ended (%s; --isolation gvisor keeps memory)\n", id, why)
	return nil
}

// sandboxFork makes --count copies of a sandbox and prints their ids,
// one a line.
func sandboxFork(ctx context.Context, rt sandbox.Runtime, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("fork", flag.ContinueOnError)
	clibase.SetUsage(fs, sandboxHelp["fork"])
	count := fs.Int("count", 1, fmt.Sprintf("how many copies, 1 to %d", api.MaxForks))
	var id string
	if len(args) > 0 && len(args[0]) > 0 && args[0][0] != '-' {
		id, args = args[0], args[1:]
	}
	if err := clibase.ParseFlags(fs, args, stdout, stderr); err != nil {
		return err
	}
	if rest := fs.Args(); id == "" && len(rest) == 1 {
		id = rest[0]
	} else if len(rest) > 0 || id == "" {
		return usageErr(stderr, "fork takes one sandbox id")
	}
	if *count < 1 || *count > api.MaxForks {
		return fmt.Errorf("--count %d: give 1 to %d: %w", *count, api.MaxForks, clibase.ErrUsage)
	}
	copies, err := forkN(ctx, rt, id, *count)
	if err != nil {
		return err
	}
	for _, s := range copies {
		fmt.Fprintln(stdout, s.ID())
	}
	return nil
}

// forkN makes n running copies of sandbox id: of a running gvisor
// sandbox with its processes and memory (one checkpoint), else of its
// disk. On error none is left.
func forkN(ctx context.Context, rt sandbox.Runtime, id string, n int) ([]sandbox.Session, error) {
	if mf, ok := rt.(sandbox.MemoryForker); ok {
		s, err := rt.Get(ctx, id)
		if err != nil {
			return nil, err
		}
		in, err := s.Info(ctx)
		if err != nil {
			return nil, err
		}
		if in.State == sandbox.StateRunning && tierOf(in) == sandbox.IsolationGVisor {
			return mf.ForkMemory(ctx, id, n)
		}
	}
	if fn, ok := rt.(interface {
		ForkN(context.Context, string, int) ([]sandbox.Session, error)
	}); ok {
		return fn.ForkN(ctx, id, n) // a server's: one request
	}
	f, ok := rt.(sandbox.Forker)
	if !ok {
		return nil, errors.New("this runtime cannot fork sandboxes")
	}
	var made []sandbox.Session
	for range n {
		s, err := f.Fork(ctx, id)
		if err != nil {
			for _, c := range made {
				rt.Delete(context.WithoutCancel(ctx), c.ID())
			}
			return nil, err
		}
		made = append(made, s)
	}
	return made, nil
}
