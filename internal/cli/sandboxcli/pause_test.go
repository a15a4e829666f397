package sandboxcli

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest/fake"
)

// tierRuntime is the fake with the calls of a runtime that has the
// gvisor tier: Pause of a gvisor sandbox is a stop it remembers, forks
// are new sandboxes of the same spec, counted by kind.
type tierRuntime struct {
	*fake.Runtime
	paused      map[string]bool
	memoryForks []int
	diskForks   int
}

func (r *tierRuntime) Pause(ctx context.Context, id string) error {
	if err := r.Runtime.Stop(ctx, id); err != nil {
		return err
	}
	r.paused[id] = true
	return nil
}

func (r *tierRuntime) List(ctx context.Context) ([]sandbox.Info, error) {
	infos, err := r.Runtime.List(ctx)
	for i := range infos {
		infos[i].Paused = r.paused[infos[i].ID]
	}
	return infos, err
}

func (r *tierRuntime) Fork(ctx context.Context, id string) (sandbox.Session, error) {
	s, err := r.Runtime.Get(ctx, id)
	if err != nil {
		return nil, err
	}
	in, _ := s.Info(ctx)
	r.diskForks++
	return r.Runtime.Create(ctx, in.Spec)
}

func (r *tierRuntime) ForkMemory(ctx context.Context, id string, n int) ([]sandbox.Session, error) {
	r.memoryForks = append(r.memoryForks, n)
	var out []sandbox.Session
	for range n {
		s, err := r.Fork(ctx, id)
		if err != nil {
			return nil, err
		}
		r.diskForks--
		out = append(out, s)
	}
	return out, nil
}

// TestPauseAndForkByTier: pause keeps a gvisor sandbox's memory; on
// native it stops the sandbox and says so, or refuses with
// --keep-memory; fork --count prints one id a line, from one memory
// fork of a running gvisor sandbox; ls shows the tier and paused.
func TestPauseAndForkByTier(t *testing.T) {
	ctx := context.Background()
	rt := &tierRuntime{Runtime: fake.New(), paused: map[string]bool{}}
	nat, _ := rt.Create(ctx, sandbox.Spec{})
	gv, _ := rt.Create(ctx, sandbox.Spec{Isolation: sandbox.IsolationGVisor})
	state := func(id string) sandbox.State {
		s, _ := rt.Get(ctx, id)
		in, _ := s.Info(ctx)
		return in.State
	}

	var out, errOut strings.Builder
	err := sandboxPause(ctx, rt, []string{"--keep-memory", nat.ID()}, &out, &errOut)
	if !errors.Is(err, sandbox.ErrInvalid) || !strings.Contains(err.Error(), "native") || state(nat.ID()) != sandbox.StateRunning {
		t.Errorf("pause --keep-memory of a native sandbox: %v, left %s; want ErrInvalid naming the tier, still running", err, state(nat.ID()))
	}

	out.Reset()
	errOut.Reset()
	if err := sandboxFork(ctx, rt, []string{gv.ID(), "--count", "3"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if ids := strings.Fields(out.String()); len(ids) != 3 || len(rt.memoryForks) != 1 || rt.memoryForks[0] != 3 {
		t.Errorf("fork --count 3 of a gvisor sandbox: printed %q, memory forks %v; want 3 ids from one memory fork of 3", ids, rt.memoryForks)
	}
	out.Reset()
	if err := sandboxFork(ctx, rt, []string{"--count=2", nat.ID()}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if ids := strings.Fields(out.String()); len(ids) != 2 || rt.diskForks != 2 {
		t.Errorf("fork --count 2 of a native sandbox: printed %q, %d disk forks; want 2 of each", ids, rt.diskForks)
	}
	for _, n := range []string{"0", "1000", "-1"} {
		if err := sandboxFork(ctx, rt, []string{nat.ID(), "--count", n}, &out, &errOut); !errors.Is(err, clibase.ErrUsage) {
			t.Errorf("fork --count %s: %v, want a usage error", n, err)
		}
	}

	out.Reset()
	errOut.Reset()
	if err := sandboxPause(ctx, rt, []string{nat.ID(), gv.ID()}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	if out.String() != "paused "+nat.ID()+"\npaused "+gv.ID()+"\n" {
		t.Errorf("pause printed %q", out.String())
	}
	if msg := errOut.String(); !strings.Contains(msg, nat.ID()+" was stopped with its disk; its processes ended") || strings.Contains(msg, gv.ID()) {
		t.Errorf("pause told %q; want the native sandbox's stop said plainly, nothing of the gvisor one", msg)
	}
	if !rt.paused[gv.ID()] || rt.paused[nat.ID()] || state(nat.ID()) != sandbox.StateStopped {
		t.Errorf("paused %v, native %s; want the gvisor one paused, the native one stopped", rt.paused, state(nat.ID()))
	}

	out.Reset()
	if err := sandboxList(ctx, rt, &out); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(out.String(), "\n")
	if !strings.Contains(lines[0], "TIER") {
		t.Errorf("ls header %q has no TIER", lines[0])
	}
	for _, want := range [][]string{{nat.ID(), "stopped", "native"}, {gv.ID(), "paused", "gvisor"}} {
		found := false
		for _, l := range lines {
			if f := strings.Fields(l); len(f) > 2 && f[0] == want[0] {
				found = f[1] == want[1] && f[2] == want[2]
			}
		}
		if !found {
			t.Errorf("ls has no line %q:\n%s", want, out.String())
		}
	}
}
