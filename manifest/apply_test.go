package manifest

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/sandbox"
)

// writeTree makes host files under dir from a map of slash paths to
// contents; a path ending in "/" is an empty directory and a content
// starting with "->" makes a symlink to the rest.
func writeTree(t *testing.T, dir string, files map[string]string) {
	t.Helper()
	for name, content := range files {
		p := filepath.Join(dir, filepath.FromSlash(name))
		if strings.HasSuffix(name, "/") {
			if err := os.MkdirAll(p, 0o755); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if target, ok := strings.CutPrefix(content, "->"); ok {
			if err := os.Symlink(target, p); err != nil {
				t.Fatal(err)
			}
			continue
		}
		mode := os.FileMode(0o644)
		if strings.HasSuffix(name, ".sh") {
			mode = 0o755
		}
		if err := os.WriteFile(p, []byte(content), mode); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(p, mode); err != nil { // past the umask
			t.Fatal(err)
		}
	}
}

func TestApply(t *testing.T) {
	host := t.TempDir()
	writeTree(t, host, map[string]string{
		"notes.txt":             "host notes",
		"proj/main.go":          "package main",
		"proj/run.sh":           "#!/bin/sh",
		"proj/internal/x/x.go":  "package x",
		"proj/empty/":           "",
		"outside-base/file.txt": "x",
	})
	m := &Manifest{
		Root: "/ws",
		Entries: map[string]Entry{
			"hello.txt": File{Content: []byte("hi\n")},
			"blob":      File{Content: []byte{0, 0xff}, Meta: Meta{Permissions: perm(6, 0, 0)}},
			"cfg": Dir{
				Children: map[string]Entry{
					"a/b.json": File{Content: []byte("{}")},
					"c":        Dir{},
				},
				Meta: Meta{Group: "dev", Permissions: perm(7, 7, 0)},
			},
			"cfg/extra": File{Content: []byte("e")},
			"notes":     LocalFile{Src: "notes.txt"},
			"src":       LocalDir{Src: "proj", Meta: Meta{Permissions: perm(7, 5, 5)}},
			"scratch":   LocalDir{},
		},
		Users:  []User{{Name: "alice"}},
		Groups: []Group{{Name: "dev", Users: []User{{Name: "alice"}, {Name: "bob"}}}},
	}
	s := newFakeSession()
	var progress []string
	err := Apply(context.Background(), m, s, ApplyOptions{
		BaseDir:  host,
		Progress: func(line string) { progress = append(progress, line) },
	})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := map[string]string{
		"/ws":                     "dir 0755",
		"/ws/hello.txt":           "0644 hi\n",
		"/ws/blob":                "0600 \x00\xff",
		"/ws/cfg":                 "dir 0770 group=dev",
		"/ws/cfg/a":               "dir 0755",
		"/ws/cfg/a/b.json":        "0644 {}",
		"/ws/cfg/c":               "dir 0755",
		"/ws/cfg/extra":           "0644 e",
		"/ws/notes":               "0644 host notes",
		"/ws/src":                 "dir 0755",
		"/ws/src/main.go":         "0644 package main",
		"/ws/src/run.sh":          "0755 #!/bin/sh",
		"/ws/src/internal":        "dir 0755",
		"/ws/src/internal/x":      "dir 0755",
		"/ws/src/internal/x/x.go": "0644 package x",
		"/ws/src/empty":           "dir 0755",
		"/ws/scratch":             "dir 0755",
	}
	if diff := cmp.Diff(want, s.files("/ws")); diff != "" {
		t.Errorf("sandbox files mismatch (-want +got):\n%s", diff)
	}
	wantExecs := []string{
		"root: getent group dev",
		"root: groupadd -- dev",
		"root: getent passwd alice",
		"root: getent group alice",
		"root: useradd -U -M -s /usr/sbin/nologin -- alice",
		"root: getent passwd bob",
		"root: getent group bob",
		"root: useradd -U -M -s /usr/sbin/nologin -- bob",
		"root: usermod -aG dev -- alice",
		"root: usermod -aG dev -- bob",
		// cfg's mode differs from Mkdir's, src's does not.
		"root: chmod 0770 -- /ws/cfg",
		"root: chgrp dev -- /ws/cfg",
	}
	if diff := cmp.Diff(wantExecs, s.execs); diff != "" {
		t.Errorf("commands mismatch (-want +got):\n%s", diff)
	}
	if len(progress) == 0 || progress[0] != "creating workspace root /ws" {
		t.Errorf("progress: got %q, want it to start with %q", progress, "creating workspace root /ws")
	}
}

func TestApplyAccountsExisting(t *testing.T) {
	s := newFakeSession()
	s.accounts["group/dev"] = true
	s.accounts["passwd/alice"] = true
	s.accounts["group/carol"] = true
	m := &Manifest{
		Users:  []User{{Name: "alice"}, {Name: "carol"}},
		Groups: []Group{{Name: "dev", Users: []User{{Name: "alice"}}}},
	}
	if err := Apply(context.Background(), m, s, ApplyOptions{AdminUser: "admin"}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	want := []string{
		"admin: getent group dev",
		"admin: getent passwd alice",
		"admin: getent passwd carol",
		"admin: getent group carol",
		"admin: useradd -g carol -M -s /usr/sbin/nologin -- carol",
		"admin: usermod -aG dev -- alice",
	}
	if diff := cmp.Diff(want, s.execs); diff != "" {
		t.Errorf("commands mismatch (-want +got):\n%s", diff)
	}
}

func TestApplyRefusesSymlinks(t *testing.T) {
	tests := []struct {
		name    string
		files   map[string]string
		entry   Entry
		base    bool   // set ApplyOptions.BaseDir to the host dir
		want    string // substring of the error
		wantErr error
	}{{
		name:    "symlink deep in local_dir",
		files:   map[string]string{"proj/a.txt": "a", "proj/sub/z.txt": "z", "proj/sub/link": "->/etc/passwd"},
		entry:   LocalDir{Src: "proj"},
		base:    true,
		want:    "contains the symlink sub/link; symlinks are refused",
		wantErr: sandbox.ErrInvalid,
	}, {
		name:    "local_dir that is a symlink",
		files:   map[string]string{"real/a.txt": "a", "proj": "->real"},
		entry:   LocalDir{Src: "proj"},
		base:    true,
		want:    "is a symlink; symlinks are refused",
		wantErr: sandbox.ErrInvalid,
	}, {
		name:    "local_file that is a symlink",
		files:   map[string]string{"real.txt": "a", "link.txt": "->real.txt"},
		entry:   LocalFile{Src: "link.txt"},
		base:    true,
		want:    "link.txt is a symlink; symlinks are refused",
		wantErr: sandbox.ErrInvalid,
	}, {
		name:    "local_file through a symlinked directory",
		files:   map[string]string{"real/a.txt": "a", "dir": "->real"},
		entry:   LocalFile{Src: "dir/a.txt"},
		base:    true,
		want:    "goes through the symlink",
		wantErr: sandbox.ErrInvalid,
	}, {
		name:    "local_file outside the base directory",
		files:   map[string]string{"a.txt": "a"},
		entry:   LocalFile{Src: "../a.txt"},
		base:    true,
		want:    "is outside the base directory",
		wantErr: sandbox.ErrInvalid,
	}, {
		name:    "local_dir that is a file",
		files:   map[string]string{"a.txt": "a"},
		entry:   LocalDir{Src: "a.txt"},
		base:    true,
		want:    "is not a directory; use local_file",
		wantErr: sandbox.ErrInvalid,
	}, {
		name:    "missing local_file",
		files:   map[string]string{},
		entry:   LocalFile{Src: "nope.txt"},
		base:    true,
		want:    "nope.txt does not exist",
		wantErr: sandbox.ErrNotFound,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			host := t.TempDir()
			writeTree(t, host, tt.files)
			opts := ApplyOptions{}
			if tt.base {
				opts.BaseDir = host
			}
			s := newFakeSession()
			m := &Manifest{Entries: map[string]Entry{"aaa.txt": File{Content: []byte("first")}, "data": tt.entry}}
			err := Apply(context.Background(), m, s, opts)
			if err == nil {
				t.Fatalf("Apply: got nil error, want one containing %q", tt.want)
			}
			if !strings.Contains(err.Error(), tt.want) || !strings.Contains(err.Error(), `applying entry "data"`) {
				t.Errorf("Apply: got error %q, want it to name entry \"data\" and contain %q", err, tt.want)
			}
			if !errors.Is(err, tt.wantErr) {
				t.Errorf("Apply: got error %v, want one wrapping %v", err, tt.wantErr)
			}
			// Entries before the bad one stay; nothing of the bad one is
			// written.
			want := map[string]string{"/workspace": "dir 0755", "/workspace/aaa.txt": "0644 first"}
			if diff := cmp.Diff(want, s.files("/workspace")); diff != "" {
				t.Errorf("sandbox files mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyWithoutBaseDir(t *testing.T) {
	host := t.TempDir()
	writeTree(t, host, map[string]string{"a.txt": "abs"})
	m := &Manifest{Entries: map[string]Entry{"a": LocalFile{Src: filepath.Join(host, "a.txt")}}}
	s := newFakeSession()
	if err := Apply(context.Background(), m, s, ApplyOptions{}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	if got, want := s.files("/workspace/a")["/workspace/a"], "0644 abs"; got != want {
		t.Errorf("/workspace/a: got %q, want %q", got, want)
	}
}

func TestApplyErrors(t *testing.T) {
	tests := []struct {
		name string
		m    *Manifest
		fail string // command the sandbox fails
		want string
	}{{
		name: "nested entry named once",
		m: &Manifest{Entries: map[string]Entry{"d": Dir{Children: map[string]Entry{
			"e": Dir{Children: map[string]Entry{"x": LocalFile{Src: "/nonexistent/x"}}},
		}}}},
		want: `applying entry "d/e/x": host path /nonexistent/x does not exist: not found`,
	}, {
		name: "chmod fails",
		m:    &Manifest{Entries: map[string]Entry{"d": Dir{Meta: Meta{Permissions: perm(7, 0, 0)}}}},
		fail: "chmod",
		want: `applying entry "d": running "chmod 0700 -- /workspace/d" in the sandbox: exit status 1: boom`,
	}, {
		name: "groupadd fails",
		m:    &Manifest{Groups: []Group{{Name: "dev"}}},
		fail: "groupadd",
		want: `running "groupadd -- dev" in the sandbox: exit status 1: boom`,
	}, {
		name: "getent fails",
		m:    &Manifest{Users: []User{{Name: "u"}}},
		fail: "getent",
		want: `looking up passwd "u" in the sandbox: getent exit status 1: boom`,
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeSession()
			s.fail = map[string]bool{tt.fail: true}
			err := Apply(context.Background(), tt.m, s, ApplyOptions{})
			if err == nil || err.Error() != tt.want {
				t.Errorf("Apply: got error %v, want %q", err, tt.want)
			}
		})
	}
}

func TestApplyInvalid(t *testing.T) {
	s := newFakeSession()
	m := &Manifest{Entries: map[string]Entry{"../x": File{}}}
	err := Apply(context.Background(), m, s, ApplyOptions{})
	if !errors.Is(err, sandbox.ErrInvalid) {
		t.Fatalf("Apply: got error %v, want one wrapping sandbox.ErrInvalid", err)
	}
	if got := s.files("/"); len(got) != 1 {
		t.Errorf("sandbox files: got %v, want only /", got)
	}
}

// gitRepo is a bare repository on the host made for a test, with the
// commits and tags it holds.
type gitRepo struct {
	bare       string // path of the bare repository
	v1, latest string // full commit ids
}

// git runs git in dir for a test, with a fixed identity.
func git(t *testing.T, dir string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", append([]string{"-c", "init.defaultBranch=main", "-c", "protocol.file.allow=always"}, args...)...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(),
		"GIT_AUTHOR_NAME=t", "GIT_AUTHOR_EMAIL=t@example.com",
		"GIT_COMMITTER_NAME=t", "GIT_COMMITTER_EMAIL=t@example.com",
		"GIT_CONFIG_GLOBAL=/dev/null", "GIT_CONFIG_NOSYSTEM=1",
	)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("git %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return strings.TrimSpace(string(out))
}

// newGitRepo makes a bare repository whose tag v1 has docs/guide.md
// "v1" and whose branch main has "v2", a tools/run.sh, and a symlink
// outside docs.
func newGitRepo(t *testing.T) gitRepo {
	t.Helper()
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("git is not on PATH")
	}
	dir := t.TempDir()
	work := filepath.Join(dir, "work")
	bare := filepath.Join(dir, "bare.git")
	git(t, dir, "init", "-q", "--bare", bare)
	git(t, dir, "init", "-q", work)
	writeTree(t, work, map[string]string{"README.md": "readme", "docs/guide.md": "v1"})
	git(t, work, "add", "-A")
	git(t, work, "commit", "-q", "-m", "one")
	git(t, work, "tag", "v1")
	v1 := git(t, work, "rev-parse", "HEAD")
	writeTree(t, work, map[string]string{"docs/guide.md": "v2", "tools/run.sh": "#!/bin/sh", "link": "->README.md"})
	git(t, work, "add", "-A")
	git(t, work, "commit", "-q", "-m", "two")
	latest := git(t, work, "rev-parse", "HEAD")
	git(t, work, "push", "-q", bare, "main", "v1")
	return gitRepo{bare: bare, v1: v1, latest: latest}
}

func TestApplyGitRepo(t *testing.T) {
	r := newGitRepo(t)
	v1Docs := map[string]string{
		"/workspace/repo":          "dir 0755",
		"/workspace/repo/guide.md": "0644 v1",
	}
	tests := []struct {
		name  string
		entry GitRepo
		opts  ApplyOptions
		want  map[string]string
	}{{
		name:  "tag with subpath, repo as a path",
		entry: GitRepo{Repo: r.bare, Ref: "v1", Subpath: "docs"},
		want:  v1Docs,
	}, {
		name:  "local repository inside the base directory",
		entry: GitRepo{Host: "file://" + filepath.Dir(r.bare), Repo: "bare.git", Ref: "v1", Subpath: "docs"},
		opts:  ApplyOptions{BaseDir: filepath.Dir(r.bare)},
		want:  v1Docs,
	}, {
		name:  "full commit id, host as a file URL",
		entry: GitRepo{Host: "file://" + filepath.Dir(r.bare), Repo: "bare.git", Ref: r.v1, Subpath: "/docs/"},
		want:  v1Docs,
	}, {
		name:  "abbreviated commit id, repo as a file URL",
		entry: GitRepo{Repo: "file://" + r.bare, Ref: r.v1[:10], Subpath: "docs"},
		want:  v1Docs,
	}, {
		name:  "branch, whole tree without .git",
		entry: GitRepo{Repo: r.bare, Ref: "main", Subpath: "tools"},
		want: map[string]string{
			"/workspace/repo":        "dir 0755",
			"/workspace/repo/run.sh": "0755 #!/bin/sh",
		},
	}, {
		name:  "whole tree at v1",
		entry: GitRepo{Repo: r.bare, Ref: "v1", Meta: Meta{Permissions: perm(7, 5, 0)}},
		want: map[string]string{
			"/workspace/repo":               "dir 0750",
			"/workspace/repo/README.md":     "0644 readme",
			"/workspace/repo/docs":          "dir 0755",
			"/workspace/repo/docs/guide.md": "0644 v1",
		},
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeSession()
			m := &Manifest{Entries: map[string]Entry{"repo": tt.entry}}
			if err := Apply(context.Background(), m, s, tt.opts); err != nil {
				t.Fatalf("Apply: %v", err)
			}
			if diff := cmp.Diff(tt.want, s.files("/workspace/repo")); diff != "" {
				t.Errorf("sandbox files mismatch (-want +got):\n%s", diff)
			}
		})
	}
}

func TestApplyGitRepoErrors(t *testing.T) {
	r := newGitRepo(t)
	tests := []struct {
		name  string
		entry GitRepo
		opts  ApplyOptions
		want  string
	}{{
		name:  "symlink in the checkout",
		entry: GitRepo{Repo: r.bare, Ref: "main"},
		want:  "contains the symlink link; symlinks are refused",
	}, {
		name:  "unknown ref",
		entry: GitRepo{Repo: r.bare, Ref: "no-such-branch"},
		want:  `cloning ` + r.bare + ` at "no-such-branch"`,
	}, {
		name:  "missing subpath",
		entry: GitRepo{Repo: r.bare, Ref: "v1", Subpath: "nope"},
		want:  `subpath "nope" does not exist`,
	}, {
		name:  "subpath through a symlink",
		entry: GitRepo{Repo: r.bare, Ref: "main", Subpath: "link"},
		want:  `subpath "link" goes through a symlink`,
	}, {
		name:  "subpath into .git",
		entry: GitRepo{Repo: r.bare, Ref: "v1", Subpath: ".git/hooks"},
		want:  `points into the .git directory`,
	}, {
		name:  "local repository outside the base directory",
		entry: GitRepo{Repo: r.bare, Ref: "v1"},
		opts:  ApplyOptions{BaseDir: t.TempDir()},
		want:  "is outside the base directory",
	}, {
		name:  "missing git",
		entry: GitRepo{Repo: r.bare, Ref: "v1"},
		opts:  ApplyOptions{GitCommand: "/nonexistent/git"},
		want:  "need git there",
	}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := newFakeSession()
			m := &Manifest{Entries: map[string]Entry{"repo": tt.entry}}
			err := Apply(context.Background(), m, s, tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Apply: got error %v, want one containing %q", err, tt.want)
			}
			if got := s.files("/workspace/repo"); len(got) != 0 {
				t.Errorf("sandbox files: got %v, want none under /workspace/repo", got)
			}
		})
	}
}

func TestGitRepoURL(t *testing.T) {
	tests := []struct {
		g    GitRepo
		want string
	}{
		{GitRepo{Repo: "openai/openai-agents-python"}, "https://github.com/openai/openai-agents-python.git"},
		{GitRepo{Host: "github.com", Repo: "o/n.git"}, "https://github.com/o/n.git"},
		{GitRepo{Host: "gitlab.example.com:8443/", Repo: "g/p"}, "https://gitlab.example.com:8443/g/p.git"},
		{GitRepo{Host: "file:///srv/git/", Repo: "o/n"}, "file:///srv/git/o/n"},
		{GitRepo{Host: "/srv/git", Repo: "o/n.git"}, "/srv/git/o/n.git"},
		{GitRepo{Host: "github.com", Repo: "/srv/git/n.git"}, "/srv/git/n.git"},
		{GitRepo{Host: "github.com", Repo: "ssh://git@example.com/o/n.git"}, "ssh://git@example.com/o/n.git"},
	}
	for _, tt := range tests {
		t.Run(tt.want, func(t *testing.T) {
			if got := tt.g.URL(); got != tt.want {
				t.Errorf("%+v.URL() = %q, want %q", tt.g, got, tt.want)
			}
		})
	}
}
