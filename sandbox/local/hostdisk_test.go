package local

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

// smallHostRuntime returns a runtime whose state directory is on a
// filesystem of its own, size bytes of ext4 on a loop device, so the test
// can fill "the host" without touching the machine's, and that
// filesystem's mount point. Everything goes at the end of the test.
func smallHostRuntime(t *testing.T, size int64) (*Runtime, string) {
	t.Helper()
	needRoot(t)
	mnt := sandboxtest.SmallFS(t, size)
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(Config{Dir: filepath.Join(mnt, "sandboxes"), Command: []string{exe}, Env: []string{"GORACE=atexit_sleep_ms=0"}})
	if err != nil {
		t.Fatal(err)
	}
	// Runs before the unmount above.
	t.Cleanup(func() {
		infos, _ := rt.List(context.Background())
		for _, info := range infos {
			if err := rt.Delete(context.Background(), info.ID); err != nil {
				t.Errorf("deleting %s: %v", info.ID, err)
			}
		}
	})
	return rt, mnt
}

// fillFile writes to path until the filesystem is full.
func fillFile(t *testing.T, path string) {
	t.Helper()
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	chunk := bytes.Repeat([]byte("full"), 1<<18)
	for {
		if _, err := f.Write(chunk); err != nil {
			if !errors.Is(err, syscall.ENOSPC) {
				t.Fatalf("filling the host: %v", err)
			}
			return
		}
	}
}

// sh runs a script in s and returns its output, failing the test unless
// it exits 0.
func sh(t *testing.T, s sandbox.Session, script string) string {
	t.Helper()
	var out strings.Builder
	st, err := s.Exec(context.Background(), sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, Stdout: &out, Stderr: &out})
	if err != nil || !st.Success() {
		t.Fatalf("%q: %+v %v: %s", script, st, err, out.String())
	}
	return out.String()
}

// TestHostDiskFull: sandboxes' disk limits never add up to more than the
// host can back (a create or fork that would overcommit is refused, saying
// why without a host path), a host filled from outside or by a sandbox
// without a disk limit costs the other sandboxes none of their data or
// space, and stop, resume and delete work while it is full.
func TestHostDiskFull(t *testing.T) {
	rt, hostDir := smallHostRuntime(t, 400<<20)
	ctx := context.Background()
	a, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 128 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 96 << 20}}); err != nil {
		t.Fatal(err)
	}
	noHostNames := func(what string, err error) {
		t.Helper()
		if strings.Contains(err.Error(), hostDir) || strings.Contains(err.Error(), "/dev/") {
			t.Errorf("%s: the error names a host path or device: %v", what, err)
		}
	}
	_, err = rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 128 << 20}})
	if !errors.Is(err, sandbox.ErrLimit) {
		t.Fatalf("a third disk the host cannot back: %v, want ErrLimit", err)
	}
	noHostNames("the refused create", err)
	if !strings.Contains(err.Error(), "free") {
		t.Errorf("the refusal does not say what is free: %v", err)
	}
	_, err = rt.Fork(ctx, a.ID())
	if !errors.Is(err, sandbox.ErrLimit) {
		t.Fatalf("a fork the host cannot back: %v, want ErrLimit", err)
	}
	noHostNames("the refused fork", err)

	sum := sh(t, a, "head -c 40000000 /dev/urandom > data && sha256sum data")

	// Filled from outside: a's data is whole and it can still write
	// (its blocks are its own).
	fillFile(t, filepath.Join(hostDir, "filler"))
	sh(t, a, "head -c 40000000 /dev/urandom > more && sync")
	if got := sh(t, a, "sha256sum data"); got != sum {
		t.Errorf("a's file after the host filled up: %q, want %q", got, sum)
	}
	os.Remove(filepath.Join(hostDir, "filler"))

	// Filled by a sandbox without a disk limit (its writes land on the
	// host's filesystem).
	u, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	u.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "head -c 1000000000 /dev/zero > fill; sync"}, Stderr: &out})
	if !strings.Contains(out.String(), "No space left") {
		t.Fatalf("the unlimited sandbox did not fill the host: %q", out.String())
	}
	sh(t, a, "rm more && head -c 40000000 /dev/urandom > more && sync")
	if got := sh(t, a, "sha256sum data"); got != sum {
		t.Errorf("a's file after a sandbox filled the host: %q, want %q", got, sum)
	}

	// Stop, resume and delete on the full host: full for root too (the
	// sandbox's user left the blocks ext4 keeps for root).
	fillFile(t, filepath.Join(hostDir, "filler"))
	for _, id := range []string{a.ID(), u.ID()} {
		if err := rt.Stop(ctx, id); err != nil {
			t.Fatalf("stop on a full host: %v", err)
		}
		if info, err := rt.Get(ctx, id); err != nil {
			t.Fatal(err)
		} else if i, _ := info.Info(ctx); i.State != sandbox.StateStopped {
			t.Errorf("after stop on a full host: state %s", i.State)
		}
	}
	a, err = rt.Resume(ctx, a.ID())
	if err != nil {
		t.Fatalf("resuming a sandbox whose disk is reserved, on a full host: %v", err)
	}
	if got := sh(t, a, "sha256sum data"); got != sum {
		t.Errorf("a's file after a stop and resume on a full host: %q, want %q", got, sum)
	}
	for _, id := range []string{a.ID(), u.ID()} {
		if err := rt.Delete(ctx, id); err != nil {
			t.Fatalf("delete on a full host: %v", err)
		}
		if _, err := os.Stat(rt.dir(id)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("delete on a full host left %s", rt.dir(id))
		}
	}
	// The space is back: a create that fits works again.
	os.Remove(filepath.Join(hostDir, "filler"))
	deadline := time.Now().Add(10 * time.Second)
	for {
		s, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 64 << 20}})
		if err == nil {
			rt.Delete(ctx, s.ID())
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("a create after the deletes freed space: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
