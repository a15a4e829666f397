package tarball

import (
	"archive/tar"
	"bytes"
	"context"
	"errors"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"reflect"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// member is one entry of a test archive.
type member struct {
	hdr  tar.Header
	body string
}

func file(name, body string) member {
	return member{tar.Header{Typeflag: tar.TypeReg, Name: name, Mode: 0o644, Size: int64(len(body))}, body}
}

func dir(name string) member {
	return member{tar.Header{Typeflag: tar.TypeDir, Name: name, Mode: 0o755}, ""}
}

func symlink(name, target string) member {
	return member{tar.Header{Typeflag: tar.TypeSymlink, Name: name, Linkname: target, Mode: 0o777}, ""}
}

func hardlink(name, target string) member {
	return member{tar.Header{Typeflag: tar.TypeLink, Name: name, Linkname: target, Mode: 0o644}, ""}
}

func special(name string, typ byte) member {
	return member{tar.Header{Typeflag: typ, Name: name, Mode: 0o644}, ""}
}

func buildTar(tb testing.TB, members ...member) []byte {
	tb.Helper()
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	for _, m := range members {
		hdr := m.hdr
		if err := tw.WriteHeader(&hdr); err != nil {
			tb.Fatalf("WriteHeader(%q): %v", hdr.Name, err)
		}
		if _, err := tw.Write([]byte(m.body)); err != nil {
			tb.Fatalf("Write(%q): %v", hdr.Name, err)
		}
	}
	if err := tw.Close(); err != nil {
		tb.Fatal(err)
	}
	return buf.Bytes()
}

func TestCheckHeader(t *testing.T) {
	tests := []struct {
		name    string
		hdr     tar.Header
		want    string // clean name when ok
		wantErr string // substring of the error; "" means ok
	}{
		{name: "file", hdr: file("a.txt", "").hdr, want: "a.txt"},
		{name: "dot slash", hdr: file("./src/a.go", "").hdr, want: "src/a.go"},
		{name: "dir slash", hdr: dir("src/").hdr, want: "src"},
		{name: "root dir", hdr: dir("./").hdr, want: "."},
		{name: "double slash", hdr: file("a//b", "").hdr, want: "a/b"},
		{name: "legacy file", hdr: tar.Header{Typeflag: tar.TypeRegA, Name: "old"}, want: "old"},
		{name: "legacy dir", hdr: tar.Header{Typeflag: tar.TypeRegA, Name: "old/"}, want: "old"},
		{name: "sparse", hdr: tar.Header{Typeflag: tar.TypeGNUSparse, Name: "sp"}, want: "sp"},
		{name: "symlink sibling", hdr: symlink("l", "a.txt").hdr, want: "l"},
		{name: "symlink up within", hdr: symlink("a/b/l", "../../c").hdr, want: "a/b/l"},
		{name: "symlink dot", hdr: symlink("a/l", ".").hdr, want: "a/l"},
		{name: "hardlink", hdr: hardlink("h", "./a/b").hdr, want: "h"},

		{name: "empty", hdr: file("", "").hdr, wantErr: `tar member "": empty name`},
		{name: "nul", hdr: file("a\x00b", "").hdr, wantErr: `tar member "a\x00b": name contains a NUL byte`},
		{name: "absolute", hdr: file("/etc/passwd", "").hdr, wantErr: `tar member "/etc/passwd": name is absolute`},
		{name: "dotdot", hdr: file("../x", "").hdr, wantErr: `tar member "../x": name climbs out of the workspace with ".."`},
		{name: "inner dotdot", hdr: file("a/../../x", "").hdr, wantErr: `tar member "a/../../x": name climbs out`},
		{name: "harmless dotdot", hdr: file("a/../x", "").hdr, wantErr: `tar member "a/../x": name climbs out`},
		{name: "long name", hdr: file(strings.Repeat("a/", 2100), "").hdr, wantErr: "longer than the 4096-byte limit"},
		{name: "long component", hdr: file(strings.Repeat("a", 256), "").hdr, wantErr: "longer than the 255-byte limit"},
		{name: "char device", hdr: special("null", tar.TypeChar).hdr, wantErr: `tar member "null": device nodes are not allowed`},
		{name: "block device", hdr: special("sda", tar.TypeBlock).hdr, wantErr: `tar member "sda": device nodes are not allowed`},
		{name: "fifo", hdr: special("p", tar.TypeFifo).hdr, wantErr: `tar member "p": fifos are not allowed`},
		{name: "unknown type", hdr: special("x", 'Z').hdr, wantErr: `tar member "x": unsupported member type "Z"`},
		{name: "file as root", hdr: file("./", "").hdr, wantErr: "only a directory may name the workspace root"},
		{name: "symlink as root", hdr: symlink(".", "a").hdr, wantErr: "only a directory may name the workspace root"},
		{name: "symlink empty", hdr: symlink("l", "").hdr, wantErr: `tar member "l": symlink has an empty target`},
		{name: "symlink absolute", hdr: symlink("l", "/etc/passwd").hdr, wantErr: `tar member "l": symlink target "/etc/passwd" is absolute`},
		{name: "symlink up", hdr: symlink("l", "../x").hdr, wantErr: `tar member "l": symlink target "../x" points out of the workspace`},
		{name: "symlink up deep", hdr: symlink("a/b/l", "../../../x").hdr, wantErr: `symlink target "../../../x" points out`},
		{name: "symlink dotdot after name", hdr: symlink("e", "d/..").hdr, wantErr: `symlink target "d/.." has ".." after a name`},
		{name: "symlink nul", hdr: symlink("l", "a\x00").hdr, wantErr: "symlink target contains a NUL byte"},
		{name: "hardlink up", hdr: hardlink("h", "../x").hdr, wantErr: `tar member "h": hard link target "../x" climbs out`},
		{name: "hardlink absolute", hdr: hardlink("h", "/etc/shadow").hdr, wantErr: `hard link target "/etc/shadow" is absolute`},
		{name: "hardlink empty", hdr: hardlink("h", "").hdr, wantErr: "hard link has an empty target"},
		{name: "hardlink root", hdr: hardlink("h", "./").hdr, wantErr: "hard link target is the workspace root"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := CheckHeader(&tt.hdr)
			if tt.wantErr == "" {
				if err != nil || got != tt.want {
					t.Fatalf("CheckHeader(%q) = %q, %v; want %q, nil", tt.hdr.Name, got, err, tt.want)
				}
				return
			}
			if err == nil {
				t.Fatalf("CheckHeader(%q) = %q, nil; want error containing %q", tt.hdr.Name, got, tt.wantErr)
			}
			if !errors.Is(err, sandbox.ErrInvalid) {
				t.Errorf("CheckHeader(%q) error %v does not wrap ErrInvalid", tt.hdr.Name, err)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("CheckHeader(%q) error %q; want it to contain %q", tt.hdr.Name, err, tt.wantErr)
			}
		})
	}
}

// sandboxDirs makes tmp/root (to extract into) and tmp/outside/sentinel
// (which nothing may touch) and returns tmp and root.
func sandboxDirs(t *testing.T) (tmp, root string) {
	t.Helper()
	tmp = t.TempDir()
	root = filepath.Join(tmp, "root")
	for _, d := range []string{root, filepath.Join(tmp, "outside")} {
		if err := os.Mkdir(d, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(tmp, "outside", "sentinel"), []byte("untouched"), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { makeRemovable(tmp) })
	return tmp, root
}

// checkOutside fails unless tmp holds only root and outside/sentinel, as
// made by sandboxDirs, and every symlink under root, except those the test
// made itself (named relative to root in existing), stays inside it.
func checkOutside(t *testing.T, tmp string, existing ...string) {
	t.Helper()
	var got []string
	filepath.WalkDir(tmp, func(p string, d fs.DirEntry, err error) error {
		rel, _ := filepath.Rel(tmp, p)
		if rel == "." || strings.HasPrefix(rel, "root/") {
			return nil
		}
		got = append(got, rel)
		return nil
	})
	want := []string{"outside", "outside/sentinel", "root"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("outside the extraction dir: got %q, want %q", got, want)
	}
	b, err := os.ReadFile(filepath.Join(tmp, "outside", "sentinel"))
	if err != nil || string(b) != "untouched" {
		t.Errorf("sentinel = %q, %v; want \"untouched\"", b, err)
	}
	checkLinksInside(t, filepath.Join(tmp, "root"), existing...)
}

// checkLinksInside fails if a symlink under root is absolute or, resolved
// lexically from its directory, leads out of root.
func checkLinksInside(t *testing.T, root string, existing ...string) {
	t.Helper()
	makeRemovable(root)
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.Type()&fs.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			t.Errorf("readlink %s: %v", p, err)
			return nil
		}
		rel, _ := filepath.Rel(root, p)
		if slices.Contains(existing, rel) {
			return nil
		}
		resolved := path.Join(path.Dir(rel), target)
		if path.IsAbs(target) || resolved == ".." || strings.HasPrefix(resolved, "../") {
			t.Errorf("symlink %s -> %q leads out of the extraction dir", rel, target)
		}
		return nil
	})
}

// makeRemovable gives every directory under dir owner rwx so that a
// non-root test can walk and remove what an archive made read-only.
func makeRemovable(dir string) {
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && d.IsDir() {
			os.Chmod(p, 0o755)
		}
		return nil
	})
}

func TestExtractHostile(t *testing.T) {
	tests := []struct {
		name    string
		setup   func(t *testing.T, tmp, root string) // the existing tree
		members []member
		opts    ExtractOptions
		wantIs  error
		wantErr string // substring; names the member
	}{
		{name: "dotdot file", members: []member{file("../outside/sentinel", "pwned")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "../outside/sentinel": name climbs out`},
		{name: "inner dotdot", members: []member{file("a/../../outside/x", "pwned")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "a/../../outside/x"`},
		{name: "absolute", members: []member{file("/tmp/x", "pwned")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "/tmp/x": name is absolute`},
		{name: "char device", members: []member{special("tty", tar.TypeChar)}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "tty": device nodes`},
		{name: "block device", members: []member{special("disk", tar.TypeBlock)}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "disk": device nodes`},
		{name: "fifo", members: []member{special("pipe", tar.TypeFifo)}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "pipe": fifos`},
		{name: "symlink out", members: []member{symlink("l", "../outside/sentinel")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "l": symlink target "../outside/sentinel" points out`},
		{name: "symlink absolute", members: []member{symlink("l", "/etc")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "l": symlink target "/etc" is absolute`},
		{name: "symlink through symlink", members: []member{symlink("d", "."), symlink("e", "d/..")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "e"`},
		{name: "write through member symlink",
			members: []member{dir("sub/"), symlink("d", "sub"), file("d/f", "x")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "d/f": parent "d" is a symlink`},
		{name: "write through existing symlink",
			setup: func(t *testing.T, tmp, root string) {
				must(t, os.Symlink("../outside", filepath.Join(root, "escape")))
			},
			members: []member{file("escape/sentinel", "pwned")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "escape/sentinel": parent "escape" is a symlink`},
		{name: "mkdir through existing symlink",
			setup: func(t *testing.T, tmp, root string) {
				must(t, os.Symlink(filepath.Join(tmp, "outside"), filepath.Join(root, "escape")))
			},
			members: []member{dir("escape/newdir/")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "escape/newdir/": parent "escape" is a symlink`},
		{name: "hardlink out", members: []member{hardlink("h", "../outside/sentinel")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "h": hard link target "../outside/sentinel" climbs out`},
		{name: "hardlink to existing tree",
			setup: func(t *testing.T, tmp, root string) {
				must(t, os.WriteFile(filepath.Join(root, "old"), nil, 0o644))
			},
			members: []member{hardlink("h", "old")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "h": hard link target "old" is not a regular file written earlier`},
		{name: "hardlink to symlink member",
			members: []member{symlink("l", "x"), hardlink("h", "l")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "h": hard link target "l"`},
		{name: "hardlink through symlink",
			members: []member{file("sub/f", "x"), symlink("d", "sub"), hardlink("h", "d/f")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "h"`},
		{name: "hardlink to replaced file",
			members: []member{file("f", "x"), symlink("f", "g"), hardlink("h", "f")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "h"`},
		{name: "parent is a file", members: []member{file("f", "x"), file("f/g", "y")}, wantIs: sandbox.ErrInvalid,
			wantErr: `tar member "f/g": parent "f" is not a directory`},
		{name: "over the byte cap", members: []member{file("a", "12345"), file("b", "678901")},
			opts: ExtractOptions{MaxBytes: 10}, wantIs: sandbox.ErrLimit, wantErr: `tar member "b"`},
		{name: "non-empty dir in the way", members: []member{file("d/x", "x"), file("d", "y")}, wantIs: sandbox.ErrExist,
			wantErr: `tar member "d"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tmp, root := sandboxDirs(t)
			if tt.setup != nil {
				tt.setup(t, tmp, root)
			}
			err := Extract(context.Background(), bytes.NewReader(buildTar(t, tt.members...)), root, tt.opts)
			if !errors.Is(err, tt.wantIs) {
				t.Fatalf("Extract: got error %v, want one wrapping %v", err, tt.wantIs)
			}
			if !strings.Contains(err.Error(), tt.wantErr) {
				t.Errorf("Extract: got error %q, want it to contain %q", err, tt.wantErr)
			}
			checkOutside(t, tmp, "escape")
		})
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

func TestExtractTruncated(t *testing.T) {
	tmp, root := sandboxDirs(t)
	b := buildTar(t, file("a", strings.Repeat("x", 2000)))
	err := Extract(context.Background(), bytes.NewReader(b[:1000]), root, ExtractOptions{})
	if !errors.Is(err, sandbox.ErrInvalid) {
		t.Errorf("Extract(truncated): got %v, want ErrInvalid", err)
	}
	checkOutside(t, tmp)
}

func TestExtractReplacesSymlink(t *testing.T) {
	// A member named like an existing symlink replaces the link; it never
	// writes to the link's target.
	tmp, root := sandboxDirs(t)
	must(t, os.Symlink("../outside/sentinel", filepath.Join(root, "f")))
	must(t, os.Symlink("../outside", filepath.Join(root, "d")))
	b := buildTar(t, file("f", "new"), dir("d/"), file("d/sentinel", "inside"))
	if err := Extract(context.Background(), bytes.NewReader(b), root, ExtractOptions{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	checkOutside(t, tmp)
	for name, want := range map[string]string{"f": "new", "d/sentinel": "inside"} {
		got, err := os.ReadFile(filepath.Join(root, name))
		if err != nil || string(got) != want {
			t.Errorf("%s = %q, %v; want %q", name, got, err, want)
		}
	}
}

func TestExtractModes(t *testing.T) {
	_, root := sandboxDirs(t)
	mtime := time.Date(2020, 1, 2, 3, 4, 5, 0, time.UTC)
	suid := file("suid", "x")
	suid.hdr.Mode = 0o4755 | 0o2000 | 0o1000
	suid.hdr.ModTime = mtime
	ro := dir("ro/")
	ro.hdr.Mode = 0o555
	ro.hdr.ModTime = mtime
	b := buildTar(t, suid, ro, file("ro/inner", "y"), hardlink("ro/h", "suid"))
	if err := Extract(context.Background(), bytes.NewReader(b), root, ExtractOptions{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	fi, err := os.Lstat(filepath.Join(root, "suid"))
	must(t, err)
	if got := fi.Mode(); got != 0o755 {
		t.Errorf("suid mode = %v, want -rwxr-xr-x (no setuid, setgid, sticky)", got)
	}
	if !fi.ModTime().Equal(mtime) {
		t.Errorf("suid mtime = %v, want %v", fi.ModTime(), mtime)
	}
	fi, err = os.Lstat(filepath.Join(root, "ro"))
	must(t, err)
	if got := fi.Mode(); got != fs.ModeDir|0o555 || !fi.ModTime().Equal(mtime) {
		t.Errorf("ro: mode %v mtime %v, want dr-xr-xr-x %v", got, fi.ModTime(), mtime)
	}
	a, _ := os.Stat(filepath.Join(root, "suid"))
	h, _ := os.Stat(filepath.Join(root, "ro/h"))
	if !os.SameFile(a, h) {
		t.Errorf("ro/h is not a hard link to suid")
	}
}

func TestExtractChown(t *testing.T) {
	_, root := sandboxDirs(t)
	var got []string
	opts := ExtractOptions{Chown: func(_ *os.Root, name string, hdr *tar.Header) error {
		got = append(got, name+"="+hdr.Name)
		return nil
	}}
	b := buildTar(t, dir("./"), dir("a/"), file("a/b", "x"), symlink("l", "a"))
	if err := Extract(context.Background(), bytes.NewReader(b), root, opts); err != nil {
		t.Fatal(err)
	}
	want := []string{"a=a/", "a/b=a/b", "l=l"}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("Chown calls = %q, want %q", got, want)
	}
	opts.Chown = func(*os.Root, string, *tar.Header) error { return errors.New("boom") }
	if err := Extract(context.Background(), bytes.NewReader(b), root, opts); err == nil || !strings.Contains(err.Error(), `tar member "a/": setting owner: boom`) {
		t.Errorf("Extract with failing Chown: got %v", err)
	}
}

func TestExtractCanceled(t *testing.T) {
	_, root := sandboxDirs(t)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	err := Extract(ctx, bytes.NewReader(buildTar(t, file("a", "x"))), root, ExtractOptions{})
	if !errors.Is(err, context.Canceled) {
		t.Errorf("Extract(canceled) = %v, want context.Canceled", err)
	}
}

// entry is what the round trip compares for one path.
type entry struct {
	Mode   fs.FileMode
	MTime  int64
	Body   string
	Target string
}

func snapshotTree(t *testing.T, root string) map[string]entry {
	t.Helper()
	tree := make(map[string]entry)
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		if rel == "." {
			return nil
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		e := entry{Mode: fi.Mode()}
		switch {
		case fi.Mode().IsRegular():
			b, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			e.Body = string(b)
			e.MTime = fi.ModTime().Unix()
		case fi.IsDir():
			e.MTime = fi.ModTime().Unix()
		case fi.Mode()&fs.ModeSymlink != 0:
			e.Target, _ = os.Readlink(p)
		default:
			return nil // skipped by Write
		}
		tree[rel] = e
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func makeTree(t *testing.T, root string) {
	t.Helper()
	old := time.Date(2021, 5, 6, 7, 8, 9, 0, time.UTC)
	files := map[string]string{
		"README.md":                          "hello\n",
		"src/main.go":                        "package main\n",
		"src/a-b/c.txt":                      strings.Repeat("c", 5000),
		"src/empty":                          "",
		"bin/run.sh":                         "#!/bin/sh\n",
		strings.Repeat("long/", 30) + "deep": "deep",
	}
	for name, body := range files {
		p := filepath.Join(root, name)
		must(t, os.MkdirAll(filepath.Dir(p), 0o755))
		must(t, os.WriteFile(p, []byte(body), 0o644))
	}
	must(t, os.Chmod(filepath.Join(root, "bin/run.sh"), 0o755))
	must(t, os.Chmod(filepath.Join(root, "src/empty"), 0o600))
	must(t, os.Mkdir(filepath.Join(root, "emptydir"), 0o700))
	must(t, os.Symlink("src/main.go", filepath.Join(root, "main-link")))
	must(t, os.Symlink("../README.md", filepath.Join(root, "src/readme")))
	must(t, os.Symlink("dangling", filepath.Join(root, "dangling-link")))
	must(t, syscall.Mkfifo(filepath.Join(root, "fifo"), 0o644))
	// Directory times last, after their contents are in place.
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if d.Type()&fs.ModeSymlink == 0 {
			os.Chtimes(p, old, old)
		}
		return nil
	})
	must(t, os.Chmod(filepath.Join(root, "src"), 0o750))
}

func TestRoundTrip(t *testing.T) {
	src := t.TempDir()
	makeTree(t, src)
	var buf bytes.Buffer
	if err := Write(context.Background(), &buf, src); err != nil {
		t.Fatalf("Write: %v", err)
	}

	// Member names are relative, sorted, and fifos are skipped.
	var names []string
	tr := tar.NewReader(bytes.NewReader(buf.Bytes()))
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		if _, err := CheckHeader(hdr); err != nil {
			t.Errorf("Write produced a member CheckHeader refuses: %v", err)
		}
		names = append(names, hdr.Name)
	}
	if len(names) == 0 || strings.HasPrefix(names[0], "./") || strings.HasPrefix(names[0], "/") {
		t.Errorf("member names %q; want relative names without ./", names)
	}
	for _, n := range names {
		if strings.Contains(n, "fifo") {
			t.Errorf("fifo archived as %q", n)
		}
	}

	dst := t.TempDir()
	if err := Extract(context.Background(), &buf, dst, ExtractOptions{}); err != nil {
		t.Fatalf("Extract: %v", err)
	}
	want, got := snapshotTree(t, src), snapshotTree(t, dst)
	if !reflect.DeepEqual(got, want) {
		var keys []string
		for k := range want {
			keys = append(keys, k)
		}
		for k := range got {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if got[k] != want[k] {
				t.Errorf("%s: got %+v, want %+v", k, got[k], want[k])
			}
		}
	}
}

func TestWriteDeterministic(t *testing.T) {
	src := t.TempDir()
	makeTree(t, src)
	var a, b bytes.Buffer
	must(t, Write(context.Background(), &a, src))
	must(t, Write(context.Background(), &b, src))
	if !bytes.Equal(a.Bytes(), b.Bytes()) {
		t.Errorf("two Writes of the same tree differ")
	}
	tr := tar.NewReader(&a)
	var names []string
	for {
		hdr, err := tr.Next()
		if err != nil {
			break
		}
		names = append(names, hdr.Name)
	}
	// Walk order: a directory, then its contents, siblings sorted.
	want := []string{"README.md", "bin/", "bin/run.sh", "dangling-link", "emptydir/"}
	if len(names) < len(want) || !reflect.DeepEqual(names[:len(want)], want) {
		t.Errorf("first members %q, want %q", names, want)
	}
}

func TestWriteCanceled(t *testing.T) {
	src := t.TempDir()
	makeTree(t, src)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := Write(ctx, &bytes.Buffer{}, src); !errors.Is(err, context.Canceled) {
		t.Errorf("Write(canceled) = %v, want context.Canceled", err)
	}
}

// FuzzExtract extracts archives made of two parts: members described by a
// script, then raw bytes. The script is lines of a type letter, a name and,
// after "=", a file's content or a link's target ("fa/b=hi" is a file,
// "ll=../x" a symlink, "da/" a directory); a type letter other than
// f d l h c b p is used as the tar type flag as it is. The
// raw bytes follow the scripted members with no end-of-archive marker
// between, so the fuzzer can also feed the tar reader damaged headers.
// Structured scripts keep inputs small, which keeps the fuzzer's
// minimisation of each new input short.
//
// Whatever the input, Extract must not panic, must leave nothing beside
// tmp/root but root itself (even with tmp/root/escape a symlink to tmp),
// and must leave no symlink leading out and no setuid, device or fifo.
func FuzzExtract(f *testing.F) {
	for _, script := range []string{
		"da/\nfa/b=hello\nll=a/b\nhh=a/b",
		"f../x=pwned",
		"fescape/x=pwned",
		"descape/sub/",
		"hh=escape/x",
		"ld=.\nle=d/..\nfe/x=pwned",
		"dsub/\nld=sub\nfd/f=x",
		"ll=../outside\nfl/x=pwned",
		"ff=x\nhh=f\nlf=h\nff/x=y",
		"cdev\nppipe",
		"d./\nf./a=x\nfescape=replaced\nfescape/x=y",
		"l/abs=/etc\nfa/../../x=y",
	} {
		f.Add(script, []byte(nil))
	}
	f.Add("", buildTar(f, file("a", "x")))
	f.Fuzz(func(t *testing.T, script string, raw []byte) {
		var buf bytes.Buffer
		tw := tar.NewWriter(&buf)
		for _, line := range strings.Split(script, "\n") {
			if line == "" {
				continue
			}
			m := scriptMember(line)
			if tw.WriteHeader(&m.hdr) != nil {
				continue // a header archive/tar cannot encode
			}
			tw.Write([]byte(m.body))
		}
		tw.Flush()
		buf.Write(raw)
		fuzzExtract(t, buf.Bytes())
	})
}

// scriptMember turns one FuzzExtract script line into a member.
func scriptMember(line string) member {
	typ, rest := line[0], line[1:]
	name, arg, _ := strings.Cut(rest, "=")
	switch typ {
	case 'f':
		m := file(name, arg)
		m.hdr.Mode = 0o7777 // Extract must drop setuid, setgid, sticky
		return m
	case 'd':
		return dir(name)
	case 'l':
		return symlink(name, arg)
	case 'h':
		return hardlink(name, arg)
	case 'c':
		return special(name, tar.TypeChar)
	case 'b':
		return special(name, tar.TypeBlock)
	case 'p':
		return special(name, tar.TypeFifo)
	default:
		return member{tar.Header{Typeflag: typ, Name: name, Linkname: arg, Mode: 0o644}, ""}
	}
}

func fuzzExtract(t *testing.T, data []byte) {
	tmp := t.TempDir()
	root := filepath.Join(tmp, "root")
	if err := os.Mkdir(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("..", filepath.Join(root, "escape")); err != nil {
		t.Fatal(err)
	}
	defer makeRemovable(tmp)
	Extract(context.Background(), bytes.NewReader(data), root, ExtractOptions{MaxBytes: 1 << 20})
	ents, err := os.ReadDir(tmp)
	if err != nil {
		t.Fatal(err)
	}
	if len(ents) != 1 || ents[0].Name() != "root" || !ents[0].IsDir() {
		var names []string
		for _, e := range ents {
			names = append(names, e.Name())
		}
		t.Fatalf("after Extract, %s holds %q; want only root/", tmp, names)
	}
	checkLinksInside(t, root, "escape")
	filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return nil
		}
		fi, err := d.Info()
		if err == nil && fi.Mode()&(fs.ModeSetuid|fs.ModeSetgid|fs.ModeSticky|fs.ModeDevice|fs.ModeNamedPipe|fs.ModeCharDevice) != 0 {
			t.Errorf("%s has mode %v", p, fi.Mode())
		}
		return nil
	})
}
