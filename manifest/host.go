package manifest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
)

// This file holds the host side of Apply: reading local files and trees
// and cloning git repositories, with symlinks refused so a manifest cannot
// make Apply copy host files it does not name.

// resolveHost turns a manifest src into a clean absolute host path,
// enforcing ApplyOptions.BaseDir's confinement. It does not look at the
// last component; callers Lstat it themselves.
func (a *applier) resolveHost(src string) (string, error) {
	if a.opts.BaseDir == "" {
		p, err := filepath.Abs(src)
		if err != nil {
			return "", fmt.Errorf("resolving host path %q: %w", src, err)
		}
		return p, nil
	}
	base, err := filepath.Abs(a.opts.BaseDir)
	if err != nil {
		return "", fmt.Errorf("resolving base directory %q: %w", a.opts.BaseDir, err)
	}
	p := src
	if !filepath.IsAbs(p) {
		p = filepath.Join(base, p)
	}
	p = filepath.Clean(p)
	rel, err := filepath.Rel(base, p)
	if err != nil || rel == ".." || strings.HasPrefix(rel, ".."+string(filepath.Separator)) {
		return "", fmt.Errorf("host path %s is outside the base directory %s; use a path inside it: %w", p, base, sandbox.ErrInvalid)
	}
	// The base directory itself is trusted; below it, a symlinked
	// directory could lead anywhere, so each step is checked.
	cur := base
	parts := strings.Split(rel, string(filepath.Separator))
	for _, part := range parts[:len(parts)-1] {
		if part == "." {
			continue
		}
		cur = filepath.Join(cur, part)
		fi, err := os.Lstat(cur)
		if err != nil {
			return "", hostError(cur, err)
		}
		if fi.Mode()&fs.ModeSymlink != 0 {
			return "", fmt.Errorf("host path %s goes through the symlink %s; symlinks are refused, name the real path: %w", p, cur, sandbox.ErrInvalid)
		}
	}
	return p, nil
}

// hostError wraps a host filesystem error, mapping "does not exist" to
// sandbox.ErrNotFound.
func hostError(p string, err error) error {
	if errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("host path %s does not exist: %w", p, sandbox.ErrNotFound)
	}
	return fmt.Errorf("reading host path %s: %w", p, err)
}

// errSymlink reports a refused symlink.
func errSymlink(p string) error {
	return fmt.Errorf("host path %s is a symlink; symlinks are refused, copy what it points to instead: %w", p, sandbox.ErrInvalid)
}

func (a *applier) localFile(ctx context.Context, dest string, f LocalFile) error {
	src, err := a.resolveHost(f.Src)
	if err != nil {
		return err
	}
	fi, err := os.Lstat(src)
	switch {
	case err != nil:
		return hostError(src, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return errSymlink(src)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("host path %s is not a regular file; use local_dir for a directory: %w", src, sandbox.ErrInvalid)
	}
	a.progress("copying host file %s to %s", src, dest)
	if err := a.copyHostFile(ctx, src, fi, dest, filePerm(f.Meta, fi.Mode())); err != nil {
		return err
	}
	return a.chgrp(ctx, dest, f.Meta)
}

// copyHostFile writes the host file src, which was listed as fi, to dest.
// It opens src without following a symlink and checks that it is still
// the file that was listed, so a swap after listing is caught.
func (a *applier) copyHostFile(ctx context.Context, src string, fi fs.FileInfo, dest string, perm uint32) error {
	fh, err := os.OpenFile(src, os.O_RDONLY|oNoFollow, 0)
	if err != nil {
		if fi2, lerr := os.Lstat(src); lerr == nil && fi2.Mode()&fs.ModeSymlink != 0 {
			return errSymlink(src)
		}
		return hostError(src, err)
	}
	defer fh.Close()
	opened, err := fh.Stat()
	if err != nil {
		return hostError(src, err)
	}
	if !opened.Mode().IsRegular() || !os.SameFile(fi, opened) {
		return fmt.Errorf("host file %s changed while it was being copied; try again", src)
	}
	if err := a.s.WriteFile(ctx, dest, fh, perm); err != nil {
		return fmt.Errorf("writing %s: %w", dest, err)
	}
	return nil
}

func (a *applier) localDir(ctx context.Context, dest string, d LocalDir) error {
	if d.Src == "" {
		// The SDK's LocalDir without src makes an empty directory.
		a.progress("creating directory %s", dest)
		if err := a.s.Mkdir(ctx, dest); err != nil {
			return fmt.Errorf("creating directory %s: %w", dest, err)
		}
		return a.dirMeta(ctx, dest, d.Meta)
	}
	src, err := a.resolveHost(d.Src)
	if err != nil {
		return err
	}
	tree, err := a.listTree(src, false)
	if err != nil {
		return err
	}
	a.progress("copying host directory %s to %s (%d files)", src, dest, tree.files)
	if err := a.copyTree(ctx, src, tree, dest); err != nil {
		return err
	}
	return a.dirMeta(ctx, dest, d.Meta)
}

// hostTree is a listed host directory: every directory and regular file
// below it, parents before children.
type hostTree struct {
	items []hostItem
	files int
}

type hostItem struct {
	rel  string // slash-separated, relative to the tree's root
	info fs.FileInfo
}

// listTree lists the host directory root, refusing it if it or anything
// in it is a symlink. With skipGit, a .git directory directly under root
// is left out.
func (a *applier) listTree(root string, skipGit bool) (hostTree, error) {
	fi, err := os.Lstat(root)
	switch {
	case err != nil:
		return hostTree{}, hostError(root, err)
	case fi.Mode()&fs.ModeSymlink != 0:
		return hostTree{}, errSymlink(root)
	case !fi.IsDir():
		return hostTree{}, fmt.Errorf("host path %s is not a directory; use local_file for a file: %w", root, sandbox.ErrInvalid)
	}
	var tree hostTree
	err = filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return hostError(p, err)
		}
		if p == root {
			return nil
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		rel = filepath.ToSlash(rel)
		if skipGit && rel == ".git" {
			return filepath.SkipDir
		}
		switch {
		case de.Type()&fs.ModeSymlink != 0:
			return fmt.Errorf("host directory %s contains the symlink %s; symlinks are refused, replace it with what it points to: %w", root, rel, sandbox.ErrInvalid)
		case de.IsDir(), de.Type().IsRegular():
			info, err := de.Info()
			if err != nil {
				return hostError(p, err)
			}
			tree.items = append(tree.items, hostItem{rel: rel, info: info})
			if !de.IsDir() {
				tree.files++
			}
		default:
			a.progress("skipping %s: not a regular file or directory", p)
		}
		return nil
	})
	if err != nil {
		return hostTree{}, err
	}
	return tree, nil
}

// copyTree writes a listed host tree to dest in the sandbox, keeping each
// file's permission bits.
func (a *applier) copyTree(ctx context.Context, root string, tree hostTree, dest string) error {
	if err := a.s.Mkdir(ctx, dest); err != nil {
		return fmt.Errorf("creating directory %s: %w", dest, err)
	}
	for _, it := range tree.items {
		if err := ctx.Err(); err != nil {
			return err
		}
		to := path.Join(dest, it.rel)
		if it.info.IsDir() {
			if err := a.s.Mkdir(ctx, to); err != nil {
				return fmt.Errorf("creating directory %s: %w", to, err)
			}
			continue
		}
		from := filepath.Join(root, filepath.FromSlash(it.rel))
		if err := a.copyHostFile(ctx, from, it.info, to, uint32(it.info.Mode().Perm())); err != nil {
			return err
		}
	}
	return nil
}

// URL returns the address Apply clones: Repo itself when it is a URL
// (contains "://") or an absolute path; Host + "/" + Repo when Host is a
// URL or an absolute path; otherwise "https://" + Host + "/" + Repo +
// ".git" as in the SDK (".git" is not doubled). An empty Host is
// DefaultGitHost.
func (g GitRepo) URL() string {
	if strings.Contains(g.Repo, "://") || path.IsAbs(g.Repo) {
		return g.Repo
	}
	host := g.Host
	if host == "" {
		host = DefaultGitHost
	}
	repo := strings.TrimLeft(g.Repo, "/")
	if strings.Contains(host, "://") || path.IsAbs(host) {
		return strings.TrimRight(host, "/") + "/" + repo
	}
	u := "https://" + strings.TrimRight(host, "/") + "/" + repo
	if !strings.HasSuffix(u, ".git") {
		u += ".git"
	}
	return u
}

// localRepoPath returns the host path of a clone URL that is local (an
// absolute path or file://), for BaseDir confinement.
func localRepoPath(u string) (string, bool) {
	if path.IsAbs(u) {
		return u, true
	}
	if pu, err := url.Parse(u); err == nil && pu.Scheme == "file" {
		return pu.Path, true
	}
	return "", false
}

// commitLike matches what may be a commit id, which only a fetch by id
// (not clone --branch) can check out. Servers refuse fetching an
// abbreviated id; those fall through to a full clone.
var commitLike = regexp.MustCompile(`^[0-9a-fA-F]{7,64}$`)

func (a *applier) gitRepo(ctx context.Context, dest string, g GitRepo) error {
	u := g.URL()
	if p, ok := localRepoPath(u); ok && a.opts.BaseDir != "" {
		// A local repository is host data like a local_dir's src and is
		// confined the same way.
		p, err := a.resolveHost(p)
		if err != nil {
			return fmt.Errorf("git repository %s: %w", u, err)
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return fmt.Errorf("git repository %s: %w", u, errSymlink(p))
		}
	}
	git := a.opts.GitCommand
	if git == "" {
		git = "git"
	}
	gitPath, err := exec.LookPath(git)
	if err != nil {
		return fmt.Errorf("git_repo entries are cloned on the host and need git there (ApplyOptions.GitCommand): %w", err)
	}
	tmp, err := os.MkdirTemp("", "cove-git-")
	if err != nil {
		return fmt.Errorf("making a temporary directory for the clone: %w", err)
	}
	defer os.RemoveAll(tmp)
	clone := filepath.Join(tmp, "repo")

	a.progress("cloning %s at %s", u, g.Ref)
	if err := cloneRef(ctx, gitPath, u, g.Ref, clone); err != nil {
		return err
	}

	src := clone
	sub := strings.Trim(path.Clean("/"+g.Subpath), "/")
	if sub != "" {
		if first, _, _ := strings.Cut(sub, "/"); first == ".git" {
			return fmt.Errorf("subpath %q points into the .git directory: %w", g.Subpath, sandbox.ErrInvalid)
		}
		// Walk the subpath a step at a time: a symlink in the
		// repository could otherwise lead the copy out of the clone.
		for _, part := range strings.Split(sub, "/") {
			src = filepath.Join(src, part)
			fi, err := os.Lstat(src)
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					return fmt.Errorf("subpath %q does not exist in %s at %s: %w", g.Subpath, u, g.Ref, sandbox.ErrNotFound)
				}
				return hostError(src, err)
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("subpath %q goes through a symlink in the repository; symlinks are refused: %w", g.Subpath, sandbox.ErrInvalid)
			}
		}
	}
	tree, err := a.listTree(src, sub == "")
	if err != nil {
		return fmt.Errorf("checking out %s at %s: %w", u, g.Ref, err)
	}
	a.progress("copying %s at %s to %s (%d files)", u, g.Ref, dest, tree.files)
	if err := a.copyTree(ctx, src, tree, dest); err != nil {
		return err
	}
	return a.dirMeta(ctx, dest, g.Meta)
}

// cloneRef checks out ref of the repository at u into dir, trying the
// cheapest way first: a shallow fetch of a commit id, a shallow clone of a
// branch or tag, and last a full clone (for abbreviated ids or servers
// that refuse to serve a commit by id).
func cloneRef(ctx context.Context, git, u, ref, dir string) error {
	if commitLike.MatchString(ref) {
		err := runGit(ctx, git, "", "init", "-q", "--", dir)
		if err == nil {
			err = runGit(ctx, git, dir, "remote", "add", "origin", "--", u)
		}
		if err == nil {
			err = runGit(ctx, git, dir, "fetch", "-q", "--depth", "1", "--no-tags", "origin", ref)
		}
		if err == nil {
			err = runGit(ctx, git, dir, "checkout", "-q", "--detach", "FETCH_HEAD", "--")
		}
		if err == nil {
			return nil
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	shallowErr := runGit(ctx, git, "", "clone", "-q", "--depth", "1", "--no-tags", "--branch="+ref, "--", u, dir)
	if shallowErr == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	err := runGit(ctx, git, "", "clone", "-q", "--no-checkout", "--", u, dir)
	if err == nil {
		err = runGit(ctx, git, dir, "checkout", "-q", "--detach", ref, "--")
	}
	if err != nil {
		return fmt.Errorf("cloning %s at %q: %w (before that, %v)", u, ref, err, shallowErr)
	}
	return nil
}

// runGit runs git on the host, in dir when it is set. Credential prompts
// are off so a private repository fails instead of hanging, and only
// ordinary transports are allowed: a manifest must not reach git's
// command-running helpers (ext::).
func runGit(ctx context.Context, git, dir string, args ...string) error {
	full := []string{"-c", "advice.detachedHead=false"}
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, git, full...)
	cmd.Env = append(gitEnviron(),
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ALLOW_PROTOCOL=https:http:ssh:git:file",
	)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("git %s: %s", args[0], gitMessage(stderr.String(), err))
	}
	return nil
}

// gitMessage picks the lines that say why git failed ("fatal: ...",
// "error: ...") out of its standard error, dropping warnings and hints.
func gitMessage(stderr string, err error) string {
	var why []string
	var last string
	for _, line := range strings.Split(stderr, "\n") {
		line = strings.TrimSpace(line)
		if line == "" {
			continue
		}
		last = line
		if strings.HasPrefix(line, "fatal: ") || strings.HasPrefix(line, "error: ") {
			why = append(why, line)
		}
	}
	msg := strings.Join(why, "; ")
	if msg == "" {
		msg = last
	}
	if msg == "" {
		msg = err.Error()
	}
	if len(msg) > tailMax {
		msg = msg[:tailMax] + "..."
	}
	return msg
}

// gitEnviron is the process environment without the variables that would
// point git at another repository (set, for example, when Apply runs from
// a git hook).
func gitEnviron() []string {
	var env []string
	for _, kv := range os.Environ() {
		name, _, _ := strings.Cut(kv, "=")
		switch name {
		case "GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY",
			"GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_COMMON_DIR", "GIT_NAMESPACE", "GIT_PREFIX":
			continue
		}
		env = append(env, kv)
	}
	return env
}
