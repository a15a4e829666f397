package local

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/internal/sbutil"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
)

// TestSupervisorKilled: SIGKILL of a sandbox's supervisor takes its
// processes with it, and the next List shows the truth.
func TestSupervisorKilled(t *testing.T) { onTiers(t, testSupervisorKilled) }

func testSupervisorKilled(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	if _, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"300"}}); err != nil {
		t.Fatal(err)
	}
	var st *state
	deadline := time.Now().Add(10 * time.Second)
	for {
		st, _ = sbdir.Read(rt.dir(s.ID()))
		if st.InitPID != 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(5 * time.Millisecond)
	}
	tr := tracesOf(t, rt, s.ID())
	syscall.Kill(st.ShimPID, syscall.SIGKILL)
	for (sbutil.Alive(st.InitPID) || sbutil.Alive(st.ShimPID)) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if sbutil.Alive(st.InitPID) {
		t.Fatalf("pid 1 of the sandbox (%d) outlived its supervisor", st.InitPID)
	}
	infos, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for _, in := range infos {
		if in.ID == s.ID() && in.State != sandbox.StateStopped {
			now, _ := sbdir.Read(rt.dir(s.ID()))
			t.Errorf("List after the supervisor died: state %q, want stopped (state file: shim %d init %d; killed shim %d)", in.State, now.ShimPID, now.InitPID, st.ShimPID)
		}
	}
	// Nothing of its run is left: on gVisor, runsc's Sentry, gofer and
	// stub processes (which outlive runsc itself), its mounts.
	noLeftovers(t, tr, "after its supervisor was killed and a List", false)
	// It resumes with its disk, and its delete leaves nothing.
	if _, err := rt.Resume(ctx, s.ID()); err != nil {
		t.Fatalf("resume after the supervisor died: %v", err)
	}
	if err := rt.Delete(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, tr, "after its delete", true)
}

// TestDeleteLeavesNothing checks the host after a delete: no mount, no
// process, no directory.
func TestDeleteLeavesNothing(t *testing.T) { onTiers(t, testDeleteLeavesNothing) }

func testDeleteLeavesNothing(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	dir := rt.dir(s.ID())
	st, _ := sbdir.Read(dir)
	s.Start(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"300"}})
	tr := tracesOf(t, rt, s.ID())
	if err := rt.Delete(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	noLeftovers(t, tr, "after Delete", true)
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("state directory %s still exists (%v)", dir, err)
	}
	mounts, _ := os.ReadFile("/proc/self/mountinfo")
	if strings.Contains(string(mounts), dir) {
		t.Errorf("a mount under %s is left on the host", dir)
	}
	for _, pid := range []int{st.ShimPID, st.InitPID} {
		if sbutil.Alive(pid) {
			t.Errorf("process %d of the deleted sandbox still runs", pid)
		}
	}
	if _, err := rt.Get(ctx, s.ID()); err == nil {
		t.Error("Get of a deleted sandbox succeeded")
	}
}

// TestTTLStopsIdleSandbox: the supervisor enforces the TTL with nothing
// else running, and the disk is kept.
func TestTTLStopsIdleSandbox(t *testing.T) { onTiers(t, testTTLStopsIdleSandbox) }

func testTTLStopsIdleSandbox(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	// The TTL counts from the create; it must outlast the start itself,
	// which on a loaded machine took over half a second on gVisor (the
	// sandbox then stopped while starting and the create failed).
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, TTL: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	s.WriteFile(ctx, "kept.txt", strings.NewReader("kept"), 0o644)
	deadline := time.Now().Add(60 * time.Second)
	for {
		st, err := sbdir.Read(rt.dir(s.ID()))
		if err != nil {
			t.Fatal(err)
		}
		if st.Info.State == sandbox.StateStopped {
			if st.StopReason != "ttl" {
				t.Errorf("stop reason %q, want ttl", st.StopReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the TTL did not stop the sandbox within 60s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	// Resuming after the TTL is refused with a clear error.
	if _, err := rt.Resume(ctx, s.ID()); err == nil || !strings.Contains(err.Error(), "TTL") {
		t.Errorf("resume after the TTL: %v, want a refusal naming the TTL", err)
	}
	st, _ := sbdir.Read(rt.dir(s.ID()))
	data, err := os.ReadFile(st.Init.Upper + "/workspace/kept.txt")
	if err != nil || string(data) != "kept" {
		t.Errorf("disk after the TTL: %q %v", data, err)
	}
}

// TestSetDeadline: a running sandbox's TTL moves (the supervisor
// re-reads it), and a sandbox the TTL stopped resumes once its deadline
// is cleared, with a fresh TTL and its disk.
func TestSetDeadline(t *testing.T) { onTiers(t, testSetDeadline) }

func testSetDeadline(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, TTL: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	s.WriteFile(ctx, "kept.txt", strings.NewReader("kept"), 0o644)
	if err := rt.SetDeadline(ctx, s.ID(), time.Now().Add(300*time.Millisecond)); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(20 * time.Second)
	for {
		st, err := sbdir.Read(rt.dir(s.ID()))
		if err != nil {
			t.Fatal(err)
		}
		if st.Info.State == sandbox.StateStopped {
			if st.StopReason != "ttl" {
				t.Errorf("stop reason %q, want ttl", st.StopReason)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the moved TTL did not stop the sandbox within 20s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if err := rt.SetDeadline(ctx, s.ID(), time.Time{}); err != nil {
		t.Fatal(err)
	}
	s2, err := rt.Resume(ctx, s.ID())
	if err != nil {
		t.Fatalf("resume after clearing the deadline: %v", err)
	}
	rc, err := s2.ReadFile(ctx, "kept.txt")
	if err != nil {
		t.Fatal(err)
	}
	rc.Close()
	st, _ := sbdir.Read(rt.dir(s.ID()))
	if until := time.Until(st.Deadline); until < 50*time.Minute {
		t.Errorf("deadline after resume is %v away, want a fresh hour", until)
	}
	if err := rt.SetDeadline(ctx, "sb-nope", time.Time{}); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("unknown sandbox: %v, want ErrNotFound", err)
	}
}

// TestCreatorKilledMidCreate: a sandbox whose creating process died
// before the create finished (a server SIGKILLed mid-request) is deleted,
// processes, disk and directory, by the next List.
func TestCreatorKilledMidCreate(t *testing.T) { onTiers(t, testCreatorKilledMidCreate) }

func testCreatorKilledMidCreate(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, Limits: sandbox.Limits{DiskBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	dead := exec.Command("true")
	if err := dead.Run(); err != nil {
		t.Fatal(err)
	}
	st, err := sbdir.Update(rt.dir(s.ID()), func(st *state) error {
		st.CreatorPID = dead.Process.Pid
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	tr := tracesOf(t, rt, s.ID())
	infos, err := rt.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer noLeftovers(t, tr, "after the List that found the half-made sandbox", true)
	for _, in := range infos {
		if in.ID == s.ID() {
			t.Fatalf("List still shows the half-made sandbox %s", s.ID())
		}
	}
	if _, err := os.Stat(rt.dir(s.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("its directory is still there: %v", err)
	}
	for _, pid := range []int{st.ShimPID, st.InitPID} {
		for i := 0; i < 100 && sbutil.Alive(pid); i++ {
			time.Sleep(10 * time.Millisecond)
		}
		if sbutil.Alive(pid) {
			t.Errorf("process %d of the half-made sandbox is still alive", pid)
		}
	}
	mounts, _ := os.ReadFile("/proc/mounts")
	if strings.Contains(string(mounts), s.ID()) {
		t.Errorf("a mount of %s is left", s.ID())
	}
}
