package local

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/template"
)

// TestDebianTemplateKeepsInstalledPackages builds a minimal Debian
// template, installs a package in a sandbox made from it, and checks the
// package survives stop and resume.
func TestDebianTemplateKeepsInstalledPackages(t *testing.T) {
	rt := newRuntime(t)
	if _, err := exec.LookPath("mmdebstrap"); err != nil {
		if _, err := exec.LookPath("debootstrap"); err != nil {
			t.Skip("needs mmdebstrap or debootstrap (make test installs them)")
		}
	}
	ctx := context.Background()
	store, err := template.Open(filepath.Join(rt.cfg.Dir, ".templates"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := store.Get("debian-test"); err != nil {
		if _, err := store.Build(ctx, "debian-test", template.BuildOptions{}); err != nil {
			t.Skipf("cannot build a Debian template here (is the mirror reachable?): %v", err)
		}
	}

	// A package of our own, so no network is needed inside or outside.
	pkg := t.TempDir()
	os.MkdirAll(filepath.Join(pkg, "DEBIAN"), 0o755)
	os.MkdirAll(filepath.Join(pkg, "usr/bin"), 0o755)
	os.WriteFile(filepath.Join(pkg, "DEBIAN/control"), []byte("Package: cove-test-hello\nVersion: 1.0\nArchitecture: all\nMaintainer: Cove <cove@example.invalid>\nDescription: test package\n"), 0o644)
	os.WriteFile(filepath.Join(pkg, "usr/bin/cove-test-hello"), []byte("#!/bin/sh\necho hello from a package\n"), 0o755)
	deb := filepath.Join(t.TempDir(), "hello.deb")
	if out, err := exec.Command("dpkg-deb", "--build", "--root-owner-group", pkg, deb).CombinedOutput(); err != nil {
		t.Skipf("dpkg-deb: %v %s", err, out)
	}

	s, err := rt.Create(ctx, sandbox.Spec{Template: "debian-test"})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	f, _ := os.Open(deb)
	err = s.WriteFile(ctx, "hello.deb", f, 0o644)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	var out strings.Builder
	st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "dpkg", Args: []string{"-i", "hello.deb"}, User: "root", Stdout: &out, Stderr: &out})
	if err != nil || !st.Success() {
		t.Fatalf("dpkg -i: %v %+v\n%s", err, st, out.String())
	}
	check := func(when string) {
		t.Helper()
		var out strings.Builder
		st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", "cove-test-hello && dpkg -s cove-test-hello | grep Status; cat /etc/debian_version >/dev/null && echo debian"}, Stdout: &out, Stderr: &out})
		want := "hello from a package\nStatus: install ok installed\ndebian\n"
		if err != nil || out.String() != want {
			t.Errorf("%s: got %q (%+v %v), want %q", when, out.String(), st, err, want)
		}
	}
	check("after install")
	if err := rt.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := rt.Resume(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	check("after stop and resume")

	// The template cannot be removed while the sandbox (running or
	// stopped) uses it.
	inUse, err := TemplatesInUse(rt.cfg.Dir)
	if err != nil {
		t.Fatal(err)
	}
	tm, _ := store.Get("debian-test")
	if err := store.Remove("debian-test", func(d string) bool { return inUse[d] }); err == nil {
		t.Error("removing a template in use succeeded")
	}
	if !inUse[tm.Digest] {
		t.Errorf("TemplatesInUse = %v, want %s in use", inUse, tm.Digest)
	}
}
