package remote_test

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"slices"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// tags lists the tags of a session's background processes.
func tags(t *testing.T, s sandbox.Session) []string {
	t.Helper()
	procs, err := s.Processes(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, p := range procs {
		out = append(out, p.Tag)
	}
	return out
}

// TestIsolation: the client asks for the tier and reads it back; on
// native, Pause and ForkMemory say the tier cannot (ErrUnavailable) and
// ForkN copies the disk; on gvisor, Pause keeps a background process
// that Resume brings back, and ForkMemory copies it.
func TestIsolation(t *testing.T) {
	ts := startServer(t)
	rt := ts.runtime(t, ts.teamKey(t, "iso"))
	ctx := context.Background()

	nat, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Delete(ctx, nat.ID())
	if in, err := nat.Info(ctx); err != nil || in.Spec.Isolation != "" || in.Paused {
		t.Errorf("a native sandbox's info: %v, isolation %q paused %v; want native (\"\"), not paused", err, in.Spec.Isolation, in.Paused)
	}
	if err := rt.Pause(ctx, nat.ID()); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("pause of a native sandbox: %v, want ErrUnavailable", err)
	}
	if in, _ := nat.Info(ctx); in.State != sandbox.StateRunning {
		t.Errorf("a refused pause left it %s", in.State)
	}
	if _, err := rt.ForkMemory(ctx, nat.ID(), 2); !errors.Is(err, sandbox.ErrUnavailable) {
		t.Errorf("memory fork of a native sandbox: %v, want ErrUnavailable", err)
	}
	copies, err := rt.ForkN(ctx, nat.ID(), 2)
	if err != nil || len(copies) != 2 {
		t.Fatalf("ForkN 2 of a native sandbox: %v, %d copies", err, len(copies))
	}
	for _, c := range copies {
		rt.Delete(ctx, c.ID())
	}

	if ts.HostPaths {
		t.Skip("the gvisor tier is the local runtime's, which needs root")
	}
	if _, err := exec.LookPath("runsc"); err != nil {
		if _, err := os.Stat("/usr/local/bin/runsc"); err != nil {
			t.Skip("runsc is not installed (scripts/deps.sh installs it)")
		}
	}
	gv, err := rt.Create(ctx, sandbox.Spec{Isolation: sandbox.IsolationGVisor})
	if err != nil {
		t.Fatal(err)
	}
	defer rt.Delete(ctx, gv.ID())
	if in, err := gv.Info(ctx); err != nil || in.Spec.Isolation != sandbox.IsolationGVisor {
		t.Fatalf("a gvisor sandbox's info: %v, isolation %q", err, in.Spec.Isolation)
	}
	if _, err := gv.Start(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"600"}, Tag: "sleeper"}); err != nil {
		t.Fatal(err)
	}
	if err := rt.Pause(ctx, gv.ID()); err != nil {
		t.Fatalf("pause: %v", err)
	}
	if in, err := gv.Info(ctx); err != nil || in.State != sandbox.StateStopped || !in.Paused {
		t.Errorf("after pause: %v, %s paused %v; want stopped and paused", err, in.State, in.Paused)
	}
	back, err := rt.Resume(ctx, gv.ID())
	if err != nil {
		t.Fatal(err)
	}
	if got := tags(t, back); !slices.Contains(got, "sleeper") {
		t.Errorf("after resume the processes are %q, want the sleeper", got)
	}
	kids, err := rt.ForkMemory(ctx, gv.ID(), 2)
	if err != nil || len(kids) != 2 {
		t.Fatalf("memory fork of 2: %v, %d", err, len(kids))
	}
	for _, k := range kids {
		defer rt.Delete(ctx, k.ID())
		if got := tags(t, k); !slices.Contains(got, "sleeper") {
			t.Errorf("copy %s runs %q, want the sleeper", k.ID(), got)
		}
	}
}
