package template

import (
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

func TestHost(t *testing.T) {
	st, err := Open(tempDir(t))
	if err != nil {
		t.Fatal(err)
	}
	h, err := st.Get("host")
	if err != nil {
		t.Fatal(err)
	}
	if h.Name != "host" || !strings.HasPrefix(h.Digest, "sha256:") {
		t.Errorf("host template: name %q digest %q", h.Name, h.Digest)
	}
	if len(h.Binds) == 0 || h.Binds[0] != "/usr" {
		t.Errorf("Binds = %v, want /usr first", h.Binds)
	}
	if h.Config.Env["PATH"] != DefaultPath {
		t.Errorf("PATH = %q", h.Config.Env["PATH"])
	}

	// Each top-level host directory is bound, each symlink recreated.
	for _, top := range hostTops {
		fi, err := os.Lstat("/" + top)
		if err != nil {
			if slices.Contains(h.Binds, "/"+top) {
				t.Errorf("Binds has /%s, which the host lacks", top)
			}
			continue
		}
		got, err := os.Lstat(filepath.Join(h.RootFS, top))
		if err != nil {
			t.Errorf("/%s: %v", top, err)
			continue
		}
		if fi.Mode().Type() == os.ModeSymlink {
			want, _ := os.Readlink("/" + top)
			target, _ := os.Readlink(filepath.Join(h.RootFS, top))
			if target != want || slices.Contains(h.Binds, "/"+top) {
				t.Errorf("/%s: got link %q (bound: %v), want the host's link %q, not bound", top, target, slices.Contains(h.Binds, "/"+top), want)
			}
			continue
		}
		if !got.IsDir() || !slices.Contains(h.Binds, "/"+top) {
			t.Errorf("/%s: got %v bound=%v, want an empty directory to bind", top, got.Mode(), slices.Contains(h.Binds, "/"+top))
		}
		if entries, _ := os.ReadDir(filepath.Join(h.RootFS, top)); len(entries) != 0 {
			t.Errorf("/%s mount point is not empty", top)
		}
	}

	contains := map[string][]string{
		"etc/passwd":        {"root:x:0:0:", "user:x:1000:1000::/home/user:"},
		"etc/group":         {"root:x:0:", "user:x:1000:"},
		"etc/hosts":         {"127.0.0.1", "localhost"},
		"etc/nsswitch.conf": {"passwd:   files", "hosts:    files dns"},
		"etc/hostname":      {"sandbox"},
		"etc/resolv.conf":   {"#"},
	}
	if _, err := os.Stat("/etc/os-release"); err == nil {
		contains["etc/os-release"] = []string{"NAME="}
	}
	for name, wants := range contains {
		b, err := os.ReadFile(filepath.Join(h.RootFS, name))
		if err != nil {
			t.Errorf("%s: %v", name, err)
			continue
		}
		for _, w := range wants {
			if !strings.Contains(string(b), w) {
				t.Errorf("%s lacks %q:\n%s", name, w, b)
			}
		}
	}
	// Nothing secret, nothing more than the listed entries of /etc.
	for _, name := range []string{"etc/shadow", "etc/gshadow", "etc/ssh", "etc/sudoers", "etc/machine-id"} {
		if _, err := os.Lstat(filepath.Join(h.RootFS, name)); err == nil {
			t.Errorf("the host template has %s", name)
		}
	}
	for _, d := range []string{"dev", "proc", "sys", "tmp", "run", "home/user", "root", "var/tmp"} {
		fi, err := os.Lstat(filepath.Join(h.RootFS, d))
		if err != nil || !fi.IsDir() {
			t.Errorf("mount point /%s: %v", d, err)
			continue
		}
		if d == "home/user" && os.Geteuid() == 0 {
			if st := fi.Sys().(*syscall.Stat_t); st.Uid != 1000 || st.Gid != 1000 {
				t.Errorf("/home/user owned by %d:%d, want 1000:1000", st.Uid, st.Gid)
			}
		}
	}
	if fi, _ := os.Lstat(filepath.Join(h.RootFS, "tmp")); fi.Mode()&os.ModeSticky == 0 || fi.Mode().Perm() != 0o777 {
		t.Errorf("/tmp mode %v, want sticky 0777", fi.Mode())
	}

	// Prepared once: a second call returns the same files.
	again, err := st.Host()
	if err != nil {
		t.Fatal(err)
	}
	if again.Digest != h.Digest || again.RootFS != h.RootFS {
		t.Errorf("second Host() made a new tree: %s, was %s", again.RootFS, h.RootFS)
	}
	if err := st.Remove("host", nil); !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Remove(host): %v, want ErrInvalid", err)
	}
}

func BenchmarkHostCached(b *testing.B) {
	st, err := Open(b.TempDir())
	if err != nil {
		b.Fatal(err)
	}
	if _, err := st.Host(); err != nil {
		b.Fatal(err)
	}
	for b.Loop() {
		if _, err := st.Get("host"); err != nil {
			b.Fatal(err)
		}
	}
}
