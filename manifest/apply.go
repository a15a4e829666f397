package manifest

import (
	"bytes"
	"context"
	"fmt"
	"io/fs"
	"path"
	"slices"
	"strings"
	"sync"

	"github.com/cove-sandbox/cove/sandbox"
)

// ApplyOptions tune Apply.
type ApplyOptions struct {
	// BaseDir is the host directory that relative local_file and
	// local_dir src paths are resolved against. When set it also confines
	// them, as the SDK's base_dir does: every src, and a git_repo that is a
	// local path or file:// URL, must lie within BaseDir, and no component
	// below BaseDir may be a symlink. "" resolves relative paths against the
	// working directory and confines nothing.
	BaseDir string
	// Progress, when set, receives one line per step ("writing
	// /workspace/a.txt (12 bytes)").
	Progress func(string)
	// GitCommand is the host git binary for git_repo entries; "" means
	// "git" found on PATH.
	GitCommand string
	// Git says which git_repo URLs may be cloned and how far git may
	// reach. The zero value suits a user's own manifest on their own
	// machine; a server applying a tenant's manifest sets a strict one
	// (see GitPolicy).
	Git GitPolicy
	// AdminUser runs the commands that need privileges in the sandbox
	// (groupadd, useradd, usermod, chmod, chgrp); "" means "root".
	AdminUser string
}

// Apply builds the manifest's workspace in the sandbox through s alone,
// in this order (the SDK's): the root directory, then groups and users,
// then the entries in path order so a directory comes before what goes in
// it.
//
//   - file: WriteFile with the entry's permissions, default 0644.
//   - dir: Mkdir, then its children.
//   - local_file: copied from the host keeping its permission bits unless
//     the entry sets some. A symlink is refused.
//   - local_dir: the host tree is copied, directories included. A symlink
//     anywhere in it is refused, naming it, before anything of the entry
//     is written; other special files (sockets, devices) are skipped with
//     a progress line.
//   - git_repo: cloned on the host (the sandbox usually has no network),
//     shallow when the ref allows it, then copied in like a local_dir
//     without the .git directory. Subpath limits the copy to a directory
//     of the repository.
//
// An entry's permissions, when set, are applied to directories with chmod
// only if they differ from what Mkdir made; an entry's group is applied
// with chgrp. Without permissions the SDK makes every entry 0755; Cove
// leaves directories as Mkdir makes them and files at 0644 (host files at
// their own mode), as an executable text file would surprise. The SDK
// writes permissions into every entry of its JSON, so manifests it made
// come out the same. Users are created with useradd -U -M -s /usr/sbin/nologin
// and groups with groupadd, as the SDK does, skipping any that getent
// already finds, and members are added with usermod -aG.
//
// Apply validates m first; a validation error wraps sandbox.ErrInvalid and
// nothing is changed. Apply stops at the first failure, leaving what it
// already made. It does not set the environment: merge m.Env() into the
// sandbox.Spec when creating the sandbox.
func Apply(ctx context.Context, m *Manifest, s sandbox.Session, opts ApplyOptions) error {
	if err := m.Validate(); err != nil {
		return err
	}
	a := &applier{s: s, opts: opts, root: m.RootDir()}
	if a.opts.AdminUser == "" {
		a.opts.AdminUser = "root"
	}
	a.progress("creating workspace root %s", a.root)
	if err := s.Mkdir(ctx, a.root); err != nil {
		return fmt.Errorf("creating workspace root %s: %w", a.root, err)
	}
	if err := a.accounts(ctx, m); err != nil {
		return err
	}
	for _, p := range byCleanPath(m.Entries) {
		if err := a.entry(ctx, p.written, path.Join(a.root, p.clean), m.Entries[p.key]); err != nil {
			return err
		}
	}
	return nil
}

// applier carries one Apply call's state.
type applier struct {
	s    sandbox.Session
	opts ApplyOptions
	root string
}

func (a *applier) progress(format string, args ...any) {
	if a.opts.Progress != nil {
		a.opts.Progress(fmt.Sprintf(format, args...))
	}
}

// keyPath is an entries key with its clean form.
type keyPath struct{ key, written, clean string }

// byCleanPath orders entries by clean path, which puts every directory
// before the entries below it however their keys are spelled.
func byCleanPath(entries map[string]Entry) []keyPath {
	var out []keyPath
	for _, k := range sortedKeys(entries) {
		out = append(out, keyPath{key: k, written: k, clean: path.Clean(k)})
	}
	slices.SortFunc(out, func(x, y keyPath) int { return strings.Compare(x.clean, y.clean) })
	return out
}

// entry applies one entry at dest; written is its path as in the manifest,
// for errors and progress.
func (a *applier) entry(ctx context.Context, written, dest string, e Entry) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	var err error
	switch e := e.(type) {
	case File:
		err = a.file(ctx, dest, e)
	case Dir:
		// A directory wraps its own errors: those of its children
		// already name the child.
		return a.dir(ctx, written, dest, e)
	case LocalFile:
		err = a.localFile(ctx, dest, e)
	case LocalDir:
		err = a.localDir(ctx, dest, e)
	case GitRepo:
		err = a.gitRepo(ctx, dest, e)
	}
	if err != nil {
		return fmt.Errorf("applying entry %q: %w", written, err)
	}
	return nil
}

func (a *applier) file(ctx context.Context, dest string, f File) error {
	a.progress("writing %s (%d bytes)", dest, len(f.Content))
	if err := a.s.WriteFile(ctx, dest, bytes.NewReader(f.Content), filePerm(f.Meta, 0o644)); err != nil {
		return fmt.Errorf("writing %s: %w", dest, err)
	}
	return a.chgrp(ctx, dest, f.Meta)
}

func (a *applier) dir(ctx context.Context, written, dest string, d Dir) error {
	a.progress("creating directory %s", dest)
	if err := a.s.Mkdir(ctx, dest); err != nil {
		return fmt.Errorf("applying entry %q: creating directory %s: %w", written, dest, err)
	}
	for _, p := range byCleanPath(d.Children) {
		if err := a.entry(ctx, written+"/"+p.written, path.Join(dest, p.clean), d.Children[p.key]); err != nil {
			return err
		}
	}
	// Permissions last: a directory made read-only must not stop its
	// children from being written.
	if err := a.dirMeta(ctx, dest, d.Meta); err != nil {
		return fmt.Errorf("applying entry %q: %w", written, err)
	}
	return nil
}

// filePerm is the mode to write a file with: the entry's permissions or
// def.
func filePerm(m Meta, def fs.FileMode) uint32 {
	if m.Permissions != nil {
		return uint32(m.Permissions.Mode())
	}
	return uint32(def.Perm())
}

// dirMeta applies an entry's permissions and group to a directory.
func (a *applier) dirMeta(ctx context.Context, dest string, m Meta) error {
	if p := m.Permissions; p != nil {
		// Stat first: most directories already have the mode asked for
		// (0755 is the SDK's default and Mkdir's usual one), and a
		// command per directory is slow on remote sandboxes.
		fi, err := a.s.Stat(ctx, dest)
		if err != nil || fs.FileMode(fi.Mode).Perm() != p.Mode() {
			if err := a.must(ctx, "chmod", fmt.Sprintf("%04o", uint32(p.Mode())), "--", dest); err != nil {
				return err
			}
		}
	}
	return a.chgrp(ctx, dest, m)
}

// chgrp gives dest to the entry's group, if it names one.
func (a *applier) chgrp(ctx context.Context, dest string, m Meta) error {
	if m.Group == "" {
		return nil
	}
	return a.must(ctx, "chgrp", m.Group, "--", dest)
}

// accounts creates the manifest's groups and users and adds the members.
func (a *applier) accounts(ctx context.Context, m *Manifest) error {
	for _, g := range m.Groups {
		ok, err := a.exists(ctx, "group", g.Name)
		if err != nil {
			return err
		}
		if ok {
			a.progress("group %s exists", g.Name)
			continue
		}
		a.progress("creating group %s", g.Name)
		if err := a.must(ctx, "groupadd", "--", g.Name); err != nil {
			return err
		}
	}
	seen := map[string]bool{}
	var users []string
	add := func(us []User) {
		for _, u := range us {
			if !seen[u.Name] {
				seen[u.Name] = true
				users = append(users, u.Name)
			}
		}
	}
	add(m.Users)
	for _, g := range m.Groups {
		add(g.Users)
	}
	for _, u := range users {
		ok, err := a.exists(ctx, "passwd", u)
		if err != nil {
			return err
		}
		if ok {
			a.progress("user %s exists", u)
			continue
		}
		// -U makes a group named for the user; when one exists already
		// (a manifest group of the same name) useradd refuses -U, so the
		// user joins it as primary group instead.
		primary := []string{"-U"}
		if ok, err := a.exists(ctx, "group", u); err != nil {
			return err
		} else if ok {
			primary = []string{"-g", u}
		}
		a.progress("creating user %s", u)
		args := append(primary, "-M", "-s", "/usr/sbin/nologin", "--", u)
		if err := a.must(ctx, "useradd", args...); err != nil {
			return err
		}
	}
	for _, g := range m.Groups {
		for _, u := range g.Users {
			a.progress("adding user %s to group %s", u.Name, g.Name)
			if err := a.must(ctx, "usermod", "-aG", g.Name, "--", u.Name); err != nil {
				return err
			}
		}
	}
	return nil
}

// exists asks getent whether a user ("passwd") or group exists. getent
// exits 2 when the key is not found.
func (a *applier) exists(ctx context.Context, db, name string) (bool, error) {
	st, stderr, err := a.run(ctx, "getent", db, name)
	if err != nil {
		return false, fmt.Errorf("looking up %s %q in the sandbox: %w", db, name, err)
	}
	switch {
	case st.Success():
		return true, nil
	case st.Code == 2 && st.Signal == "":
		return false, nil
	}
	return false, fmt.Errorf("looking up %s %q in the sandbox: getent %s: %s", db, name, describeExit(st), stderr)
}

// must runs a command as the admin user and fails unless it succeeds.
func (a *applier) must(ctx context.Context, name string, args ...string) error {
	st, stderr, err := a.run(ctx, name, args...)
	cmd := strings.Join(append([]string{name}, args...), " ")
	if err != nil {
		return fmt.Errorf("running %q in the sandbox: %w", cmd, err)
	}
	if !st.Success() {
		return fmt.Errorf("running %q in the sandbox: %s: %s", cmd, describeExit(st), stderr)
	}
	return nil
}

// run runs a command as the admin user, returning its standard error.
func (a *applier) run(ctx context.Context, name string, args ...string) (sandbox.ExitStatus, string, error) {
	var stderr tailBuffer
	st, err := a.s.Exec(ctx, sandbox.ExecRequest{Cmd: name, Args: args, User: a.opts.AdminUser, Stderr: &stderr})
	return st, strings.TrimSpace(stderr.String()), err
}

func describeExit(st sandbox.ExitStatus) string {
	switch {
	case st.OOM:
		return "killed for lack of memory"
	case st.Signal != "":
		return "killed by signal " + st.Signal
	case st.Error != "":
		return fmt.Sprintf("exit status %d (%s)", st.Code, st.Error)
	}
	return fmt.Sprintf("exit status %d", st.Code)
}

// tailBuffer keeps the last bytes written to it, enough for an error
// message. The mutex guards buf: a session may write from its own
// goroutine.
type tailBuffer struct {
	mu  sync.Mutex
	buf []byte
}

const tailMax = 2048

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if len(b.buf) > tailMax {
		b.buf = append(b.buf[:0], b.buf[len(b.buf)-tailMax:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}
