package template

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// Build defaults.
const (
	DefaultSuite  = "bookworm"
	DefaultMirror = "http://deb.debian.org/debian"
)

// BuildOptions describes a Debian root filesystem to build.
type BuildOptions struct {
	// Packages are installed on top of the minbase variant (Essential
	// packages and apt), with their dependencies.
	Packages []string
	// Suite is the Debian release; "" means DefaultSuite.
	Suite string
	// Mirror is the Debian mirror's URL; "" means DefaultMirror.
	Mirror string
	// Tool picks the bootstrapper: "mmdebstrap", "debootstrap", or ""
	// for mmdebstrap when installed (faster: about 21 s against 32 s for
	// bookworm minbase plus one package on the machine this was measured
	// on, since it downloads and unpacks with apt), else debootstrap.
	// Both give the same package set.
	Tool string
	// Progress, when set, receives the bootstrapper's output line by line
	// as it runs, and cove's own steps.
	Progress func(string)
}

// mmdebstrapMergedUsr is the mmdebstrap hook that sets up merged /usr
// the way debootstrap does, when the suite wants it.
const mmdebstrapMergedUsr = "/usr/share/mmdebstrap/hooks/maybe-merged-usr"

var (
	// Compiled on first use: every program that links this package
	// (a sandbox's supervisor and pid 1 do) would pay for it at start.
	packageRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9+.-]+$`) }) // Debian policy 5.6.1
	suiteRE   = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[a-z0-9][a-z0-9.-]*$`) })
)

// Build makes a template from Debian packages: the minbase variant of
// opts.Suite plus opts.Packages, bootstrapped by mmdebstrap or debootstrap
// into the store's tmp directory (the bootstrapper runs in its own mount
// namespace when cove is root, so nothing it mounts outlives it), then
// cleaned: apt's package cache and lists are emptied (run `apt-get update`
// before installing more in a sandbox), /dev is emptied (the runtime
// provides it), /etc/hostname, /etc/hosts and /etc/resolv.conf are
// replaced by cove's (they would otherwise name the build host), and the
// sandbox user, uid 1000, is added. Config.Env has PATH.
//
// It needs root (debootstrap does; mmdebstrap can run unprivileged with
// subordinate ids in /etc/subuid), network access to the mirror, and
// mmdebstrap or debootstrap installed: without one it fails with
// sandbox.ErrUnavailable saying what to install. An existing name is
// sandbox.ErrExist, a bad package name or option sandbox.ErrInvalid, a
// package the mirror does not have sandbox.ErrNotFound, any other failure
// of the bootstrapper sandbox.ErrUnavailable with its last lines of
// output. When ctx ends the bootstrapper's process group is killed and
// ctx.Err() returned.
func (s *Store) Build(ctx context.Context, name string, opts BuildOptions) (*Template, error) {
	progress := opts.Progress
	if progress == nil {
		progress = func(string) {}
	}
	if opts.Suite == "" {
		opts.Suite = DefaultSuite
	}
	if opts.Mirror == "" {
		opts.Mirror = DefaultMirror
	}
	if err := s.checkNew(name); err != nil {
		return nil, err
	}
	if err := checkBuildOptions(opts); err != nil {
		return nil, fmt.Errorf("building template %q: %w", name, err)
	}
	tool, err := findTool(opts.Tool)
	if err != nil {
		return nil, fmt.Errorf("building template %q: %w", name, err)
	}
	tmp, err := s.tempDir("build")
	if err != nil {
		return nil, fmt.Errorf("building template %q: %w", name, err)
	}
	committed := false
	defer func() {
		if !committed {
			removeTree(tmp)
		}
	}()
	rootfs := filepath.Join(tmp, "rootfs")

	args := []string{"--variant=minbase"}
	if filepath.Base(tool) == "mmdebstrap" {
		// Without it apt satisfies init-system-helpers' "usrmerge |
		// usr-is-merged" with usrmerge, which pulls in perl: 47 MB more
		// than debootstrap's minbase. The hook merges /usr as debootstrap
		// does when the suite has usr-is-merged (bookworm and later).
		if fi, err := os.Stat(mmdebstrapMergedUsr); err == nil && fi.IsDir() {
			args = append(args, "--hook-dir="+mmdebstrapMergedUsr)
		}
	}
	if len(opts.Packages) > 0 {
		args = append(args, "--include="+strings.Join(opts.Packages, ","))
	}
	args = append(args, opts.Suite, rootfs, opts.Mirror)
	progress(fmt.Sprintf("%s %s", filepath.Base(tool), strings.Join(args, " ")))
	start := time.Now()
	if err := runTool(ctx, tool, args, progress); err != nil {
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("building template %q: %w", name, err)
	}
	progress(fmt.Sprintf("bootstrapped in %s", time.Since(start).Round(100*time.Millisecond)))

	root, err := os.OpenRoot(rootfs)
	if err != nil {
		return nil, fmt.Errorf("building template %q: %w", name, err)
	}
	defer root.Close()
	if err := cleanBuild(root); err != nil {
		return nil, fmt.Errorf("building template %q: cleaning the tree: %w", name, err)
	}
	if err := ensureMountPoints(root); err != nil {
		return nil, fmt.Errorf("building template %q: %w", name, err)
	}
	note, err := ensureUser(root, "", os.Geteuid() == 0)
	if err != nil {
		return nil, fmt.Errorf("building template %q: %w", name, err)
	}
	if note != "" {
		progress(note)
	}
	source := fmt.Sprintf("debian %s minbase", opts.Suite)
	if len(opts.Packages) > 0 {
		source += " + " + strings.Join(opts.Packages, ",")
	}
	progress("hashing the root filesystem...")
	committed = true // commit removes tmp
	t, err := s.commit(ctx, name, tmp, meta{Config: Config{Env: map[string]string{"PATH": DefaultPath}}, Source: source})
	if err != nil {
		return nil, err
	}
	progress(fmt.Sprintf("template %s: %s, %s", name, shortDigest(t.Digest), HumanSize(t.Size)))
	return t, nil
}

func checkBuildOptions(opts BuildOptions) error {
	for _, p := range opts.Packages {
		if !packageRE().MatchString(p) {
			return fmt.Errorf("package name %q: Debian package names are lower-case letters, digits, '+', '-' and '.': %w", p, sandbox.ErrInvalid)
		}
	}
	if !suiteRE().MatchString(opts.Suite) {
		return fmt.Errorf("suite %q: use a Debian release name such as bookworm: %w", opts.Suite, sandbox.ErrInvalid)
	}
	u, err := url.Parse(opts.Mirror)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https" && u.Scheme != "file") || strings.HasPrefix(opts.Mirror, "-") {
		return fmt.Errorf("mirror %q: use an http://, https:// or file:// URL: %w", opts.Mirror, sandbox.ErrInvalid)
	}
	return nil
}

// findTool returns the bootstrapper's path.
func findTool(want string) (string, error) {
	var names []string
	switch want {
	case "":
		names = []string{"mmdebstrap", "debootstrap"}
	case "mmdebstrap", "debootstrap":
		names = []string{want}
	default:
		return "", fmt.Errorf("bootstrapper %q: use mmdebstrap or debootstrap: %w", want, sandbox.ErrInvalid)
	}
	for _, n := range names {
		if p, err := exec.LookPath(n); err == nil {
			return p, nil
		}
		for _, dir := range []string{"/usr/sbin", "/sbin", "/usr/bin"} { // not always in a user's PATH
			if p := filepath.Join(dir, n); isExecutable(p) {
				return p, nil
			}
		}
	}
	return "", fmt.Errorf("building a Debian template needs %s; install it with `apt-get install %s`: %w", strings.Join(names, " or "), names[0], sandbox.ErrUnavailable)
}

func isExecutable(p string) bool {
	fi, err := os.Stat(p)
	return err == nil && fi.Mode().IsRegular() && fi.Mode()&0o111 != 0
}

// runTool runs the bootstrapper, streaming its output lines to progress.
func runTool(ctx context.Context, tool string, args []string, progress func(string)) error {
	cmd := exec.CommandContext(ctx, tool, args...)
	cmd.Env = append(os.Environ(), "LC_ALL=C.UTF-8", "DEBIAN_FRONTEND=noninteractive")
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if os.Geteuid() == 0 {
		// A private mount namespace: the /proc, /sys and /dev mounts the
		// bootstrapper makes in its target vanish with it, even when it
		// is killed halfway.
		cmd.SysProcAttr.Unshareflags = syscall.CLONE_NEWNS
	}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 5 * time.Second
	pr, pw := io.Pipe()
	cmd.Stdout, cmd.Stderr = pw, pw
	var tail []string
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		sc := bufio.NewScanner(pr)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			// dpkg redraws "(Reading database ... 5%" with \r: keep
			// the last state.
			line := strings.TrimRight(sc.Text(), "\r")
			if i := strings.LastIndexByte(line, '\r'); i >= 0 {
				line = line[i+1:]
			}
			if line == "" {
				continue
			}
			progress(line)
			if tail = append(tail, line); len(tail) > 15 {
				tail = tail[1:]
			}
		}
		io.Copy(io.Discard, pr)
	}()
	err := cmd.Run()
	pw.Close()
	wg.Wait()
	if err == nil {
		return nil
	}
	out := strings.Join(tail, "\n")
	for _, pat := range []string{"Unable to locate package", "Couldn't find these debs", "has no installation candidate"} {
		if i := strings.Index(out, pat); i >= 0 {
			line := out[strings.LastIndex(out[:i], "\n")+1:]
			if j := strings.IndexByte(line, '\n'); j >= 0 {
				line = line[:j]
			}
			return fmt.Errorf("%s: %s; check the package names with `apt-cache policy NAME`: %w", path.Base(tool), line, sandbox.ErrNotFound)
		}
	}
	return fmt.Errorf("%s failed (%v); its last output:\n%s\n%w", path.Base(tool), err, out, sandbox.ErrUnavailable)
}

// cleanBuild removes what a bootstrapped tree should not carry into a
// template and replaces the files that describe the build host.
func cleanBuild(root *os.Root) error {
	// Device nodes (the runtime mounts its own /dev) and apt's caches.
	for _, dir := range []string{"dev", "var/lib/apt/lists", "var/cache/apt/archives"} {
		if err := emptyDir(root, dir, func(n string) bool { return n == "partial" || n == "lock" }); err != nil {
			return err
		}
	}
	if err := emptyDir(root, "var/cache/apt", func(n string) bool { return !strings.HasSuffix(n, ".bin") }); err != nil {
		return err
	}
	files := map[string]string{
		"etc/hostname":    "sandbox\n",
		"etc/hosts":       hostsFile,
		"etc/resolv.conf": resolvConf(),
	}
	for name, content := range files {
		if err := root.RemoveAll(name); err != nil {
			return err
		}
		if err := root.WriteFile(name, []byte(content), 0o644); err != nil {
			return err
		}
		if err := root.Chmod(name, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// emptyDir removes the entries of dir for which keep is false; a missing
// dir is fine.
func emptyDir(root *os.Root, dir string, keep func(string) bool) error {
	f, err := root.Open(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	names, err := f.Readdirnames(-1)
	f.Close()
	if err != nil {
		return err
	}
	for _, n := range names {
		if keep(n) {
			continue
		}
		if err := root.RemoveAll(dir + "/" + n); err != nil {
			return err
		}
	}
	return nil
}
