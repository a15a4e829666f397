package local

import (
	"context"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// What a tenant would try on the gVisor tier in particular. (A link
// planted in place of the daemon's socket: TestGVisorSocketDirWalled.)

// TestGVisorTmpFill: /tmp is gVisor's memory, which no process owns. A
// tenant who fills it meets "no space left" before the sandbox's memory
// limit (its size is at most half the limit), the daemon goes on with
// the same run, and the host's OOM killer never acts in its group.
func TestGVisorTmpFill(t *testing.T) {
	rt := newGVisor(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 192 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	daemon := daemonPID(t, rt.Runtime, s.ID())
	g := sandboxGroup(t, rt.Runtime, s.ID())
	out, _ := run(t, s, "df -k /tmp | tail -1; head -c 400M /dev/zero > /tmp/fill; echo rc=$?; du -k /tmp/fill")
	if !strings.Contains(out, "No space left on device") {
		t.Errorf("filling /tmp past the memory limit: %q, want no space left", out)
	}
	answers(t, s, time.Minute)
	stillRunning(t, rt.Runtime, s.ID(), daemon)
	// /tmp stays full; commands still run, and freeing it works.
	if out, st := run(t, s, "rm /tmp/fill && echo freed"); out != "freed\n" || !st.Success() {
		t.Errorf("freeing /tmp: %q %+v", out, st)
	}
	if n := groupOOMKills(t, g); n != 0 {
		t.Errorf("the host's OOM killer acted %d times in the sandbox's group", n)
	}
}

// TestGVisorOutputFlood: a command that writes as fast as it can, on
// stdout and stderr, for as long as it runs, is ended by its caller's
// deadline; the daemon and the sandbox go on, and nothing of it reaches
// the host's log of the sandbox.
func TestGVisorOutputFlood(t *testing.T) {
	rt := newGVisor(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{MemoryBytes: 256 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	daemon := daemonPID(t, rt.Runtime, s.ID())
	var n countWriter
	fctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	_, err = s.Exec(fctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "yes flood >&2 & yes flood"}, Stdout: &n, Stderr: &n})
	if err == nil {
		t.Error("the flood ended by itself")
	}
	if n.Load() == 0 {
		t.Error("no output of the flood arrived")
	}
	t.Logf("%d MB of output in 5s", n.Load()>>20)
	// A flood with nobody reading (a background process with output to
	// the daemon) must not grow the daemon past its limit either.
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "yes flood"}, Stdout: io.Discard})
	if err != nil {
		t.Fatal(err)
	}
	time.Sleep(3 * time.Second)
	p.Signal(ctx, sandbox.SIGKILL)
	answers(t, s, time.Minute)
	stillRunning(t, rt.Runtime, s.ID(), daemon)
	if log, err := os.ReadFile(filepath.Join(rt.dir(s.ID()), "sandbox.log")); err == nil && strings.Contains(string(log), "flood") {
		t.Error("the sandbox's output reached the host's log of it")
	}
}

// countWriter counts what is written to it, from any goroutine.
type countWriter struct{ atomic.Int64 }

func (c *countWriter) Write(p []byte) (int, error) {
	c.Add(int64(len(p)))
	return len(p), nil
}
