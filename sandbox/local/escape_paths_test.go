package local

import (
	"archive/tar"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/local/internal/host"
	"github.com/cove-sandbox/cove/sandbox/local/internal/sbdir"
	"github.com/cove-sandbox/cove/template"
)

// The escape suite for host paths (issue 13, point 1): tenant input never
// becomes a host path, and a link planted in a sandbox's disk or template
// never leads a host-side operation out of the sandbox, at create, resume,
// fork and delete.

// victim is a host directory that no sandbox may change: root-owned, mode
// 0700, holding one file.
type victim struct {
	dir string
}

const victimData = "host data"

// newVictim makes a victim under /var/tmp (a host directory no template
// shows), removed when the test ends.
func newVictim(t *testing.T) victim {
	t.Helper()
	dir, err := os.MkdirTemp("/var/tmp", "cove-victim-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := os.Chmod(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "keep"), []byte(victimData), 0o600); err != nil {
		t.Fatal(err)
	}
	return victim{dir}
}

// check fails the test if anything about the victim changed: its owner,
// mode, entries, or its file's owner, mode or content.
func (v victim) check(t *testing.T, when string) {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Lstat(v.dir, &st); err != nil {
		t.Fatalf("%s: the host directory %s: %v", when, v.dir, err)
	}
	if st.Uid != 0 || st.Gid != 0 || st.Mode&0o7777 != 0o700 || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Errorf("%s: the host directory %s is now %o owned by %d:%d, want a directory 700 owned by 0:0", when, v.dir, st.Mode, st.Uid, st.Gid)
	}
	entries, _ := os.ReadDir(v.dir)
	var names []string
	for _, e := range entries {
		names = append(names, e.Name())
	}
	if !slices.Equal(names, []string{"keep"}) {
		t.Errorf("%s: the host directory %s holds %q, want only [keep]", when, v.dir, names)
	}
	keep := filepath.Join(v.dir, "keep")
	if err := unix.Lstat(keep, &st); err != nil {
		t.Errorf("%s: the host file %s: %v", when, keep, err)
		return
	}
	if st.Uid != 0 || st.Gid != 0 || st.Mode&0o7777 != 0o600 {
		t.Errorf("%s: the host file %s is now %o owned by %d:%d, want 600 owned by 0:0", when, keep, st.Mode, st.Uid, st.Gid)
	}
	if b, err := os.ReadFile(keep); err != nil || string(b) != victimData {
		t.Errorf("%s: the host file %s reads %q (%v), want %q", when, keep, b, err, victimData)
	}
}

// privateRuntime is a runtime of its own (what a test does to it stays
// there), deleting its sandboxes and directory when the test ends.
// noHarden stands for a host whose kernel has no Landlock: root inside may
// then replace any top-level directory of the sandbox.
func privateRuntime(t *testing.T, templates Templates, noHarden bool) *Runtime {
	t.Helper()
	needRoot(t)
	exe, _ := os.Executable()
	dir, err := os.MkdirTemp("", "ce")
	if err != nil {
		t.Fatal(err)
	}
	rt, err := New(Config{Dir: dir, Command: []string{exe}, Env: []string{"GORACE=atexit_sleep_ms=0"}, Templates: templates, NoHarden: noHarden})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		infos, _ := rt.List(context.Background())
		for _, in := range infos {
			rt.Delete(context.Background(), in.ID)
		}
		os.RemoveAll(dir)
	})
	return rt
}

// asRoot runs a shell script as root inside the sandbox, in "/", and
// fails the test unless it succeeds.
func asRoot(t *testing.T, rt *Runtime, id, script string) string {
	t.Helper()
	return execAs(t, rt, id, "root", script)
}

// execAs runs a shell script as user ("": the sandbox's) in "/", through
// a session confined to "/" rather than the workspace (which the test may
// have replaced with a link), and fails the test unless it succeeds.
func execAs(t *testing.T, rt *Runtime, id, user, script string) string {
	t.Helper()
	s := rootSession(t, rt, id)
	var out strings.Builder
	st, err := s.Exec(context.Background(), sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", script}, User: user, Dir: "/", Stdout: &out, Stderr: &out})
	if err != nil || !st.Success() {
		t.Fatalf("%s as %q: %+v %v\n%s", script, user, st, err, out.String())
	}
	return out.String()
}

// rootSession is a session on a running sandbox whose paths are confined
// to "/" only.
func rootSession(t *testing.T, rt *Runtime, id string) *guest.Session {
	t.Helper()
	st, err := rt.load(id)
	if err != nil {
		t.Fatal(err)
	}
	c, err := rt.client(id, st, st.ShimPID) // the tier's own socket
	if err != nil {
		t.Fatal(err)
	}
	s := guest.NewSession(c, guest.SessionOptions{ID: id, Root: "/"})
	t.Cleanup(func() { s.Close() })
	return s
}

// stopResume stops and resumes a sandbox; the resume must work.
func stopResume(t *testing.T, rt *Runtime, id string) sandbox.Session {
	t.Helper()
	ctx := context.Background()
	if err := rt.Stop(ctx, id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	s, err := rt.Resume(ctx, id)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	return s
}

// TestHostileUserNames: a create whose user name is a path is refused
// before anything is made, on the host or in the state directory.
func TestHostileUserNames(t *testing.T) { onTiers(t, testHostileUserNames) }

func testHostileUserNames(t *testing.T, iso string) {
	rt := privateRuntime(t, nil, false)
	v := newVictim(t)
	up := strings.Repeat("../", 20)
	var before unix.Stat_t
	if err := unix.Stat(rt.cfg.Dir, &before); err != nil {
		t.Fatal(err)
	}
	for _, user := range []string{
		"../../..",                         // the runtime's state directory
		up + v.dir[1:],                     // an existing host directory
		up + v.dir[1:] + "/made",           // a new one
		"x/" + up + v.dir[1:] + "/made2",   // a path that climbs later
		v.dir,                              // absolute
		"..", ".", "-x", "a b", "user\x00", // not names
		strings.Repeat("u", 33),
	} {
		s, err := rt.Create(context.Background(), sandbox.Spec{Isolation: iso, User: user})
		if err == nil {
			rt.Delete(context.Background(), s.ID())
		}
		if !errors.Is(err, sandbox.ErrInvalid) {
			t.Errorf("create with user %q: %v, want ErrInvalid", user, err)
		} else if strings.Contains(err.Error(), v.dir) || strings.Contains(err.Error(), rt.cfg.Dir) {
			t.Errorf("create with user %q: the error %q names a host path", user, err)
		}
		v.check(t, fmt.Sprintf("after a create with user %q", user))
	}
	var after unix.Stat_t
	if err := unix.Stat(rt.cfg.Dir, &after); err != nil {
		t.Fatal(err)
	}
	if after.Uid != before.Uid || after.Gid != before.Gid || after.Mode != before.Mode {
		t.Errorf("the state directory went from %o %d:%d to %o %d:%d", before.Mode, before.Uid, before.Gid, after.Mode, after.Uid, after.Gid)
	}
	infos, _ := rt.List(context.Background())
	if len(infos) != 0 {
		t.Errorf("refused creates left sandboxes: %+v", infos)
	}
	// A valid name works.
	s, err := rt.Create(context.Background(), sandbox.Spec{Isolation: iso, User: "root"})
	if err != nil {
		t.Fatalf("create with user root: %v", err)
	}
	rt.Delete(context.Background(), s.ID())
}

// TestPlantedLinksStayInside: root inside a sandbox, and its user when the
// workspace is in its home, replace the home, the workspace and the mount
// points with symlinks to a host directory; the next start follows them
// inside the sandbox only, and the host directory is untouched.
func TestPlantedLinksStayInside(t *testing.T) { onTiers(t, testPlantedLinksStayInside) }

func testPlantedLinksStayInside(t *testing.T, iso string) {
	ctx := context.Background()
	rt := newRuntime(t)
	// Without Landlock (older kernels), root inside can also replace the
	// top-level directories.
	open := privateRuntime(t, nil, true)
	t.Run("root replaces the home", func(t *testing.T) {
		v := newVictim(t)
		s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
		asRoot(t, rt, s.ID(), fmt.Sprintf("rm -rf /home/user && ln -s %s /home/user", v.dir))
		stopResume(t, rt, s.ID())
		v.check(t, "after resume")
		// Inside, the link leads to the sandbox's own directory.
		out := asRoot(t, rt, s.ID(), fmt.Sprintf("stat -c '%%u %%F' %s; cat %s/keep 2>&1 || true", v.dir, v.dir))
		if strings.Contains(out, victimData) {
			t.Errorf("the sandbox reads the host file through its link: %q", out)
		}
		stopResume(t, rt, s.ID())
		v.check(t, "after a second resume")
	})
	t.Run("root replaces the home and the workspace, no Landlock", func(t *testing.T) {
		v := newVictim(t)
		s, err := open.Create(ctx, sandbox.Spec{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { open.Delete(context.Background(), s.ID()) })
		asRoot(t, open, s.ID(), fmt.Sprintf("rm -rf /home/user /workspace && ln -s %s /home/user && ln -s %s/ws /workspace", v.dir, v.dir))
		stopResume(t, open, s.ID())
		v.check(t, "after resume")
		out := asRoot(t, open, s.ID(), fmt.Sprintf("stat -c '%%u %%F' %s %s/ws", v.dir, v.dir))
		// The workspace's link was followed first: pid 1 made its parent
		// (for root) and the workspace (for the user); the home's link
		// then led to a directory that existed, which keeps its owner.
		if want := "0 directory\n1000 directory\n"; out != want {
			t.Errorf("inside, the links lead to %q, want %q: the sandbox's own directories", out, want)
		}
	})
	t.Run("user replaces the workspace itself", func(t *testing.T) {
		v := newVictim(t)
		s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, Root: "/home/user/proj"})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
		execAs(t, rt, s.ID(), "", fmt.Sprintf("rm -rf /home/user/proj && ln -s %s /home/user/proj", v.dir))
		stopResume(t, rt, s.ID())
		v.check(t, "after resume")
	})
	t.Run("root replaces the mount points, no Landlock", func(t *testing.T) {
		v := newVictim(t)
		s, err := open.Create(ctx, sandbox.Spec{Isolation: iso})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { open.Delete(context.Background(), s.ID()) })
		// /sys is no mount of its own: root can replace it. The others
		// are mounted, and stay (their removal fails) or leave a link
		// behind in the sandbox's disk (the tmpfs of /tmp and /run hide
		// what root leaves beneath them).
		asRoot(t, open, s.ID(), fmt.Sprintf(`rmdir /sys && ln -s %[1]s/sys /sys
for d in proc dev tmp run usr; do rm -rf /$d 2>/dev/null; ln -sfn %[1]s/$d /$d 2>/dev/null; done; true`, v.dir))
		stopResume(t, open, s.ID())
		v.check(t, "after resume")
	})
}

// TestWorkspaceSwapLoop: root inside flips the workspace and the home
// between directories and symlinks to a host directory while the sandbox
// is stopped and resumed again and again.
func TestWorkspaceSwapLoop(t *testing.T) { onTiers(t, testWorkspaceSwapLoop) }

func testWorkspaceSwapLoop(t *testing.T, iso string) {
	rt := privateRuntime(t, nil, true)
	ctx := context.Background()
	v := newVictim(t)
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	loop := fmt.Sprintf(`while :; do
	rm -rf /workspace /home/user; ln -s %[1]s /workspace; ln -s %[1]s/new /home/user
	rm -f /workspace /home/user; mkdir /workspace /home/user
	rm -rf /workspace; ln -s %[1]s/ws /workspace
done`, v.dir)
	for i := range 6 {
		if _, err := rootSession(t, rt, s.ID()).Start(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", loop}, User: "root", Dir: "/"}); err != nil {
			t.Fatalf("round %d: starting the loop: %v", i, err)
		}
		time.Sleep(time.Duration(rand.IntN(30)) * time.Millisecond)
		stopResume(t, rt, s.ID())
		v.check(t, fmt.Sprintf("round %d", i))
	}
}

// linkTree is a Templates whose one template is a root filesystem the
// test made, for trees the template store would refuse.
type linkTree struct{ rootfs Rootfs }

func (l linkTree) Resolve(context.Context, string) (Rootfs, error) { return l.rootfs, nil }

// hostLikeLower makes a lower layer like the host template's (etc with
// the sandbox user, /bin and /lib* as the host has them) plus links, name
// to target.
func hostLikeLower(t *testing.T, links map[string]string) string {
	t.Helper()
	dir, err := os.MkdirTemp("", "cl-lower-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	os.Chmod(dir, 0o755)
	os.MkdirAll(filepath.Join(dir, "etc"), 0o755)
	os.WriteFile(filepath.Join(dir, "etc/passwd"), []byte("root:x:0:0::/root:/bin/sh\nuser:x:1000:1000::/home/user:/bin/sh\n"), 0o644)
	os.WriteFile(filepath.Join(dir, "etc/group"), []byte("root:x:0:\nuser:x:1000:\n"), 0o644)
	for _, top := range []string{"bin", "sbin", "lib", "lib64"} {
		if target, err := os.Readlink("/" + top); err == nil {
			os.Symlink(target, filepath.Join(dir, top))
		}
	}
	for name, target := range links {
		if err := os.Symlink(target, filepath.Join(dir, name)); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestTemplateLinksStayInside: a template whose /home, /proc, /dev, /tmp,
// /run, /sys or /usr (a bind target) is a symlink to a host path starts,
// with every mount and directory made inside the sandbox, and leaves the
// host untouched.
func TestTemplateLinksStayInside(t *testing.T) { onTiers(t, testTemplateLinksStayInside) }

func testTemplateLinksStayInside(t *testing.T, iso string) {
	v := newVictim(t)
	links := map[string]string{}
	for _, d := range []string{"home", "proc", "dev", "tmp", "run", "sys", "usr"} {
		links[d] = v.dir + "/" + d
	}
	links["workspace"] = v.dir + "/ws"
	lower := hostLikeLower(t, links)
	rt := privateRuntime(t, linkTree{Rootfs{Lower: lower, Binds: []string{"/usr"}, Env: map[string]string{"PATH": sbdirPath}}}, false)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil && onGVisor(iso) {
		// runsc does not follow a link at a mount point of its bundle
		// (it fails to make the mount point), so such a template does
		// not start on gVisor. It fails safe: the host is untouched,
		// and nothing of the create is left.
		t.Logf("create on gVisor: %v", err)
		v.check(t, "after the failed create")
		if infos, _ := rt.List(ctx); len(infos) != 0 {
			t.Errorf("the failed create left sandboxes: %+v", infos)
		}
		return
	}
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	v.check(t, "after create")
	// It works: the links lead to the sandbox's own mounts.
	out := execAs(t, rt, s.ID(), "", "cat /proc/self/comm; echo x > /dev/null && echo dev; touch /tmp/f && echo tmp; id -u; test -w /workspace && echo ws")
	if want := "cat\ndev\ntmp\n1000\nws\n"; out != want {
		t.Errorf("inside: %q, want %q", out, want)
	}
	stopResume(t, rt, s.ID())
	v.check(t, "after resume")
	if err := rt.Delete(ctx, s.ID()); err != nil {
		t.Errorf("delete: %v", err)
	}
	v.check(t, "after delete")

	// A template's default user is a user name too.
	rt2 := privateRuntime(t, linkTree{Rootfs{Lower: lower, Binds: []string{"/usr"}, User: strings.Repeat("../", 20) + v.dir[1:] + "/made"}}, false)
	if s, err := rt2.Create(ctx, sandbox.Spec{Isolation: iso}); !errors.Is(err, sandbox.ErrInvalid) {
		if err == nil {
			rt2.Delete(ctx, s.ID())
		}
		t.Errorf("create from a template whose user is a path: %v, want ErrInvalid", err)
	}
	v.check(t, "after a template with a hostile user")
}

// TestTemplateRelativeLinks: relative links in a template resolve as the
// kernel resolves them inside the sandbox ("a/.." climbs from where a
// leads; ".." above the root stays at the root), never from the host
// directory the template lives in.
func TestTemplateRelativeLinks(t *testing.T) { onTiers(t, testTemplateRelativeLinks) }

func testTemplateRelativeLinks(t *testing.T, iso string) {
	v := newVictim(t)
	lower := hostLikeLower(t, map[string]string{
		"a":         "x/y",
		"home":      "a/../h2",
		"workspace": strings.Repeat("../", 20) + v.dir[1:] + "/ws",
	})
	if err := os.MkdirAll(filepath.Join(lower, "x/y"), 0o755); err != nil {
		t.Fatal(err)
	}
	rt := privateRuntime(t, linkTree{Rootfs{Lower: lower, Binds: []string{"/usr"}, Env: map[string]string{"PATH": sbdirPath}}}, false)
	s, err := rt.Create(context.Background(), sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatalf("create: %v", err)
	}
	v.check(t, "after create")
	out := execAs(t, rt, s.ID(), "", fmt.Sprintf("stat -c '%%n %%u' /x/h2/user %s/ws; test -w /workspace && test -w /home/user && echo writable", v.dir))
	if want := fmt.Sprintf("/x/h2/user 1000\n%s/ws 1000\nwritable\n", v.dir); out != want {
		t.Errorf("inside: %q, want %q", out, want)
	}
}

// sbdirPath is the PATH of the test templates.
const sbdirPath = "/usr/local/bin:/usr/bin:/bin"

// imageTarball is a `docker save` tarball of one layer holding files
// (name to content) and symlinks (name to target), with the user in its
// config.
func imageTarball(t *testing.T, user string, files, links map[string]string) []byte {
	t.Helper()
	var layer bytes.Buffer
	tw := tar.NewWriter(&layer)
	for name, content := range files {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(content))})
		tw.Write([]byte(content))
	}
	for name, target := range links {
		tw.WriteHeader(&tar.Header{Name: name, Typeflag: tar.TypeSymlink, Linkname: target, Mode: 0o777})
	}
	tw.Close()
	config, _ := json.Marshal(map[string]any{"architecture": runtime.GOARCH, "os": "linux", "config": map[string]any{"User": user}})
	manifest, _ := json.Marshal([]map[string]any{{"Config": "config.json", "Layers": []string{"layer.tar"}}})
	var out bytes.Buffer
	ow := tar.NewWriter(&out)
	for _, f := range []struct {
		name string
		data []byte
	}{{"manifest.json", manifest}, {"config.json", config}, {"layer.tar", layer.Bytes()}} {
		ow.WriteHeader(&tar.Header{Name: f.name, Typeflag: tar.TypeReg, Mode: 0o644, Size: int64(len(f.data))})
		ow.Write(f.data)
	}
	ow.Close()
	return out.Bytes()
}

// TestImportedTemplateLinks: templates imported from image tarballs, as
// a tenant would bring them: a /home or /run that is a symlink to a host
// path starts and leaves the host alone; /tmp or /proc as such a symlink,
// or a user name that is a path, are refused at import.
func TestImportedTemplateLinks(t *testing.T) { onTiers(t, testImportedTemplateLinks) }

func testImportedTemplateLinks(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	store, err := template.Open(filepath.Join(rt.cfg.Dir, ".templates"))
	if err != nil {
		t.Fatal(err)
	}
	passwd := map[string]string{"etc/passwd": "root:x:0:0::/root:/bin/sh\n"}
	up := strings.Repeat("../", 20)
	tests := []struct {
		name    string
		user    func(victim string) string
		links   func(victim string) map[string]string
		refused bool
	}{
		{"home", nil, func(v string) map[string]string { return map[string]string{"home": v} }, false},
		{"home-relative", nil, func(v string) map[string]string { return map[string]string{"home": up + v[1:]} }, false},
		{"usr-run", nil, func(v string) map[string]string { return map[string]string{"usr": v + "/usr", "run": v + "/run"} }, false},
		{"tmp", nil, func(v string) map[string]string { return map[string]string{"tmp": v + "/tmp"} }, true},
		{"proc", nil, func(v string) map[string]string { return map[string]string{"proc": v + "/proc"} }, true},
		{"user", func(v string) string { return up + v[1:] + "/made" }, nil, true},
		{"user-group", func(v string) string { return "1000:" + up + v[1:] }, nil, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			v := newVictim(t)
			user := ""
			if tt.user != nil {
				user = tt.user(v.dir)
			}
			var links map[string]string
			if tt.links != nil {
				links = tt.links(v.dir)
			}
			name := fmt.Sprintf("escape-%s-%d", tt.name, rand.Uint32())
			_, err := store.Import(ctx, name, bytes.NewReader(imageTarball(t, user, passwd, links)), nil)
			if tt.refused {
				if err == nil {
					store.Remove(name, nil)
				}
				if !errors.Is(err, sandbox.ErrInvalid) {
					t.Errorf("import: %v, want ErrInvalid", err)
				}
				v.check(t, "after the import")
				return
			}
			if err != nil {
				t.Fatalf("import: %v", err)
			}
			t.Cleanup(func() { store.Remove(name, nil) })
			if onGVisor(iso) {
				// Inside gVisor the daemon's program runs from the
				// sandbox's root, and these images have no dynamic
				// loader: cove-sandbox is static (CGO_ENABLED=0), the
				// test binary is not.
				t.Skip("the image has no dynamic loader for the test binary (cove-sandbox itself is static)")
			}
			s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso, Template: name})
			if err != nil {
				t.Fatalf("create: %v", err)
			}
			defer rt.Delete(ctx, s.ID())
			v.check(t, "after create")
			stopResume(t, rt, s.ID())
			v.check(t, "after resume")
		})
	}
}

// TestForkAndDeleteLeaveHostFiles: a sandbox whose disk (a plain host
// directory: no disk limit) is full of symlinks to host files is forked
// and deleted; the copies are links, the host files stay.
func TestForkAndDeleteLeaveHostFiles(t *testing.T) { onTiers(t, testForkAndDeleteLeaveHostFiles) }

func testForkAndDeleteLeaveHostFiles(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	v := newVictim(t)
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	asRoot(t, rt, s.ID(), fmt.Sprintf(`set -e
cd /workspace
ln -s %[1]s/keep file; ln -s %[1]s dir; mkdir -p deep/a; ln -s %[1]s deep/a/b
ln -s / root; ln -s ../../../../../../..%[1]s up
rm -rf /home/user; ln -s %[1]s /home/user
mkdir -p /var/tmp && ln -s %[1]s /var/tmp/v`, v.dir))
	// While it runs, root inside swaps a directory for a link in a loop.
	if _, err := rootSession(t, rt, s.ID()).Start(ctx, sandbox.ExecRequest{Cmd: "sh", Args: []string{"-c", fmt.Sprintf("cd /workspace; while :; do mkdir -p sw/x; mv sw sw.d; ln -s %s sw; rm sw; mv sw.d sw; done", v.dir)}, User: "root", Dir: "/"}); err != nil {
		t.Fatal(err)
	}
	var forks []string
	for range 3 {
		f, err := rt.Fork(ctx, s.ID())
		if err != nil {
			t.Fatalf("fork: %v", err)
		}
		forks = append(forks, f.ID())
		v.check(t, "after a fork")
		links := asRoot(t, rt, f.ID(), "cd /workspace; readlink file dir deep/a/b up")
		if want := fmt.Sprintf("%[1]s/keep\n%[1]s\n%[1]s\n../../../../../../..%[1]s\n", v.dir); links != want {
			t.Errorf("the fork's links: %q, want them as they were, %q", links, want)
		}
		// No host file came along: not through the links, not through
		// the directory swapped for a link during the copy.
		if out := asRoot(t, rt, f.ID(), "cd /workspace; cat file dir/keep sw/keep up/keep 2>/dev/null; find / -xdev -name keep 2>/dev/null; true"); out != "" {
			t.Errorf("the fork holds the host's file: %q", out)
		}
	}
	for _, id := range append(forks, s.ID()) {
		if err := rt.Delete(ctx, id); err != nil {
			t.Errorf("delete %s: %v", id, err)
		}
		v.check(t, "after a delete")
	}
}

// TestDeleteDetachesLeftMounts: a mount left under a sandbox's directory
// (a crash mid-start, an operator's bind) is detached before the
// directory is deleted, never deleted through.
func TestDeleteDetachesLeftMounts(t *testing.T) { onTiers(t, testDeleteDetachesLeftMounts) }

func testDeleteDetachesLeftMounts(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	v := newVictim(t)
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	if err := rt.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	st, err := rt.load(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	for _, target := range []string{filepath.Join(st.Init.Upper, "workspace"), filepath.Join(rt.dir(s.ID()), "rootfs")} {
		if err := unix.Mount(v.dir, target, "", unix.MS_BIND, ""); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { unix.Unmount(target, unix.MNT_DETACH) })
	}
	if err := rt.Delete(ctx, s.ID()); err != nil {
		t.Errorf("delete: %v", err)
	}
	v.check(t, "after delete")
	if _, err := os.Stat(rt.dir(s.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's directory is still there: %v", err)
	}
}

// TestDeleteImmutableFiles: a file in a sandbox's disk marked immutable
// or append-only (as a template's file copied up may be) does not stop a
// delete.
func TestDeleteImmutableFiles(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	if err := rt.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	st, err := rt.load(s.ID())
	if err != nil {
		t.Fatal(err)
	}
	var made []string
	for _, c := range []struct {
		name string
		flag int
	}{{"workspace/immutable", fsImmutableFL}, {"workspace/appendonly", fsAppendFL}, {"workspace/sub", fsImmutableFL}} {
		p := filepath.Join(st.Init.Upper, c.name)
		if strings.HasSuffix(c.name, "sub") {
			os.Mkdir(p, 0o755)
			os.WriteFile(filepath.Join(p, "f"), nil, 0o644)
		} else {
			os.WriteFile(p, []byte("x"), 0o644)
		}
		if err := setFlags(p, c.flag, true); err != nil {
			t.Skipf("cannot set file flags here: %v", err)
		}
		made = append(made, p)
	}
	t.Cleanup(func() {
		for _, p := range made {
			setFlags(p, fsImmutableFL|fsAppendFL, false)
		}
	})
	if err := rt.Delete(ctx, s.ID()); err != nil {
		t.Errorf("delete: %v", err)
	}
	if _, err := os.Stat(rt.dir(s.ID())); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the sandbox's directory is still there: %v", err)
	}
}

// Inode flags of FS_IOC_SETFLAGS (<linux/fs.h>).
const (
	fsImmutableFL = 0x10
	fsAppendFL    = 0x20
)

// setFlags sets (on) or clears (!on) flags of the inode at p, keeping its
// other flags (ext4 refuses to drop its extents flag).
func setFlags(p string, flags int, on bool) error {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	cur, err := unix.IoctlGetUint32(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		return err
	}
	if on {
		cur |= uint32(flags)
	} else {
		cur &^= uint32(flags)
	}
	return unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, int(cur))
}

// TestMountViewOnlyOfSupervisors: the runtime reaches a running
// sandbox's disk and a gVisor sandbox's socket through its supervisor's
// mount namespace, found by the supervisor's pid. Should that pid name a
// process of a sandbox instead (a dead supervisor's pid, reused), the
// runtime must find no view at all rather than the root that sandbox's
// tenant controls, where it would copy a planted "disk" or send a
// daemon's token to a planted socket.
func TestMountViewOnlyOfSupervisors(t *testing.T) {
	rt := newRuntime(t)
	s, err := rt.Create(context.Background(), sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	st, err := sbdir.Read(rt.dir(s.ID()))
	if err != nil {
		t.Fatal(err)
	}
	if host.MountView(st.ShimPID) == "" {
		t.Fatal("no view of the running sandbox's supervisor: the check below would prove nothing")
	}
	if view := host.MountView(st.InitPID); view != "" {
		t.Errorf("the pid of the sandbox's pid 1 gives the view %s, a root the tenant controls", view)
	}
}
