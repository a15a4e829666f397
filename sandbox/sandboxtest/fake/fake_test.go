package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"
)

func newFakeSession(t *testing.T, spec sandbox.Spec) (*Runtime, *Session) {
	t.Helper()
	rt := programs(New())
	s, err := rt.Create(context.Background(), spec)
	if err != nil {
		t.Fatalf("Create: %v", err)
	}
	return rt, s.(*Session)
}

func fakeWrite(t *testing.T, s sandbox.Session, p, content string) {
	t.Helper()
	if err := s.WriteFile(context.Background(), p, strings.NewReader(content), 0o644); err != nil {
		t.Fatalf("WriteFile(%q): %v", p, err)
	}
}

func fakeRead(s sandbox.Session, p string) (string, error) {
	rc, err := s.ReadFile(context.Background(), p)
	if err != nil {
		return "", err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	return string(b), err
}

// programs gives rt the few programs these tests run, each a line or two
// over its process's streams (not an imitation of the real one): true,
// false, sleep (until a signal), cat (stdin to stdout) and yes (y lines
// until killed).
func programs(rt *Runtime) *Runtime {
	rt.Script("true", "", 0)
	rt.Script("false", "", 1)
	rt.Handle("sleep", func(ctx context.Context, _ *Proc) int {
		<-ctx.Done()
		return 0
	})
	rt.Handle("cat", func(_ context.Context, p *Proc) int {
		if _, err := io.Copy(p.Stdout, p.Stdin); err != nil {
			return 1
		}
		return 0
	})
	rt.Handle("yes", func(_ context.Context, p *Proc) int {
		for {
			if _, err := io.WriteString(p.Stdout, "y\n"); err != nil {
				return 1
			}
		}
	})
	return rt
}

func fakeSymlink(t *testing.T, s *Session, target, link string) {
	t.Helper()
	if err := s.Symlink(context.Background(), target, link); err != nil {
		t.Fatalf("Symlink(%q, %q): %v", target, link, err)
	}
}

func fakeWantErr(t *testing.T, what string, err, target error) {
	t.Helper()
	if !errors.Is(err, target) {
		t.Errorf("%s: got error %v, want one wrapping %v", what, err, target)
	}
}

func TestFakeLifecycle(t *testing.T) {
	ctx := context.Background()
	rt := programs(New())
	spec := sandbox.Spec{Labels: map[string]string{"k": "v"}, Env: map[string]string{"A": "1"}}
	s1, err := rt.Create(ctx, spec)
	if err != nil {
		t.Fatal(err)
	}
	s2, err := rt.Create(ctx, sandbox.Spec{Root: "/home/user/work"})
	if err != nil {
		t.Fatal(err)
	}
	if s1.ID() == s2.ID() {
		t.Fatalf("two sandboxes share id %q", s1.ID())
	}
	infos, err := rt.List(ctx)
	if err != nil || len(infos) != 2 || infos[0].ID != s1.ID() || infos[1].ID != s2.ID() {
		t.Fatalf("List = %+v, %v; want s1, s2 in creation order", infos, err)
	}
	wantSpec := spec
	wantSpec.Root = sandbox.DefaultRoot
	if !reflect.DeepEqual(infos[0].Spec, wantSpec) || infos[0].State != sandbox.StateRunning {
		t.Errorf("Info = %+v, want spec %+v, running", infos[0], wantSpec)
	}
	if _, err := rt.Get(ctx, "nope"); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Get(unknown): got %v, want ErrNotFound", err)
	}

	fakeWrite(t, s1, "keep.txt", "kept")
	p, err := s1.Start(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"100"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := rt.Stop(ctx, s1.ID()); err != nil {
		t.Fatalf("Stop: %v", err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st.Code != -1 || st.Signal != "killed" {
		t.Errorf("Wait after Stop = %+v, %v; want killed", st, err)
	}
	if err := rt.Stop(ctx, s1.ID()); err != nil {
		t.Errorf("second Stop: %v", err)
	}
	info, err := s1.Info(ctx)
	if err != nil || info.State != sandbox.StateStopped {
		t.Errorf("Info after Stop = %+v, %v; want stopped", info, err)
	}
	_, err = s1.ReadFile(ctx, "keep.txt")
	fakeWantErr(t, "ReadFile on stopped", err, sandbox.ErrState)
	_, err = s1.Exec(ctx, sandbox.ExecRequest{Cmd: "true"})
	fakeWantErr(t, "Exec on stopped", err, sandbox.ErrState)
	_, err = s1.Start(ctx, sandbox.ExecRequest{Cmd: "true"})
	fakeWantErr(t, "Start on stopped", err, sandbox.ErrState)
	fakeWantErr(t, "WriteFile on stopped", s1.WriteFile(ctx, "x", strings.NewReader(""), 0), sandbox.ErrState)
	_, err = s1.DialPort(ctx, 80)
	fakeWantErr(t, "DialPort on stopped", err, sandbox.ErrState)

	got, err := rt.Get(ctx, s1.ID())
	if err != nil {
		t.Fatalf("Get(stopped): %v", err)
	}
	if got.ID() != s1.ID() {
		t.Errorf("Get returned %q, want %q", got.ID(), s1.ID())
	}
	resumed, err := rt.Resume(ctx, s1.ID())
	if err != nil {
		t.Fatalf("Resume: %v", err)
	}
	if body, err := fakeRead(resumed, "keep.txt"); err != nil || body != "kept" {
		t.Errorf("after Resume, keep.txt = %q, %v; want \"kept\"", body, err)
	}
	if _, err := resumed.Attach(ctx, sandbox.ProcessSelector{PID: p.PID()}, nil, nil); !errors.Is(err, sandbox.ErrNotFound) {
		t.Errorf("Attach to a process from before Stop: got %v, want ErrNotFound", err)
	}
	if again, err := rt.Resume(ctx, s1.ID()); err != nil || again.ID() != s1.ID() {
		t.Errorf("Resume(running) = %v, %v", again, err)
	}

	if err := rt.Delete(ctx, s1.ID()); err != nil {
		t.Fatalf("Delete: %v", err)
	}
	fakeWantErr(t, "Delete twice", rt.Delete(ctx, s1.ID()), sandbox.ErrNotFound)
	fakeWantErr(t, "Stop deleted", rt.Stop(ctx, s1.ID()), sandbox.ErrNotFound)
	_, err = rt.Resume(ctx, s1.ID())
	fakeWantErr(t, "Resume deleted", err, sandbox.ErrNotFound)
	_, err = rt.Get(ctx, s1.ID())
	fakeWantErr(t, "Get deleted", err, sandbox.ErrNotFound)
	_, err = s1.ReadFile(ctx, "keep.txt")
	fakeWantErr(t, "ReadFile on deleted", err, sandbox.ErrNotFound)
	_, err = s1.Info(ctx)
	fakeWantErr(t, "Info on deleted", err, sandbox.ErrNotFound)
	if infos, _ := rt.List(ctx); len(infos) != 1 || infos[0].ID != s2.ID() {
		t.Errorf("List after Delete = %+v, want only %s", infos, s2.ID())
	}
}

func TestFakeCreateErrors(t *testing.T) {
	ctx := context.Background()
	rt := programs(New())
	rt.MaxSandboxes = 1
	for _, tt := range []struct {
		name string
		spec sandbox.Spec
		want error
	}{
		{"relative root", sandbox.Spec{Root: "work"}, sandbox.ErrInvalid},
		{"root with NUL", sandbox.Spec{Root: "/w\x00"}, sandbox.ErrInvalid},
		{"root above /", sandbox.Spec{Root: "/../w"}, sandbox.ErrInvalid},
		{"env name with =", sandbox.Spec{Env: map[string]string{"A=B": "c"}}, sandbox.ErrInvalid},
		{"negative limit", sandbox.Spec{Limits: sandbox.Limits{Pids: -1}}, sandbox.ErrInvalid},
		{"bad network", sandbox.Spec{Network: sandbox.Network{Mode: "bridge"}}, sandbox.ErrInvalid},
		{"negative ttl", sandbox.Spec{TTL: -time.Second}, sandbox.ErrInvalid},
		{"unknown template", sandbox.Spec{Template: "no-such"}, sandbox.ErrNotFound},
	} {
		_, err := rt.Create(ctx, tt.spec)
		fakeWantErr(t, tt.name, err, tt.want)
	}
	if _, err := rt.Create(ctx, sandbox.Spec{Template: "default"}); err != nil {
		t.Fatalf("Create(default template): %v", err)
	}
	_, err := rt.Create(ctx, sandbox.Spec{})
	fakeWantErr(t, "over MaxSandboxes", err, sandbox.ErrLimit)
}

func TestFakeTTL(t *testing.T) {
	rt, s := newFakeSession(t, sandbox.Spec{TTL: 20 * time.Millisecond})
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		info, err := s.Info(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		if info.State == sandbox.StateStopped {
			if _, err := rt.Resume(context.Background(), s.ID()); err != nil {
				t.Fatal(err)
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("sandbox still running long after its TTL")
}

func TestFakeFiles(t *testing.T) {
	ctx := context.Background()
	_, s := newFakeSession(t, sandbox.Spec{})
	fakeWrite(t, s, "a/b/c.txt", "hello")
	if got, err := fakeRead(s, "/workspace/a/b/c.txt"); err != nil || got != "hello" {
		t.Errorf("ReadFile = %q, %v", got, err)
	}
	if err := s.WriteFile(ctx, "a/run.sh", strings.NewReader("#!"), 0o4755); err != nil {
		t.Fatal(err)
	}
	fi, err := s.Stat(ctx, "a/run.sh")
	if err != nil {
		t.Fatal(err)
	}
	if fi.Name != "run.sh" || fi.Path != "/workspace/a/run.sh" || fi.Type != sandbox.TypeFile || fi.Size != 2 || fi.Mode != 0o755 {
		t.Errorf("Stat = %+v, want run.sh, /workspace/a/run.sh, file, 2 bytes, 0755", fi)
	}
	fi, err = s.Stat(ctx, "a/b")
	if err != nil || fi.Type != sandbox.TypeDir {
		t.Errorf("Stat(dir) = %+v, %v", fi, err)
	}
	if fi, err := s.Stat(ctx, "/workspace"); err != nil || fi.Type != sandbox.TypeDir || fi.Name != "workspace" {
		t.Errorf("Stat(root) = %+v, %v", fi, err)
	}

	fakeWrite(t, s, "a-z", "")
	list, err := s.List(ctx, ".", 0)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := fakePaths(list), []string{"/workspace/a", "/workspace/a-z"}; !reflect.DeepEqual(got, want) {
		t.Errorf("List(., 0) = %q, want %q", got, want)
	}
	list, err = s.List(ctx, "", 3)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"/workspace/a", "/workspace/a/b", "/workspace/a/b/c.txt", "/workspace/a/run.sh", "/workspace/a-z"}
	if got := fakePaths(list); !reflect.DeepEqual(got, want) {
		t.Errorf("List(., 3) = %q, want %q", got, want)
	}
	_, err = s.List(ctx, "a-z", 1)
	fakeWantErr(t, "List(file)", err, sandbox.ErrInvalid)
	_, err = s.List(ctx, "missing", 1)
	fakeWantErr(t, "List(missing)", err, sandbox.ErrNotFound)

	if err := s.Mkdir(ctx, "a/b"); err != nil {
		t.Errorf("Mkdir(existing dir): %v", err)
	}
	if err := s.Mkdir(ctx, "x/y/z"); err != nil {
		t.Errorf("Mkdir(x/y/z): %v", err)
	}
	fakeWantErr(t, "Mkdir(file)", s.Mkdir(ctx, "a-z"), sandbox.ErrExist)
	fakeWantErr(t, "Mkdir(under file)", s.Mkdir(ctx, "a-z/d"), sandbox.ErrExist)
	fakeWantErr(t, "WriteFile(under file)", s.WriteFile(ctx, "a-z/f", strings.NewReader(""), 0), sandbox.ErrExist)
	fakeWantErr(t, "WriteFile(dir)", s.WriteFile(ctx, "a", strings.NewReader(""), 0), sandbox.ErrInvalid)
	_, err = s.ReadFile(ctx, "a")
	fakeWantErr(t, "ReadFile(dir)", err, sandbox.ErrInvalid)
	_, err = s.ReadFile(ctx, "nope")
	fakeWantErr(t, "ReadFile(missing)", err, sandbox.ErrNotFound)
	_, err = s.Stat(ctx, "nope")
	fakeWantErr(t, "Stat(missing)", err, sandbox.ErrNotFound)
	_, err = s.ReadFile(ctx, "a-z/x")
	fakeWantErr(t, "ReadFile(under file)", err, sandbox.ErrNotFound)

	if err := s.Move(ctx, "a/b", "m/n"); err != nil {
		t.Fatalf("Move: %v", err)
	}
	if got, err := fakeRead(s, "m/n/c.txt"); err != nil || got != "hello" {
		t.Errorf("after Move, m/n/c.txt = %q, %v", got, err)
	}
	_, err = s.Stat(ctx, "a/b/c.txt")
	fakeWantErr(t, "Stat(moved away)", err, sandbox.ErrNotFound)
	fakeWantErr(t, "Move(missing)", s.Move(ctx, "nope", "x2"), sandbox.ErrNotFound)
	fakeWantErr(t, "Move(onto existing)", s.Move(ctx, "a-z", "a/run.sh"), sandbox.ErrExist)
	fakeWantErr(t, "Move(into itself)", s.Move(ctx, "m", "m/n/inner"), sandbox.ErrInvalid)
	fakeWantErr(t, "Move(root)", s.Move(ctx, ".", "r"), sandbox.ErrInvalid)

	if err := s.Remove(ctx, "m"); err != nil {
		t.Errorf("Remove(tree): %v", err)
	}
	_, err = s.Stat(ctx, "m/n/c.txt")
	fakeWantErr(t, "Stat(removed)", err, sandbox.ErrNotFound)
	fakeWantErr(t, "Remove(missing)", s.Remove(ctx, "m"), sandbox.ErrNotFound)
	fakeWantErr(t, "Remove(root)", s.Remove(ctx, "/workspace"), sandbox.ErrInvalid)
	fakeWantErr(t, "Remove(.)", s.Remove(ctx, "."), sandbox.ErrInvalid)

	for _, p := range []string{"../etc/passwd", "/etc/passwd", "/workspace/../etc", "a\x00b", "/../workspace/x"} {
		_, err := s.ReadFile(ctx, p)
		fakeWantErr(t, "ReadFile("+p+")", err, sandbox.ErrInvalid)
		fakeWantErr(t, "WriteFile("+p+")", s.WriteFile(ctx, p, strings.NewReader("x"), 0), sandbox.ErrInvalid)
	}
}

func fakePaths(list []sandbox.FileInfo) []string {
	var out []string
	for _, fi := range list {
		out = append(out, fi.Path)
	}
	return out
}

func TestFakeSymlinks(t *testing.T) {
	ctx := context.Background()
	_, s := newFakeSession(t, sandbox.Spec{})
	fakeWrite(t, s, "sub/file", "inside")
	for _, l := range [][2]string{
		{"/etc/passwd", "out"},
		{"/", "rootlink"},
		{"../..", "up"},
		{".", "d"},
		{"d/..", "e"},
		{"sub/file", "rel"},
		{"/workspace/sub", "abs"},
		{"loop2", "loop1"},
		{"loop1", "loop2"},
		{"missing", "dangling"},
	} {
		fakeSymlink(t, s, l[0], l[1])
	}
	for _, p := range []string{"out", "rootlink/etc/passwd", "up/etc/passwd", "e/workspace/sub/file", "sub/../out", "loop1"} {
		_, err := s.ReadFile(ctx, p)
		fakeWantErr(t, "ReadFile("+p+")", err, sandbox.ErrInvalid)
		fakeWantErr(t, "WriteFile("+p+")", s.WriteFile(ctx, p, strings.NewReader("x"), 0), sandbox.ErrInvalid)
	}
	fakeWantErr(t, "Mkdir through link", s.Mkdir(ctx, "rootlink/tmp/x"), sandbox.ErrInvalid)
	for p, want := range map[string]string{"rel": "inside", "abs/file": "inside", "d/d/sub/file": "inside"} {
		if got, err := fakeRead(s, p); err != nil || got != want {
			t.Errorf("ReadFile(%q) = %q, %v; want %q", p, got, err, want)
		}
	}
	fi, err := s.Stat(ctx, "out")
	if err != nil || fi.Type != sandbox.TypeSymlink || fi.SymlinkTarget != "/etc/passwd" {
		t.Errorf("Stat(out) = %+v, %v; want the symlink itself", fi, err)
	}
	// Writing through a dangling in-workspace link creates its target.
	fakeWrite(t, s, "dangling", "made")
	if got, _ := fakeRead(s, "missing"); got != "made" {
		t.Errorf("missing = %q, want \"made\"", got)
	}
	// Removing a link removes the link, not the target.
	if err := s.Remove(ctx, "abs"); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Stat(ctx, "sub/file"); err != nil {
		t.Errorf("Remove(link) removed its target: %v", err)
	}
	fakeWantErr(t, "Symlink onto an existing name", s.Symlink(ctx, "x", "rel"), sandbox.ErrExist)
	fakeWantErr(t, "Symlink out of the workspace", s.Symlink(ctx, "x", "../x"), sandbox.ErrInvalid)
	fakeWantErr(t, "Symlink in a missing directory", s.Symlink(ctx, "x", "no/x"), sandbox.ErrNotFound)
}

func TestFakeDiskLimit(t *testing.T) {
	ctx := context.Background()
	_, s := newFakeSession(t, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 10}})
	fakeWrite(t, s, "a", "12345")
	fakeWantErr(t, "WriteFile over the limit", s.WriteFile(ctx, "b", strings.NewReader("123456"), 0), sandbox.ErrLimit)
	fakeWrite(t, s, "a", "1234567890") // replacing frees the old bytes
	err := s.WriteFile(ctx, "b", strings.NewReader("x"), 0)
	if !errors.Is(err, sandbox.ErrLimit) || !strings.Contains(err.Error(), "no space") {
		t.Errorf("WriteFile over a full disk: got %v, want ErrLimit saying no space", err)
	}
}

func TestFakeSnapshotRestore(t *testing.T) {
	ctx := context.Background()
	rt, s := newFakeSession(t, sandbox.Spec{})
	fakeWrite(t, s, "src/main.go", "package main")
	if err := s.WriteFile(ctx, "bin/run", strings.NewReader("#!/bin/sh"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := s.Mkdir(ctx, "empty"); err != nil {
		t.Fatal(err)
	}
	fakeSymlink(t, s, "src/main.go", "link")
	var snap bytes.Buffer
	if err := s.SnapshotWorkspace(ctx, &snap); err != nil {
		t.Fatalf("SnapshotWorkspace: %v", err)
	}
	var names []string
	tr := tar.NewReader(bytes.NewReader(snap.Bytes()))
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	if want := []string{"bin/", "bin/run", "empty/", "link", "src/", "src/main.go"}; !reflect.DeepEqual(names, want) {
		t.Errorf("snapshot members %q, want %q", names, want)
	}

	s2, err := rt.Create(ctx, sandbox.Spec{Root: "/other"})
	if err != nil {
		t.Fatal(err)
	}
	if err := s2.RestoreWorkspace(ctx, bytes.NewReader(snap.Bytes())); err != nil {
		t.Fatalf("RestoreWorkspace: %v", err)
	}
	l1, _ := s.List(ctx, ".", 5)
	l2, _ := s2.List(ctx, ".", 5)
	if len(l1) != len(l2) {
		t.Fatalf("restored %d entries, want %d", len(l2), len(l1))
	}
	for i := range l1 {
		a, b := l1[i], l2[i]
		if a.Name != b.Name || a.Type != b.Type || a.Mode != b.Mode || a.Size != b.Size || a.SymlinkTarget != b.SymlinkTarget ||
			!a.ModTime.Truncate(time.Second).Equal(b.ModTime) {
			t.Errorf("restored %+v, want %+v", b, a)
		}
	}
	if got, _ := fakeRead(s2, "link"); got != "package main" {
		t.Errorf("restored link reads %q", got)
	}

	hostile := func(members ...*tar.Header) []byte {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, h := range members {
			tw.WriteHeader(h)
			if h.Size > 0 {
				tw.Write(bytes.Repeat([]byte("x"), int(h.Size)))
			}
		}
		tw.Close()
		return buf.Bytes()
	}
	for _, tt := range []struct {
		name    string
		tar     []byte
		wantErr string
	}{
		{"dotdot", hostile(&tar.Header{Typeflag: tar.TypeReg, Name: "ok", Size: 1}, &tar.Header{Typeflag: tar.TypeReg, Name: "../x"}), `tar member "../x"`},
		{"absolute", hostile(&tar.Header{Typeflag: tar.TypeReg, Name: "/etc/x"}), `tar member "/etc/x"`},
		{"device", hostile(&tar.Header{Typeflag: tar.TypeChar, Name: "null"}), `tar member "null"`},
		{"link out", hostile(&tar.Header{Typeflag: tar.TypeSymlink, Name: "l", Linkname: "/etc"}), `tar member "l"`},
		{"through link", hostile(&tar.Header{Typeflag: tar.TypeSymlink, Name: "d", Linkname: "src"}, &tar.Header{Typeflag: tar.TypeReg, Name: "d/f"}), `tar member "d/f": parent "d" is a symlink`},
		{"hardlink", hostile(&tar.Header{Typeflag: tar.TypeLink, Name: "h", Linkname: "src/main.go"}), `tar member "h"`},
	} {
		_, s3 := newFakeSession(t, sandbox.Spec{})
		fakeWrite(t, s3, "src/main.go", "x")
		err := s3.RestoreWorkspace(ctx, bytes.NewReader(tt.tar))
		fakeWantErr(t, tt.name, err, sandbox.ErrInvalid)
		if err != nil && !strings.Contains(err.Error(), tt.wantErr) {
			t.Errorf("%s: error %q does not contain %q", tt.name, err, tt.wantErr)
		}
		if tt.name == "dotdot" {
			if got, _ := fakeRead(s3, "ok"); got != "x" {
				t.Errorf("member before the bad one: ok = %q, want it written", got)
			}
		}
	}
}

// fakeBuffer is a bytes.Buffer safe for a process goroutine to write
// while the test reads.
type fakeBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *fakeBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *fakeBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func fakeWaitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}

// TestFakeExec: a scripted program sees what the request asked for
// (command line, directory, environment, user, stdin), and what it prints
// and returns is the process's output and status.
func TestFakeExec(t *testing.T) {
	rt := programs(New())
	show := func(_ context.Context, p *Proc) int {
		in, _ := io.ReadAll(p.Stdin)
		fmt.Fprintf(p.Stdout, "%q in %s as %s: %s %s %s %q\n", p.Args, p.Dir, p.User, p.Env["SPEC"], p.Env["BOTH"], p.Env["REQ"], in)
		fmt.Fprint(p.Stderr, "to stderr\n")
		return 3
	}
	rt.Handle("show", show)
	rt.Handle("sh", show)
	sess, err := rt.Create(context.Background(), sandbox.Spec{Env: map[string]string{"SPEC": "from-spec", "BOTH": "spec"}})
	if err != nil {
		t.Fatal(err)
	}
	s := sess.(*Session)
	if err := s.Mkdir(context.Background(), "dir"); err != nil {
		t.Fatal(err)
	}
	pty := &sandbox.PTYSize{Cols: 80, Rows: 24}
	tests := []struct {
		name       string
		req        sandbox.ExecRequest
		wantOut    string
		wantErrOut string
		wantCode   int
	}{
		{name: "true", req: sandbox.ExecRequest{Cmd: "true"}},
		{name: "false", req: sandbox.ExecRequest{Cmd: "false"}, wantCode: 1},
		{name: "request", req: sandbox.ExecRequest{Cmd: "show", Args: []string{"a", "b"}, Dir: "dir", User: "alice",
			Env: map[string]string{"REQ": "r", "BOTH": "req"}, Stdin: strings.NewReader("piped")},
			wantOut: `["show" "a" "b"] in /workspace/dir as alice: from-spec req r "piped"` + "\n", wantErrOut: "to stderr\n", wantCode: 3},
		{name: "bin path", req: sandbox.ExecRequest{Cmd: "/usr/bin/show"},
			wantOut: `["/usr/bin/show"] in /workspace as user: from-spec spec  ""` + "\n", wantErrOut: "to stderr\n", wantCode: 3},
		{name: "shell", req: sandbox.ExecRequest{Cmd: "echo $1", Shell: true, Args: []string{"zero", "one"}},
			wantOut: `["sh" "-c" "echo $1" "zero" "one"] in /workspace as user: from-spec spec  ""` + "\n", wantErrOut: "to stderr\n", wantCode: 3},
		{name: "pty", req: sandbox.ExecRequest{Cmd: "show", PTY: pty, Stdin: strings.NewReader("typed")},
			wantOut: `["show"] in /workspace as user: from-spec spec  "typed"` + "\nto stderr\n", wantCode: 3},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var out, errOut bytes.Buffer
			tt.req.Stdout, tt.req.Stderr = &out, &errOut
			st, err := s.Exec(context.Background(), tt.req)
			if err != nil {
				t.Fatalf("Exec: %v", err)
			}
			if st != (sandbox.ExitStatus{Code: tt.wantCode}) {
				t.Errorf("status %+v, want code %d", st, tt.wantCode)
			}
			if out.String() != tt.wantOut || errOut.String() != tt.wantErrOut {
				t.Errorf("stdout %q, stderr %q; want %q, %q", out.String(), errOut.String(), tt.wantOut, tt.wantErrOut)
			}
		})
	}
}

func TestFakeExecErrors(t *testing.T) {
	ctx := context.Background()
	_, s := newFakeSession(t, sandbox.Spec{})
	fakeWrite(t, s, "file", "")
	for _, tt := range []struct {
		name string
		req  sandbox.ExecRequest
		want error
	}{
		{"empty", sandbox.ExecRequest{}, sandbox.ErrInvalid},
		{"empty shell", sandbox.ExecRequest{Cmd: "  ", Shell: true}, sandbox.ErrInvalid},
		{"unknown program", sandbox.ExecRequest{Cmd: "python3", Args: []string{"-V"}}, sandbox.ErrNotFound},
		{"unknown path", sandbox.ExecRequest{Cmd: "./echo"}, sandbox.ErrNotFound},
		{"dir missing", sandbox.ExecRequest{Cmd: "true", Dir: "nope"}, sandbox.ErrInvalid},
		{"dir is file", sandbox.ExecRequest{Cmd: "true", Dir: "file"}, sandbox.ErrInvalid},
		{"dir escapes", sandbox.ExecRequest{Cmd: "true", Dir: "/etc"}, sandbox.ErrInvalid},
		{"bad env", sandbox.ExecRequest{Cmd: "true", Env: map[string]string{"": "x"}}, sandbox.ErrInvalid},
	} {
		_, err := s.Exec(ctx, tt.req)
		fakeWantErr(t, tt.name, err, tt.want)
	}
	_, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "foo"})
	if err == nil || !strings.Contains(err.Error(), `program "foo" not found`) {
		t.Errorf("Exec(foo) error %v, want it to say program \"foo\" not found", err)
	}

	ctx2, cancel := context.WithTimeout(ctx, 20*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err = s.Exec(ctx2, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}})
	if !errors.Is(err, context.DeadlineExceeded) || time.Since(start) > 5*time.Second {
		t.Errorf("Exec(sleep) past its deadline = %v after %v, want DeadlineExceeded soon", err, time.Since(start))
	}
	if procs, _ := s.Processes(ctx); len(procs) != 0 {
		t.Errorf("after a cancelled Exec, processes %+v still run", procs)
	}
}

func TestFakeStartSignalAttach(t *testing.T) {
	ctx := context.Background()
	_, s := newFakeSession(t, sandbox.Spec{})
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "sleep", Args: []string{"30"}, Tag: "sleeper", Env: map[string]string{"K": "V"}})
	if err != nil {
		t.Fatal(err)
	}
	if p.Tag() != "sleeper" || p.PID() <= 0 {
		t.Errorf("handle pid %d tag %q", p.PID(), p.Tag())
	}
	procs, err := s.Processes(ctx)
	want := []sandbox.ProcessInfo{{PID: p.PID(), Tag: "sleeper", Cmd: "sleep", Args: []string{"30"}, Env: map[string]string{"K": "V"}, Dir: "/workspace"}}
	if err != nil || !reflect.DeepEqual(procs, want) {
		t.Errorf("Processes = %+v, %v; want %+v", procs, err, want)
	}
	_, err = s.Start(ctx, sandbox.ExecRequest{Cmd: "true", Tag: "sleeper"})
	fakeWantErr(t, "duplicate tag", err, sandbox.ErrExist)
	fakeWantErr(t, "Resize without PTY", p.Resize(ctx, sandbox.PTYSize{Cols: 1, Rows: 1}), sandbox.ErrInvalid)

	h, err := s.Attach(ctx, sandbox.ProcessSelector{Tag: "sleeper"}, nil, nil)
	if err != nil || h.PID() != p.PID() {
		t.Fatalf("Attach(tag) = %v, %v", h, err)
	}
	short, cancel := context.WithTimeout(ctx, 10*time.Millisecond)
	_, err = h.Wait(short)
	cancel()
	fakeWantErr(t, "Wait past ctx", err, context.DeadlineExceeded)

	if err := h.Signal(ctx, sandbox.SIGTERM); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil || st != (sandbox.ExitStatus{Code: -1, Signal: "terminated"}) {
		t.Errorf("Wait after SIGTERM = %+v, %v", st, err)
	}
	fakeWantErr(t, "Signal ended", p.Signal(ctx, sandbox.SIGKILL), sandbox.ErrState)
	fakeWantErr(t, "Write ended", p.Write(ctx, []byte("x")), sandbox.ErrState)
	if procs, _ := s.Processes(ctx); len(procs) != 0 {
		t.Errorf("Processes after exit = %+v, want none", procs)
	}
	// A recently ended process can still be attached to; its tag is free.
	if _, err := s.Attach(ctx, sandbox.ProcessSelector{PID: p.PID()}, nil, nil); err != nil {
		t.Errorf("Attach(ended pid): %v", err)
	}
	if _, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "true", Tag: "sleeper"}); err != nil {
		t.Errorf("Start reusing an ended process's tag: %v", err)
	}
	_, err = s.Attach(ctx, sandbox.ProcessSelector{PID: 9999}, nil, nil)
	fakeWantErr(t, "Attach(unknown pid)", err, sandbox.ErrNotFound)
	_, err = s.Attach(ctx, sandbox.ProcessSelector{Tag: "nope", PID: p.PID()}, nil, nil)
	fakeWantErr(t, "Attach(unknown tag wins over pid)", err, sandbox.ErrNotFound)

	y, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "yes"})
	if err != nil {
		t.Fatal(err)
	}
	if err := y.Signal(ctx, sandbox.SIGKILL); err != nil {
		t.Fatal(err)
	}
	if st, _ := y.Wait(ctx); st.Signal != "killed" || st.Code != -1 {
		t.Errorf("yes after SIGKILL: %+v", st)
	}
}

func TestFakeStdinAndAttachBuffer(t *testing.T) {
	ctx := context.Background()
	_, s := newFakeSession(t, sandbox.Spec{})
	var first fakeBuffer
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true, Stdout: &first})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Write(ctx, []byte("one ")); err != nil {
		t.Fatal(err)
	}
	fakeWaitFor(t, "first output", func() bool { return first.String() == "one " })
	if err := p.Detach(); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(ctx, []byte("two ")); err != nil {
		t.Fatal(err)
	}
	if err := p.Write(ctx, []byte("three")); err != nil {
		t.Fatal(err)
	}
	var second fakeBuffer
	h, err := s.Attach(ctx, sandbox.ProcessSelector{PID: p.PID()}, &second, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	st, err := h.Wait(ctx)
	if err != nil || !st.Success() {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	if got := second.String(); got != "two three" {
		t.Errorf("reattached reader got %q, want %q", got, "two three")
	}
	if got := first.String(); got != "one " {
		t.Errorf("detached reader got %q, want only %q", got, "one ")
	}
	fakeWantErr(t, "Write after exit", h.Write(ctx, []byte("x")), sandbox.ErrState)

	// Stdin closed by the caller: further writes are ErrState.
	q, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := q.CloseStdin(ctx); err != nil {
		t.Fatal(err)
	}
	err = q.Write(ctx, []byte("x"))
	if !errors.Is(err, sandbox.ErrState) {
		t.Errorf("Write after CloseStdin: got %v, want ErrState", err)
	}
	q.Wait(ctx)
}

func TestFakeAttachBufferBounded(t *testing.T) {
	ctx := context.Background()
	rt := programs(New())
	rt.OutputBuffer = 100
	sess, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	p, err := sess.Start(ctx, sandbox.ExecRequest{Cmd: "cat", OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	p.Detach()
	p.Write(ctx, bytes.Repeat([]byte("a"), 150))
	p.Write(ctx, bytes.Repeat([]byte("b"), 150))
	p.CloseStdin(ctx)
	st, err := p.Wait(ctx)
	if err != nil || st.Code != 0 || !strings.Contains(st.Error, "200 bytes of output were dropped") {
		t.Errorf("Wait = %+v, %v; want success noting 200 dropped bytes", st, err)
	}
	var out fakeBuffer
	if _, err := sess.Attach(ctx, sandbox.ProcessSelector{PID: p.PID()}, &out, nil); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), strings.Repeat("b", 100); got != want {
		t.Errorf("Attach after overflow delivered %q, want the newest 100 bytes %q", got, want)
	}
}

func TestFakePTY(t *testing.T) {
	ctx := context.Background()
	_, s := newFakeSession(t, sandbox.Spec{})
	var out fakeBuffer
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "cat", PTY: &sandbox.PTYSize{Cols: 80, Rows: 24}, Stdout: &out})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Resize(ctx, sandbox.PTYSize{Cols: 100, Rows: 30}); err != nil {
		t.Errorf("Resize: %v", err)
	}
	if err := p.Write(ctx, []byte("typed\x04ignored")); err != nil {
		t.Fatal(err)
	}
	st, err := p.Wait(ctx)
	if err != nil || !st.Success() || out.String() != "typed" {
		t.Errorf("after ^D: %+v, %v, output %q; want success and \"typed\"", st, err, out.String())
	}
}

func TestFakeDialPort(t *testing.T) {
	ctx := context.Background()
	rt, s := newFakeSession(t, sandbox.Spec{})
	_, err := s.DialPort(ctx, 8080)
	fakeWantErr(t, "DialPort with no listener", err, sandbox.ErrUnavailable)
	_, err = s.DialPort(ctx, 0)
	fakeWantErr(t, "DialPort(0)", err, sandbox.ErrInvalid)

	l := s.Listen(8080)
	if l.Addr().String() != "127.0.0.1:8080" {
		t.Errorf("Addr = %s", l.Addr())
	}
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				io.Copy(c, c)
			}()
		}
	}()
	c, err := s.DialPort(ctx, 8080)
	if err != nil {
		t.Fatalf("DialPort: %v", err)
	}
	go c.Write([]byte("ping"))
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Errorf("echo = %q, %v", buf, err)
	}
	c.Close()

	l.Close()
	_, err = s.DialPort(ctx, 8080)
	fakeWantErr(t, "DialPort after Close", err, sandbox.ErrUnavailable)

	l2 := s.Listen(8080) // the port is free again
	if err := rt.Stop(ctx, s.ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := l2.Accept(); !errors.Is(err, net.ErrClosed) {
		t.Errorf("Accept after Stop: got %v, want net.ErrClosed", err)
	}
}

func TestFakeConcurrent(t *testing.T) {
	// Exercised under -race: sessions are safe for concurrent use.
	ctx := context.Background()
	rt, s := newFakeSession(t, sandbox.Spec{})
	// A program that uses the file API while the test does.
	rt.Handle("touch", func(ctx context.Context, p *Proc) int {
		if p.Session.WriteFile(ctx, p.Args[1], strings.NewReader("x"), 0o644) != nil {
			return 1
		}
		return 0
	})
	var wg sync.WaitGroup
	for i := range 8 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			name := strings.Repeat("f", i+1)
			for j := range 20 {
				s.WriteFile(ctx, name, strings.NewReader(strings.Repeat("x", j)), 0)
				fakeRead(s, name)
				s.List(ctx, ".", 2)
				s.Exec(ctx, sandbox.ExecRequest{Cmd: "touch", Args: []string{name + ".log"}})
			}
		}()
	}
	wg.Wait()
	var snap bytes.Buffer
	if err := s.SnapshotWorkspace(ctx, &snap); err != nil {
		t.Fatal(err)
	}
}

// TestConformance runs the part of the conformance suite that needs no
// program (Options.Scripted); the fake's processes are tested above.
func TestConformance(t *testing.T) {
	sandboxtest.RunWithOptions(t, func(t *testing.T) sandbox.Runtime { return New() }, sandboxtest.Options{
		Scripted: true,
		Listen:   listen,
		Symlink: func(ctx context.Context, s sandbox.Session, target, link string) error {
			return s.(*Session).Symlink(ctx, target, link)
		},
	})
}

// listen serves an echo server on the fake sandbox's in-memory port.
func listen(t *testing.T, s sandbox.Session, port int) (stop func()) {
	fs, ok := s.(*Session)
	if !ok {
		t.Fatalf("session is a %T, want *Session", s)
	}
	l := fs.Listen(port)
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return // closed by stop or by the sandbox stopping
			}
			go func() {
				defer c.Close()
				_, _ = io.Copy(c, c)
			}()
		}
	}()
	return func() { _ = l.Close() }
}

// TestFakeProcessBySelector: the fake keeps the contract's handle-free
// process calls, so code that drives processes by pid or tag (the server)
// can be tested on it: a detached start keeps its output for the first
// attach, stdin and signals reach it by tag or pid from another session,
// and the errors are the contract's.
func TestFakeProcessBySelector(t *testing.T) {
	ctx := context.Background()
	rt, s := newFakeSession(t, sandbox.Spec{})
	other, err := rt.Get(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	byTag := sandbox.ProcessSelector{Tag: "feed"}
	pid, err := s.StartDetached(ctx, sandbox.ExecRequest{Cmd: "cat", Tag: "feed", OpenStdin: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := other.WriteStdin(ctx, byTag, []byte("before attach ")); err != nil {
		t.Fatal(err)
	}
	var out fakeBuffer
	h, err := other.Attach(ctx, byTag, &out, nil)
	if err != nil {
		t.Fatal(err)
	}
	if h.PID() != pid {
		t.Errorf("attached to pid %d, want %d", h.PID(), pid)
	}
	if err := other.WriteStdin(ctx, sandbox.ProcessSelector{PID: pid}, []byte("after")); err != nil {
		t.Fatal(err)
	}
	if err := other.CloseStdin(ctx, sandbox.ProcessSelector{PID: pid}); err != nil {
		t.Fatal(err)
	}
	if st, err := h.Wait(ctx); err != nil || !st.Success() {
		t.Fatalf("Wait = %+v, %v", st, err)
	}
	if got, want := out.String(), "before attach after"; got != want {
		t.Errorf("attached output %q, want %q (what came before the attach included)", got, want)
	}
	fakeWantErr(t, "WriteStdin after the end", other.WriteStdin(ctx, byTag, []byte("x")), sandbox.ErrState)
	fakeWantErr(t, "Signal after the end", other.Signal(ctx, byTag, sandbox.SIGTERM), sandbox.ErrState)
	fakeWantErr(t, "Signal of no such tag", other.Signal(ctx, sandbox.ProcessSelector{Tag: "none"}, sandbox.SIGTERM), sandbox.ErrNotFound)
	fakeWantErr(t, "WriteStdin of no such pid", other.WriteStdin(ctx, sandbox.ProcessSelector{PID: 99999}, []byte("x")), sandbox.ErrNotFound)
	_, err = s.StartDetached(ctx, sandbox.ExecRequest{Cmd: "cat", Stdout: &out})
	fakeWantErr(t, "StartDetached with an output writer", err, sandbox.ErrInvalid)

	// A signal by tag ends a process that would run for ever.
	if _, err := s.StartDetached(ctx, sandbox.ExecRequest{Cmd: "sleep", Tag: "long"}); err != nil {
		t.Fatal(err)
	}
	if err := other.Signal(ctx, sandbox.ProcessSelector{Tag: "long"}, sandbox.SIGTERM); err != nil {
		t.Fatal(err)
	}
	h, err = other.Attach(ctx, sandbox.ProcessSelector{Tag: "long"}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := h.Wait(ctx); err != nil || st.Signal != "terminated" {
		t.Errorf("Wait after SIGTERM = %+v, %v; want ended by SIGTERM", st, err)
	}
}
