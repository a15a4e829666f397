package fsys

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"net/http"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"unicode/utf8"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// maxSymlinks bounds symlink hops during resolution, as the kernel's
// MAXSYMLINKS.
const maxSymlinks = 40

// Paths are resolved by file descriptor, never by host path: the sandbox
// can change its tree while the daemon works on it (swap a directory for
// a symlink to /etc, or to the host for the hostproc runtime, in a loop),
// and a path checked in user space and then opened by the kernel could
// lead elsewhere by the time it is opened. So lookup starts from a
// descriptor of the root opened once, opens every directory on the way
// relative to the previous one without following symlinks (openat2 with
// RESOLVE_NO_SYMLINKS in one call when nothing on the way is a link, one
// openat with O_NOFOLLOW per component otherwise), reads the symlinks it
// meets itself and restarts from the root with their target, so it
// decides at every hop whether the link stays in the sandbox and in the
// request's confinement. What it returns is the parent directory, held
// open, and the final name: every operation is then made relative to
// that descriptor (fstatat, openat with O_NOFOLLOW, mkdirat, unlinkat,
// renameat2, fchownat with AT_SYMLINK_NOFOLLOW) or on the descriptor of
// the opened file itself (fstat, read, fchown, fchmod). Recursive
// operations go on by descriptor from there.
//
// ".." is resolved lexically, before anything is looked up (as
// sandbox.ResolvePath does), and in a symlink's target relative to the
// link's directory.

// node is an entry of the sandbox found by lookup: its parent directory,
// held open, and its name there. The entry itself may not exist yet.
type node struct {
	sp     string      // sandbox path, after the symlinks lookup followed
	dir    int         // O_PATH descriptor of the parent directory; the root's for "/"
	name   string      // name in dir; "." for the root
	st     unix.Stat_t // the entry, not following a symlink; valid when exists
	exists bool
	own    bool // dir is the node's to close
}

// close releases the node's directory.
func (n *node) close() {
	if n != nil && n.own {
		unix.Close(n.dir)
		n.own = false
	}
}

func (n *node) isDir() bool     { return n.exists && n.st.Mode&unix.S_IFMT == unix.S_IFDIR }
func (n *node) isSymlink() bool { return n.exists && n.st.Mode&unix.S_IFMT == unix.S_IFLNK }
func (n *node) isRegular() bool { return n.exists && n.st.Mode&unix.S_IFMT == unix.S_IFREG }

// open opens the entry itself, never through a symlink that may have
// taken its place.
func (n *node) open(flags int) (int, error) {
	if flags&unix.O_DIRECTORY != 0 && flags&unix.O_PATH == 0 {
		return n.openDir(flags)
	}
	return openat(n.dir, n.name, flags|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
}

// openDir opens the directory n with flags (O_DIRECTORY, not O_PATH) in
// two steps: O_PATH first, then the very directory that descriptor holds,
// reopened through /proc. gVisor's kernel follows a symlink to a
// directory on open with O_DIRECTORY|O_NOFOLLOW (Linux refuses it with
// ENOTDIR), which let a sandbox that swapped a directory for such a link
// have the file API list what the link named; with O_PATH it refuses
// the link as Linux does.
func (n *node) openDir(flags int) (int, error) {
	pfd, err := openat(n.dir, n.name, unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return -1, err
	}
	defer unix.Close(pfd)
	return openat(unix.AT_FDCWD, procFD(pfd), flags|unix.O_CLOEXEC, 0)
}

// stat refreshes n.st and n.exists.
func (n *node) stat() error {
	err := fstatat(n.dir, n.name, &n.st)
	n.exists = err == nil
	if errors.Is(err, unix.ENOENT) {
		return nil
	}
	return err
}

// lookupOpts says how lookup treats the path.
type lookupOpts struct {
	// follow makes lookup follow a final symlink too.
	follow bool
	// mkdir creates missing directories on the way (not the final
	// component) with mode 0755, handing them to owner when set.
	mkdir bool
	owner *owner
}

// lookup resolves p (absolute in the sandbox, relative to the request's
// confinement or else to the workdir, with the escapes of decodePath)
// inside the root and the request's confinement (see WithConfine). A
// symlink that leads outside either, "..", a NUL byte or an over-long
// name gives an error wrapping sandbox.ErrInvalid; a missing directory on
// the way or a file in the place of one gives the errno (ENOENT,
// ENOTDIR), for the caller to name the operation. A missing final entry
// is not an error: the node says where it would be created. The caller
// closes the node.
func (s *Service) lookup(ctx context.Context, p string, o lookupOpts) (*node, error) {
	return s.lookupIn(confineOf(ctx), inWorkdir(ctx, p), o)
}

// confineOf is the confinement of the request in ctx, "" for none.
func confineOf(ctx context.Context) string {
	c, _ := ctx.Value(confineKey{}).(string)
	return c
}

// lookupIn is lookup with the confinement given ("" for none).
func (s *Service) lookupIn(confine, p string, o lookupOpts) (*node, error) {
	sp, err := s.absPath(confine, p)
	if err != nil {
		return nil, err
	}
	if confine == "" {
		confine = "/"
	}
	if !sandbox.Within(confine, sp) {
		return nil, fmt.Errorf("path %q is outside %s: %w", p, confine, sandbox.ErrInvalid)
	}
	return s.walkPath(p, sp, confine, o)
}

// absPath is the clean absolute sandbox path that p names, before any
// symlink: relative paths are under the confinement, else the workdir.
func (s *Service) absPath(confine, p string) (string, error) {
	p = decodePath(p)
	if p == "" {
		p = "."
	}
	if !path.IsAbs(p) {
		base := s.cfg.Workdir
		if confine != "" {
			base = confine
		}
		p = base + "/" + p
	}
	return sandbox.ResolvePath("/", p)
}

// walkPath resolves the clean absolute sandbox path sp, requested as p.
func (s *Service) walkPath(p, sp, confine string, o lookupOpts) (*node, error) {
	rootFD, err := s.rootFD()
	if err != nil {
		return nil, err
	}
	hops := 0
	// hop replaces sp by where the symlink at linkSP (whose target is
	// target) leads, followed by rest.
	hop := func(linkSP, target string, rest []string) error {
		hops++
		if hops > maxSymlinks {
			return fmt.Errorf("resolving %q: too many levels of symbolic links: %w", p, sandbox.ErrInvalid)
		}
		dest, ok := s.linkDest(path.Dir(linkSP), target)
		if !ok {
			return fmt.Errorf("path %q goes through symlink %q, which points to %q outside the sandbox: %w",
				p, encodePath(linkSP), encodePath(target), sandbox.ErrInvalid)
		}
		next := path.Join(append([]string{dest}, rest...)...)
		if !sandbox.Within(confine, next) {
			return fmt.Errorf("path %q leads to %q, outside %s: %w", p, encodePath(next), confine, sandbox.ErrInvalid)
		}
		sp = next
		return nil
	}
restart:
	for {
		parts := splitPath(sp)
		if len(parts) == 0 {
			n := &node{sp: "/", dir: rootFD, name: "."}
			if err := n.stat(); err != nil {
				return nil, err
			}
			return n, nil
		}
		// The parent directory: in one call when nothing on the way is a
		// symlink or missing, else component by component.
		dir, own, again, err := s.openParent(rootFD, parts, o, &hops, hop)
		if err != nil {
			return nil, err
		}
		if again {
			continue restart
		}
		n := &node{sp: sp, dir: dir, name: parts[len(parts)-1], own: own}
		if err := n.stat(); err != nil {
			n.close()
			return nil, err
		}
		if o.follow && n.isSymlink() {
			target, err := readlinkat(n.dir, n.name)
			n.close()
			if errors.Is(err, unix.EINVAL) || errors.Is(err, unix.ENOENT) {
				continue // replaced since the stat: look again
			}
			if err != nil {
				return nil, err
			}
			if err := hop(sp, target, nil); err != nil {
				return nil, err
			}
			continue
		}
		return n, nil
	}
}

// openParent opens the parent directory of the path whose components are
// parts: in one call when nothing on the way is a symlink or missing, else
// component by component, making missing directories when o.mkdir. When a
// component is a symlink it calls hop with it and the components after it
// and reports again (the walk starts over from where hop leads); hops
// counts the symlinks and made directories along the way. own says dir is
// a descriptor of its own, for the caller to close.
func (s *Service) openParent(rootFD int, parts []string, o lookupOpts, hops *int, hop func(linkSP, target string, rest []string) error) (dir int, own, again bool, err error) {
	dir = rootFD
	if len(parts) <= 1 {
		return dir, false, false, nil
	}
	if fd, err := openBeneath(rootFD, strings.Join(parts[:len(parts)-1], "/")); err == nil {
		return fd, true, false, nil
	}
	for i := 0; i < len(parts)-1; {
		fd, err := openat(dir, parts[i], unix.O_PATH|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err == nil {
			if own {
				unix.Close(dir)
			}
			dir, own = fd, true
			i++
			continue
		}
		here := "/" + strings.Join(parts[:i+1], "/")
		switch {
		case errors.Is(err, unix.ENOENT) && o.mkdir:
			err = mkdirOwned(dir, parts[i], o.owner)
			if err == nil || errors.Is(err, unix.EEXIST) {
				// Open what is there now; hops bounds the loop
				// against a sandbox that keeps removing it.
				if *hops++; *hops <= maxSymlinks {
					continue
				}
				err = unix.ELOOP
			}
		case errors.Is(err, unix.ENOTDIR), errors.Is(err, unix.ELOOP):
			target, lerr := readlinkat(dir, parts[i])
			switch {
			case lerr == nil:
				if own {
					unix.Close(dir)
				}
				if err := hop(here, target, parts[i+1:]); err != nil {
					return 0, false, false, err
				}
				return 0, false, true, nil
			case errors.Is(lerr, unix.EINVAL):
				err = unix.ENOTDIR // a file where a directory should be
			case errors.Is(lerr, unix.ENOENT):
				err = unix.ENOENT
			}
		}
		if own {
			unix.Close(dir)
		}
		return 0, false, false, err
	}
	return dir, own, false, nil
}

// openat2Missing is set once the kernel has refused openat2 (older than
// 5.6, or a sandbox kernel such as gVisor without it): lookups then walk
// component by component.
var openat2Missing atomic.Bool

// openBeneath opens the directory rel (clean, relative) under the root in
// one call when no component is a symlink; any error sends the caller to
// the walk by component, which tells the cases apart.
func openBeneath(rootFD int, rel string) (int, error) {
	if openat2Missing.Load() {
		return -1, unix.ENOSYS
	}
	for {
		fd, err := unix.Openat2(rootFD, rel, &unix.OpenHow{
			Flags:   unix.O_PATH | unix.O_DIRECTORY | unix.O_CLOEXEC,
			Resolve: unix.RESOLVE_BENEATH | unix.RESOLVE_NO_SYMLINKS | unix.RESOLVE_NO_MAGICLINKS,
		})
		switch {
		case err == nil:
			return fd, nil
		case errors.Is(err, unix.EINTR), errors.Is(err, unix.EAGAIN):
			continue
		case errors.Is(err, unix.ENOSYS), errors.Is(err, unix.EPERM):
			// EPERM: a seccomp filter that refuses the call.
			openat2Missing.Store(true)
		}
		return -1, err
	}
}

// linkDest is the sandbox path a symlink in directory dirSP with target
// leads to. Inside real isolation (Root "/") the target is a path of the
// sandbox, as the kernel resolves it for the sandbox's processes. When
// Root is a host directory (the hostproc runtime, whose processes see the
// host), an absolute target is a host path and counts only when it is
// under Root, and a relative one may not climb above Root. ok is false
// when the link leads outside the sandbox.
func (s *Service) linkDest(dirSP, target string) (dest string, ok bool) {
	root := s.cfg.Root
	if path.IsAbs(target) {
		if root == "/" {
			return path.Clean(target), true
		}
		host := filepath.Clean(target)
		if !sandbox.Within(root, host) {
			return "", false
		}
		return toSandbox(root, host), true
	}
	if root != "/" {
		// A relative target may not climb above Root (ResolvePath
		// refuses a ".." above "/").
		if _, err := sandbox.ResolvePath("/", dirSP+"/"+target); err != nil {
			return "", false
		}
	}
	return path.Join(dirSP, target), true
}

// mkdirOwned makes directory name in dir with mode 0755 and hands it to
// o. fchownat with AT_SYMLINK_NOFOLLOW: if the sandbox swaps the new
// directory for a symlink in between, the link is chowned, not its
// target.
func mkdirOwned(dir int, name string, o *owner) error {
	if err := unix.Mkdirat(dir, name, 0o755); err != nil {
		return err
	}
	if o != nil {
		if err := unix.Fchownat(dir, name, o.uid, o.gid, unix.AT_SYMLINK_NOFOLLOW); err != nil {
			return err
		}
	}
	return nil
}

// openat is unix.Openat retried on EINTR.
func openat(dir int, name string, flags int, mode uint32) (int, error) {
	for {
		fd, err := unix.Openat(dir, name, flags, mode)
		if err != unix.EINTR {
			return fd, err
		}
	}
}

func fstatat(dir int, name string, st *unix.Stat_t) error {
	for {
		err := unix.Fstatat(dir, name, st, unix.AT_SYMLINK_NOFOLLOW)
		if err != unix.EINTR {
			return err
		}
	}
}

// readlinkat reads the symlink name in dir.
func readlinkat(dir int, name string) (string, error) {
	for size := 256; ; size *= 2 {
		buf := make([]byte, size)
		n, err := unix.Readlinkat(dir, name, buf)
		if err == unix.EINTR {
			size /= 2
			continue
		}
		if err != nil {
			return "", err
		}
		if n < size {
			return string(buf[:n]), nil
		}
	}
}

// readDirNames reads the names in the open directory fd, without "." and
// "..", in the order the filesystem gives them.
func readDirNames(fd int) ([]string, error) {
	buf := make([]byte, 16<<10)
	var names []string
	for {
		n, err := unix.Getdents(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return nil, err
		}
		if n <= 0 {
			return names, nil
		}
		_, _, names = unix.ParseDirent(buf[:n], -1, names)
	}
}

// procFD is the /proc path of the daemon's descriptor fd: opening it (or
// adding an inotify watch on it) reaches the very file fd refers to,
// wherever it now is, with no path walk the sandbox could redirect.
func procFD(fd int) string { return "/proc/self/fd/" + strconv.Itoa(fd) }

// openRoot opens the directory n as an os.Root, for the code that walks a
// tree with one (the tarball package): from there on, nothing leaves the
// directory. n is opened by descriptor and reopened through /proc, and
// the result is checked to be the same directory.
func (n *node) openRoot() (*os.Root, error) {
	fd, err := n.open(unix.O_PATH | unix.O_DIRECTORY)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var want unix.Stat_t
	if err := unix.Fstat(fd, &want); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(procFD(fd))
	if err != nil {
		return nil, fmt.Errorf("reopening %q: %w: %w", encodePath(n.sp), sandbox.ErrUnavailable, unwrapOS(err))
	}
	fi, err := root.Stat(".")
	if st, ok := statT(fi); err != nil || !ok || st.Dev != want.Dev || st.Ino != want.Ino {
		root.Close()
		return nil, fmt.Errorf("reopening %q through /proc/self/fd gave another directory; is /proc mounted? %w", encodePath(n.sp), sandbox.ErrUnavailable)
	}
	return root, nil
}

func statT(fi fs.FileInfo) (*syscall.Stat_t, bool) {
	if fi == nil {
		return nil, false
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	return st, ok
}

// toSandbox turns a host path under root into its sandbox path.
func toSandbox(root, host string) string {
	rel, err := filepath.Rel(root, host)
	if err != nil || rel == "." {
		return "/"
	}
	return "/" + filepath.ToSlash(rel)
}

func splitPath(p string) []string {
	var out []string
	for _, c := range strings.Split(p, "/") {
		if c != "" && c != "." {
			out = append(out, c)
		}
	}
	return out
}

// mapOSError wraps an OS error with the matching sandbox sentinel so
// errors.Is works and the wire code is right.
func mapOSError(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("%w: %w", sandbox.ErrNotFound, err)
	case errors.Is(err, fs.ErrExist), errors.Is(err, syscall.ENOTEMPTY):
		return fmt.Errorf("%w: %w", sandbox.ErrExist, err)
	case errors.Is(err, fs.ErrPermission):
		return fmt.Errorf("%w: %w", sandbox.ErrPermission, err)
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT), errors.Is(err, syscall.EFBIG):
		return fmt.Errorf("%w: the sandbox's disk is full; free space or raise its disk limit: %w", sandbox.ErrLimit, err)
	case errors.Is(err, syscall.ENAMETOOLONG), errors.Is(err, syscall.ENOTDIR), errors.Is(err, syscall.EISDIR),
		errors.Is(err, syscall.ELOOP), errors.Is(err, syscall.EINVAL), errors.Is(err, syscall.EXDEV):
		return fmt.Errorf("%w: %w", sandbox.ErrInvalid, err)
	}
	return err
}

// wire.ConfineHeader, a Cove extension, narrows a request's paths to a
// directory of the sandbox (the workspace): the sandbox.Session contract
// confines every path to the workspace, symlinks included, while envd's
// clients may reach the whole sandbox.

type confineKey struct{}

// WithConfine reads wire.ConfineHeader and wire.WorkdirHeader into the
// request's context, for lookup and Resolve.
func WithConfine(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if d := r.Header.Get(wire.WorkdirHeader); d != "" {
			wd, err := sandbox.ResolvePath("/", decodePath(d))
			if err != nil || !path.IsAbs(d) {
				wire.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s header %q: want an absolute sandbox path", wire.WorkdirHeader, d))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), workdirKey{}, wd))
		}
		if c := r.Header.Get(wire.ConfineHeader); c != "" {
			root, err := sandbox.ResolvePath("/", decodePath(c))
			if err != nil || !path.IsAbs(c) {
				wire.WriteError(w, http.StatusBadRequest, fmt.Sprintf("%s header %q: want an absolute sandbox path", wire.ConfineHeader, c))
				return
			}
			r = r.WithContext(context.WithValue(r.Context(), confineKey{}, root))
		}
		h.ServeHTTP(w, r)
	})
}

type workdirKey struct{}

// WorkdirOf is the request's workdir (wire.WorkdirHeader), "" for the
// daemon's own.
func WorkdirOf(ctx context.Context) string {
	w, _ := ctx.Value(workdirKey{}).(string)
	return w
}

// inWorkdir makes a relative p absolute under the request's workdir,
// when it names one and no confinement bases relative paths instead.
func inWorkdir(ctx context.Context, p string) string {
	wd := WorkdirOf(ctx)
	if wd == "" || path.IsAbs(p) || confineOf(ctx) != "" {
		return p
	}
	return wd + "/" + p
}

// Resolve resolves p for the request in ctx (see lookup) to its
// sandbox path and where that is on the host, for what must be named by
// path (a process's working directory).
// A path through a missing directory or a file is not an error: the
// result is the path as asked, which the caller finds missing.
func (s *Service) Resolve(ctx context.Context, p string, follow bool) (sandboxPath, hostPath string, err error) {
	n, err := s.lookup(ctx, p, lookupOpts{follow: follow})
	if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ENOTDIR) {
		sp, err := s.absPath(confineOf(ctx), inWorkdir(ctx, p))
		if err != nil {
			return "", "", err
		}
		return sp, filepath.Join(s.cfg.Root, sp), nil
	}
	if err != nil {
		return "", "", err
	}
	n.close()
	return n.sp, filepath.Join(s.cfg.Root, n.sp), nil
}

// Names that are not UTF-8. A Linux file name is any bytes but "/" and
// NUL, while the API's strings (protobuf, JSON) must be UTF-8. So names
// and paths leave the daemon encoded, and come back decoded, this way:
// each byte of a name that is not part of valid UTF-8 is written as
// nameEscape followed by its value in two upper-case hex digits ("\xff"
// becomes "‛FF"), and a nameEscape that is part of the name is doubled.
// Every other name, which is to say every UTF-8 name without U+201B, is
// unchanged. Decoding takes "‛‛" back to "‛" and "‛XX" back to the byte
// 0xXX only for 0x80 to 0xFF (the bytes that can be invalid UTF-8: an
// escape never makes a "/", a NUL or a "."); any other "‛" stays as it
// is, so a client that types a name with one still reaches it. The same
// escape as rclone's for such names (U+201B, SINGLE HIGH-REVERSED-9
// QUOTATION MARK): readable, and rare in real names.
const nameEscape = '\u201b'

// encodePath makes a sandbox path (or a name, or a symlink target) safe
// to send: see nameEscape.
func encodePath(p string) string {
	if utf8.ValidString(p) && !strings.ContainsRune(p, nameEscape) {
		return p
	}
	var b strings.Builder
	for i := 0; i < len(p); {
		r, size := utf8.DecodeRuneInString(p[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, "%c%02X", nameEscape, p[i])
		case r == nameEscape:
			b.WriteRune(nameEscape)
			b.WriteRune(nameEscape)
		default:
			b.WriteString(p[i : i+size])
		}
		i += size
	}
	return b.String()
}

// decodePath undoes encodePath on a path a client sent.
func decodePath(p string) string {
	if !strings.ContainsRune(p, nameEscape) {
		return p
	}
	const escLen = len(string(nameEscape))
	var b strings.Builder
	for i := 0; i < len(p); {
		if !strings.HasPrefix(p[i:], string(nameEscape)) {
			b.WriteByte(p[i])
			i++
			continue
		}
		rest := p[i+escLen:]
		if strings.HasPrefix(rest, string(nameEscape)) {
			b.WriteRune(nameEscape)
			i += 2 * escLen
			continue
		}
		if len(rest) >= 2 {
			if v, err := strconv.ParseUint(rest[:2], 16, 8); err == nil && v >= 0x80 {
				b.WriteByte(byte(v))
				i += escLen + 2
				continue
			}
		}
		b.WriteRune(nameEscape)
		i += escLen
	}
	return b.String()
}
