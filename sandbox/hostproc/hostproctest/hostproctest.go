// Package hostproctest gives tests a real runtime without root: a
// sandbox/hostproc runtime in a temporary directory whose daemon is the
// test binary itself. A test that needs a real shell or real programs
// uses it; one that needs only files or scripted processes uses the
// in-memory fake (sandbox/sandboxtest/fake).
//
// The package's TestMain must be Main, or call RunGuest first, so that
// the test binary acts as the daemon when the runtime starts it.
package hostproctest

import (
	"context"
	"fmt"
	"os"
	"testing"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox/hostproc"
)

// guestEnv marks the test binary's runs as a sandbox's daemon.
const guestEnv = "COVE_HOSTPROCTEST_GUEST"

// Main is a TestMain for a package whose tests use New.
func Main(m *testing.M) {
	RunGuest()
	os.Exit(m.Run())
}

// RunGuest runs the sandbox daemon and exits when this process is one
// that a runtime from New started; otherwise it returns at once.
func RunGuest() {
	if os.Getenv(guestEnv) != "1" {
		return
	}
	if err := guest.Main(context.Background(), os.Args[1:], os.Stderr); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// New returns a hostproc runtime over a fresh temporary directory. When
// the test ends, every sandbox it still has is deleted and the directory
// removed.
func New(t testing.TB) *hostproc.Runtime {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	// A unix socket's path is short (108 bytes): keep the directory near
	// /tmp rather than under t.TempDir's long name.
	dir, err := os.MkdirTemp("", "hpt")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := hostproc.New(hostproc.Config{Dir: dir, GuestCommand: []string{exe}, GuestEnv: []string{guestEnv + "=1", "GORACE=atexit_sleep_ms=0"}})
	if err != nil {
		os.RemoveAll(dir)
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx := context.Background()
		infos, _ := rt.List(ctx)
		for _, info := range infos {
			if err := rt.Delete(ctx, info.ID); err != nil {
				t.Errorf("deleting sandbox %s: %v", info.ID, err)
			}
		}
		os.RemoveAll(dir)
	})
	return rt
}
