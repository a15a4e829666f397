package manifest

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

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

// GitPolicy is what Apply may do for git_repo entries. git runs on the
// host, so a manifest that names a repository makes the host connect where
// it says: whoever applies another party's manifest (a server applying a
// tenant's) must say where that may be.
//
// Whatever the policy, git runs in a clean environment: no system or
// global configuration, an empty HOME, no credential helper, no askpass
// program or terminal prompt, no proxy from the environment, and only the
// transports the policy allows (never ext:: or fd::, which run commands).
// A clone URL that is neither an absolute path nor scheme://... (git's
// helper syntax, scp-like host:path), that starts with "-", that holds a
// control character, or that does not parse as a URL is refused.
type GitPolicy struct {
	// Schemes are the transports a clone may use: "https", "http", "git",
	// "ssh", and "file" for a host path or file:// URL. nil allows all
	// five (a user's own manifest on their own machine).
	Schemes []string
	// CheckAddr, when set, vets where git connects: Apply resolves the
	// URL's host itself, calls CheckAddr with the host as written and each
	// address with the port, and refuses the entry on any error. git is
	// then pinned to the vetted addresses (curl's resolve list) and
	// follows no redirect, so neither a DNS answer that changes between
	// the check and the connection (rebinding) nor a redirect can take it
	// elsewhere. Only https and http can be pinned: with CheckAddr set,
	// other schemes are refused, and so is a user name or password in the
	// URL (the clone carries no credentials).
	CheckAddr func(host string, addr netip.AddrPort) error
	// Resolve looks a host name up; nil is the system resolver.
	Resolve func(ctx context.Context, host string) ([]netip.Addr, error)
}

// allGitSchemes are the transports a nil GitPolicy.Schemes allows.
var allGitSchemes = []string{"https", "http", "ssh", "git", "file"}

func (p GitPolicy) schemes() []string {
	if p.Schemes == nil {
		return allGitSchemes
	}
	return p.Schemes
}

// urlScheme matches a URL scheme as RFC 3986 spells it.
var urlScheme = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z][A-Za-z0-9+.-]*$`) })

// dnsName is a host name that Go's URL parser and curl read alike.
var dnsName = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9.-]*[A-Za-z0-9])?$`) })

// gitTarget is a clone URL that passed the policy.
type gitTarget struct {
	url    string // what git is given
	scheme string // the transport, lowercase; "file" for a host path
	local  string // the host path, for file
	// config are "-c" settings for every git command of the clone (the
	// pinned addresses).
	config []string
}

// checkGitURL checks the clone URL raw against the policy and returns
// what to give git.
func (a *applier) checkGitURL(ctx context.Context, raw string) (gitTarget, error) {
	t, u, err := parseGitURL(raw)
	if err != nil {
		return gitTarget{}, err
	}
	allowed := a.opts.Git.schemes()
	if !slices.Contains(allowed, t.scheme) {
		what := t.scheme + "://"
		if t.scheme == "file" {
			what = "a path on the host"
		}
		return gitTarget{}, refuseGit(raw, "%s is not allowed here; clone from %s", what, schemeList(allowed))
	}
	if t.scheme == "file" {
		return a.localGitTarget(raw, t)
	}
	return a.remoteGitTarget(ctx, raw, t, u)
}

// refuseGit is the error for a clone URL the policy refuses.
func refuseGit(raw, format string, args ...any) error {
	return fmt.Errorf("git repository %q: "+format+": %w", append(append([]any{raw}, args...), sandbox.ErrInvalid)...)
}

// parseGitURL reads a clone URL, refusing what no policy allows, and
// returns its scheme (and host path, for "file") and, unless it is a bare
// host path, the URL as Go reads it.
func parseGitURL(raw string) (gitTarget, *url.URL, error) {
	switch {
	case strings.HasPrefix(raw, "-"):
		return gitTarget{}, nil, refuseGit(raw, "a clone URL must not start with \"-\"")
	case strings.ContainsFunc(raw, func(r rune) bool { return r < ' ' || r == 0x7f }):
		return gitTarget{}, nil, refuseGit(raw, "a clone URL must not contain control characters")
	}
	var t gitTarget
	if path.IsAbs(raw) {
		t.scheme, t.local = "file", raw
		return t, nil, nil
	}
	scheme, _, ok := strings.Cut(raw, "://")
	if !ok || !urlScheme().MatchString(scheme) {
		return gitTarget{}, nil, refuseGit(raw, "give an https:// URL (git's transport helpers such as ext:: and fd::, and host:path addresses, are not accepted)")
	}
	u, err := url.Parse(raw)
	if err != nil || u.Opaque != "" {
		// Go and git read URLs differently; one Go cannot read
		// (file://%zz/...) could mean anything to git.
		return gitTarget{}, nil, refuseGit(raw, "not a valid URL")
	}
	t.scheme = strings.ToLower(u.Scheme)
	if t.scheme == "file" {
		if u.Host != "" && u.Host != "localhost" {
			return gitTarget{}, nil, refuseGit(raw, "a file:// URL names no host")
		}
		t.local = u.Path
	}
	return t, u, nil
}

// localGitTarget confines a local repository (t.local) as host data like
// a local_dir's src. git gets the path that was checked, never a URL it
// might decode differently.
func (a *applier) localGitTarget(raw string, t gitTarget) (gitTarget, error) {
	t.local = path.Clean(t.local)
	if !path.IsAbs(t.local) {
		return gitTarget{}, refuseGit(raw, "a file:// URL needs an absolute path")
	}
	if a.opts.BaseDir != "" {
		p, err := a.resolveHost(t.local)
		if err != nil {
			return gitTarget{}, fmt.Errorf("git repository %s: %w", raw, err)
		}
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			return gitTarget{}, fmt.Errorf("git repository %s: %w", raw, errSymlink(p))
		}
		t.local = p
	}
	t.url = t.local
	return t, nil
}

// remoteGitTarget checks a network clone URL's host and, when the policy
// checks addresses, pins git to the addresses it checked: only http(s),
// no credentials, every address the host resolves to allowed.
func (a *applier) remoteGitTarget(ctx context.Context, raw string, t gitTarget, u *url.URL) (gitTarget, error) {
	pol := a.opts.Git
	host := u.Hostname()
	ip, ipErr := netip.ParseAddr(host)
	switch {
	case host == "":
		return gitTarget{}, refuseGit(raw, "the URL names no host")
	case ipErr != nil && !dnsName().MatchString(host):
		return gitTarget{}, refuseGit(raw, "host %q is not a host name or an IP address", host)
	case ipErr == nil && ip.Zone() != "":
		return gitTarget{}, refuseGit(raw, "an address with a zone is not accepted")
	}
	if pol.CheckAddr == nil {
		t.url = raw
		return t, nil
	}
	if t.scheme != "https" && t.scheme != "http" {
		return gitTarget{}, refuseGit(raw, "only https:// can be cloned here")
	}
	if u.User != nil {
		return gitTarget{}, refuseGit(raw, "credentials in the URL are not accepted: only public repositories can be cloned here")
	}
	port := 443
	if t.scheme == "http" {
		port = 80
	}
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil || n < 1 || n > 65535 {
			return gitTarget{}, refuseGit(raw, "port %q is out of range", p)
		}
		port = n
	}
	addrs := []netip.Addr{ip}
	if ipErr != nil {
		var err error
		if addrs, err = pol.resolve(ctx, host); err != nil {
			return gitTarget{}, refuseGit(raw, "%v", err)
		}
	}
	pinned := make([]string, 0, len(addrs))
	for _, ad := range addrs {
		ad = ad.Unmap()
		if err := pol.CheckAddr(host, netip.AddrPortFrom(ad, uint16(port))); err != nil {
			return gitTarget{}, refuseGit(raw, "%v", err)
		}
		if ad.Is6() {
			pinned = append(pinned, "["+ad.String()+"]")
		} else {
			pinned = append(pinned, ad.String())
		}
	}
	if ipErr != nil {
		t.config = append(t.config, fmt.Sprintf("http.curloptResolve=%s:%d:%s", host, port, strings.Join(pinned, ",")))
	}
	t.config = append(t.config, "http.followRedirects=false")
	// Go's form of the URL: what was checked is what git reads.
	t.url = u.String()
	return t, nil
}

// resolve looks host up with the policy's resolver (the system's when it
// has none), within 15 seconds.
func (p GitPolicy) resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	resolve := p.Resolve
	if resolve == nil {
		resolve = func(ctx context.Context, host string) ([]netip.Addr, error) {
			return net.DefaultResolver.LookupNetIP(ctx, "ip", host)
		}
	}
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	found, err := resolve(rctx, host)
	cancel()
	if err != nil || len(found) == 0 {
		// The resolver's own message names the server's DNS server;
		// the tenant needs only the host.
		return nil, fmt.Errorf("the host %s could not be resolved", host)
	}
	return found, nil
}

// schemeList says which transports a policy allows, for errors.
func schemeList(schemes []string) string {
	var out []string
	for _, s := range schemes {
		if s == "file" {
			out = append(out, "host paths")
		} else {
			out = append(out, s+"://")
		}
	}
	if len(out) == 0 {
		return "nowhere (git_repo entries are turned off)"
	}
	return strings.Join(out, ", ")
}

// commitLike matches what may be a commit id, which only a fetch by id
// (not clone --branch) can check out. Servers refuse fetching an
// abbreviated id; those fall through to a full clone.
var commitLike = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[0-9a-fA-F]{7,64}$`) })

func (a *applier) gitRepo(ctx context.Context, dest string, g GitRepo) error {
	u := g.URL()
	target, err := a.checkGitURL(ctx, u)
	if err != nil {
		return err
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
	home := filepath.Join(tmp, "home")
	if err := os.Mkdir(home, 0o700); err != nil {
		return fmt.Errorf("making a temporary directory for the clone: %w", err)
	}
	clone := filepath.Join(tmp, "repo")
	gr := &gitRunner{git: gitPath, tmp: tmp, env: gitEnv(home, a.opts.Git.schemes()), config: target.config}
	if !slices.Contains(a.opts.Git.schemes(), "file") {
		gr.config = append(gr.config, "protocol.file.allow=never")
	}

	a.progress("cloning %s at %s", u, g.Ref)
	if err := gr.cloneRef(ctx, target.url, g.Ref, clone); err != nil {
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
				return hidePath(hostError(src, err), clone, "the clone")
			}
			if fi.Mode()&fs.ModeSymlink != 0 {
				return fmt.Errorf("subpath %q goes through a symlink in the repository; symlinks are refused: %w", g.Subpath, sandbox.ErrInvalid)
			}
		}
	}
	tree, err := a.listTree(src, sub == "")
	if err != nil {
		return fmt.Errorf("checking out %s at %s: %w", u, g.Ref, hidePath(err, clone, "the clone"))
	}
	a.progress("copying %s at %s to %s (%d files)", u, g.Ref, dest, tree.files)
	if err := a.copyTree(ctx, src, tree, dest); err != nil {
		return hidePath(err, clone, "the clone")
	}
	return a.dirMeta(ctx, dest, g.Meta)
}

// hidePath keeps the host's temporary directory out of an error's message
// (whoever applies a tenant's manifest shows the tenant its errors).
func hidePath(err error, dir, as string) error {
	if err == nil || !strings.Contains(err.Error(), dir) {
		return err
	}
	return &renamedError{msg: strings.ReplaceAll(err.Error(), dir, as), err: err}
}

// renamedError is err with another message; errors.Is sees err.
type renamedError struct {
	msg string
	err error
}

func (e *renamedError) Error() string { return e.msg }
func (e *renamedError) Unwrap() error { return e.err }

// gitRunner runs the git commands of one clone.
type gitRunner struct {
	git string
	// tmp is the clone's temporary directory, kept out of messages.
	tmp    string
	env    []string
	config []string
}

// cloneRef checks out ref of the repository at u into dir, trying the
// cheapest way first: a shallow fetch of a commit id, a shallow clone of a
// branch or tag, and last a full clone (for abbreviated ids or servers
// that refuse to serve a commit by id).
func (g *gitRunner) cloneRef(ctx context.Context, u, ref, dir string) error {
	if commitLike().MatchString(ref) {
		err := g.run(ctx, "", "init", "-q", "--", dir)
		if err == nil {
			err = g.run(ctx, dir, "remote", "add", "origin", "--", u)
		}
		if err == nil {
			err = g.run(ctx, dir, "fetch", "-q", "--depth", "1", "--no-tags", "origin", ref)
		}
		if err == nil {
			err = g.run(ctx, dir, "checkout", "-q", "--detach", "FETCH_HEAD", "--")
		}
		if err == nil {
			return nil
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	shallowErr := g.run(ctx, "", "clone", "-q", "--depth", "1", "--no-tags", "--branch="+ref, "--", u, dir)
	if shallowErr == nil {
		return nil
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := os.RemoveAll(dir); err != nil {
		return err
	}
	err := g.run(ctx, "", "clone", "-q", "--no-checkout", "--", u, dir)
	if err == nil {
		err = g.run(ctx, dir, "checkout", "-q", "--detach", ref, "--")
	}
	if err != nil {
		return fmt.Errorf("cloning %s at %q: %w (before that, %v)", u, ref, err, shallowErr)
	}
	return nil
}

// run runs git on the host, in dir when it is set, with the clone's
// environment and settings.
func (g *gitRunner) run(ctx context.Context, dir string, args ...string) error {
	full := []string{
		"-c", "advice.detachedHead=false",
		// No credential helper: an empty value clears the list.
		"-c", "credential.helper=",
		"-c", "http.proxy=",
		"-c", "core.askPass=",
	}
	for _, c := range g.config {
		full = append(full, "-c", c)
	}
	if dir != "" {
		full = append(full, "-C", dir)
	}
	full = append(full, args...)
	cmd := exec.CommandContext(ctx, g.git, full...)
	cmd.Env = g.env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		msg := strings.ReplaceAll(gitMessage(stderr.String(), err), g.tmp, "the clone's directory")
		return fmt.Errorf("git %s: %s", args[0], msg)
	}
	return nil
}

// gitEnv is the whole environment of a clone's git commands: nothing of
// the caller's but PATH and where TLS roots are, so no configuration,
// credential, proxy or GIT_* variable of the host's reaches git.
// protocols become GIT_ALLOW_PROTOCOL, which git checks on every
// transport, redirects and submodules included.
func gitEnv(home string, protocols []string) []string {
	path := os.Getenv("PATH")
	if path == "" {
		path = "/usr/local/bin:/usr/bin:/bin"
	}
	env := []string{
		"PATH=" + path,
		"HOME=" + home,
		"XDG_CONFIG_HOME=" + filepath.Join(home, ".config"),
		"LC_ALL=C",
		"GIT_CONFIG_NOSYSTEM=1",
		"GIT_CONFIG_GLOBAL=/dev/null",
		"GIT_TERMINAL_PROMPT=0",
		"GIT_ASKPASS=",
		"GIT_ALLOW_PROTOCOL=" + strings.Join(protocols, ":"),
	}
	if slices.Contains(protocols, "ssh") {
		// ssh asks for passwords and host keys on /dev/tty, not
		// through git: batch mode fails instead.
		env = append(env, "GIT_SSH_COMMAND=ssh -o BatchMode=yes")
	}
	for _, name := range []string{"SSL_CERT_FILE", "SSL_CERT_DIR", "TMPDIR"} {
		if v, ok := os.LookupEnv(name); ok {
			env = append(env, name+"="+v)
		}
	}
	return env
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
