// Package fsys is the daemon's filesystem service: envd's Filesystem
// Connect service (stat, list, mkdir, move, remove, watch), envd's /files
// endpoints and Cove's /cove/tar, and the sandbox's users and groups. Every
// path is resolved by file descriptor inside the sandbox's root (openat2
// with RESOLVE_IN_ROOT, or a component walk), and every operation acts on
// what was opened, so a tree the sandbox changes meanwhile cannot lead the
// daemon out of it. Package guest assembles it into the daemon.
package fsys

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/guest/gen/filesystem/filesystemconnect"
	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// Service serves envd's filesystem.Filesystem service and the /files and
// /cove/tar HTTP endpoints. Every path goes through lookup, which
// resolves it by descriptor inside the sandbox root (and the directory a
// client confines its request to with ConfineHeader), and every
// operation acts on what lookup opened, so a tree the sandbox changes
// meanwhile cannot lead it elsewhere; replies and error messages name
// sandbox paths only (encoded, see encodePath), never where Root lives on
// the host.
//
// Create it with New.
type Service struct {
	cfg Config
	log *slog.Logger

	// names caches the sandbox's /etc/passwd and /etc/group.
	names idNames

	// mu guards watchers.
	mu       sync.Mutex
	watchers map[string]*pollWatcher

	// uploads are recent uploads' temporary names, for watches.
	uploads uploadNotes

	// root is the sandbox's root directory, opened once (O_PATH) on first
	// use: every lookup starts from it (see lookup). Its finalizer closes
	// it with the service.
	rootOnce sync.Once
	root     *os.File
	rootErr  error
}

// rootFD is the descriptor every lookup starts from.
func (f *Service) rootFD() (int, error) {
	f.rootOnce.Do(func() {
		fd, err := unix.Open(f.cfg.Root, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
		if err != nil {
			f.rootErr = fmt.Errorf("opening the sandbox's root: %w: %w", sandbox.ErrUnavailable, err)
			return
		}
		f.root = os.NewFile(uintptr(fd), "/")
	})
	if f.rootErr != nil {
		return -1, f.rootErr
	}
	return int(f.root.Fd()), nil
}

// Config configures a Service.
type Config struct {
	// Root is the host directory that is the sandbox's "/"; every path is
	// confined to it.
	Root string
	// Workdir is the sandbox path relative paths start in.
	Workdir string
	// User is the default user requests act as ("" means the daemon's
	// own).
	User string
	// KeepAlive is how often a watch stream gets a keepalive event.
	KeepAlive time.Duration
	// Logger receives the service's logs.
	Logger *slog.Logger
}

// New returns the filesystem service of cfg, which the daemon has filled
// in (Root absolute and resolved, KeepAlive and Logger set).
func New(cfg Config) *Service {
	return &Service{cfg: cfg, log: cfg.Logger}
}

var _ filesystemconnect.FilesystemHandler = (*Service)(nil)

// Stat describes one entry without following a final symlink (envd's
// entryInfo uses lstat).
func (f *Service) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	n, err := f.lookup(ctx, req.Msg.GetPath(), lookupOpts{})
	if err != nil {
		return nil, f.rpcError(pathError("reading", req.Msg.GetPath(), err))
	}
	defer n.close()
	e, err := f.entryInfo(ctx, n)
	if err != nil {
		return nil, f.rpcError(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its parents. As in envd, an existing
// directory is AlreadyExists and an existing non-directory is
// InvalidArgument.
func (f *Service) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	o, err := f.ownerFor(req.Header(), "")
	if err != nil {
		return nil, f.rpcError(err)
	}
	n, err := f.lookup(ctx, req.Msg.GetPath(), lookupOpts{follow: true, mkdir: true, owner: o})
	if err != nil {
		return nil, f.rpcError(pathError("creating directory", req.Msg.GetPath(), err))
	}
	defer n.close()
	if !n.exists {
		err := mkdirOwned(n.dir, n.name, o)
		if err != nil && !errors.Is(err, unix.EEXIST) {
			return nil, f.rpcError(pathError("creating directory", n.sp, err))
		}
		if err == nil {
			if err := n.stat(); err != nil {
				return nil, f.rpcError(pathError("creating directory", n.sp, err))
			}
			e, err := f.entryInfo(ctx, n)
			if err != nil {
				return nil, f.rpcError(err)
			}
			return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
		}
		if err := n.stat(); err != nil {
			return nil, f.rpcError(pathError("creating directory", n.sp, err))
		}
	}
	if n.isDir() {
		return nil, f.rpcError(fmt.Errorf("directory %q already exists: %w", encodePath(n.sp), sandbox.ErrExist))
	}
	return nil, f.rpcError(fmt.Errorf("%q already exists and is not a directory; remove it first or pick another path: %w", encodePath(n.sp), sandbox.ErrInvalid))
}

// wire.NoReplaceHeader, a Cove extension, makes Move refuse an existing
// destination with AlreadyExists (renameat2 with RENAME_NOREPLACE: no
// window between the check and the move), where envd's Move replaces it.

// Move renames source to destination, creating destination's parents.
// Like rename(2) (and envd), an existing destination file is replaced,
// unless the request carries NoReplaceHeader.
func (f *Service) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	src, err := f.lookup(ctx, req.Msg.GetSource(), lookupOpts{})
	if err != nil {
		return nil, f.rpcError(pathError("moving", req.Msg.GetSource(), err))
	}
	defer src.close()
	if !src.exists {
		return nil, f.rpcError(pathError("moving", src.sp, unix.ENOENT))
	}
	o, err := f.ownerFor(req.Header(), "")
	if err != nil {
		return nil, f.rpcError(err)
	}
	dst, err := f.lookup(ctx, req.Msg.GetDestination(), lookupOpts{mkdir: true, owner: o})
	if err != nil {
		return nil, f.rpcError(pathError("moving to", req.Msg.GetDestination(), err))
	}
	defer dst.close()
	if src.sp == "/" || dst.sp == "/" {
		return nil, f.rpcError(fmt.Errorf("cannot move %q to %q: the sandbox root cannot be moved or replaced: %w", encodePath(src.sp), encodePath(dst.sp), sandbox.ErrInvalid))
	}
	rename := unix.Renameat
	if req.Header().Get(wire.NoReplaceHeader) != "" {
		rename = renameNoReplace
	}
	if err := rename(src.dir, src.name, dst.dir, dst.name); err != nil {
		if errors.Is(err, unix.EEXIST) {
			return nil, f.rpcError(fmt.Errorf("moving %q to %q: the destination exists; remove it first: %w", encodePath(src.sp), encodePath(dst.sp), sandbox.ErrExist))
		}
		return nil, f.rpcError(fmt.Errorf("moving %q to %q: %w", encodePath(src.sp), encodePath(dst.sp), mapOSError(unwrapOS(err))))
	}
	if err := dst.stat(); err != nil || !dst.exists {
		return nil, f.rpcError(pathError("reading", dst.sp, cmpErr(err, unix.ENOENT)))
	}
	e, err := f.entryInfo(ctx, dst)
	if err != nil {
		return nil, f.rpcError(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// renameat2 is unix.Renameat2; a test makes it refuse RENAME_NOREPLACE.
var renameat2 = unix.Renameat2

// renameNoReplace renames without replacing an existing destination,
// which it refuses with EEXIST. Where the filesystem refuses
// RENAME_NOREPLACE with EINVAL (gVisor's bind mounts in their default
// shared mode, as a Kubernetes volume is under gVisor; some FUSE and
// network filesystems), it links and unlinks a non-directory, as
// atomic against a destination that appears meanwhile, and renames a
// directory only if nothing is at the destination (the one race left
// can replace an empty directory made at that instant, never a file).
func renameNoReplace(srcDir int, srcName string, dstDir int, dstName string) error {
	err := renameat2(srcDir, srcName, dstDir, dstName, unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EINVAL) {
		return err
	}
	var st unix.Stat_t
	if err := unix.Fstatat(srcDir, srcName, &st, unix.AT_SYMLINK_NOFOLLOW); err != nil {
		return err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		if err := unix.Linkat(srcDir, srcName, dstDir, dstName, 0); err != nil {
			return err
		}
		return unix.Unlinkat(srcDir, srcName, 0)
	}
	switch err := unix.Fstatat(dstDir, dstName, &st, unix.AT_SYMLINK_NOFOLLOW); {
	case err == nil:
		return unix.EEXIST
	case !errors.Is(err, unix.ENOENT):
		return err
	}
	return unix.Renameat(srcDir, srcName, dstDir, dstName)
}

// cmpErr is err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}

// ListDir lists a directory (following it if it is a symlink) down to
// depth levels; 0 means 1. Entries keep the requested path as their
// prefix, come in lexical pre-order, and symlinked directories are listed
// but never descended into.
func (f *Service) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	depth := int(req.Msg.GetDepth())
	if depth <= 0 {
		depth = 1
	}
	n, err := f.lookup(ctx, req.Msg.GetPath(), lookupOpts{})
	if err != nil {
		return nil, f.rpcError(pathError("listing", req.Msg.GetPath(), err))
	}
	sp := n.sp
	if n.isSymlink() {
		n.close()
		if n, err = f.lookup(ctx, sp, lookupOpts{follow: true}); err != nil {
			return nil, f.rpcError(pathError("listing", sp, err))
		}
	}
	defer n.close()
	if !n.exists {
		return nil, f.rpcError(pathError("listing", sp, unix.ENOENT))
	}
	if !n.isDir() {
		return nil, f.rpcError(fmt.Errorf("listing %q: it is not a directory; use Stat for a single file: %w", encodePath(sp), sandbox.ErrInvalid))
	}
	fd, err := n.open(unix.O_RDONLY | unix.O_DIRECTORY)
	if err != nil {
		return nil, f.rpcError(pathError("listing", sp, err))
	}
	defer unix.Close(fd)
	var entries []*pb.EntryInfo
	if err := f.walk(ctx, fd, sp, 1, depth, &entries); err != nil {
		return nil, f.rpcError(err)
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}

// walk appends the entries of the open directory fd (sandbox path sp),
// which is at level-1 below the listed directory, recursing while level <
// depth. Subdirectories are opened relative to fd without following
// symlinks, so the listing never leaves the tree it started in.
func (f *Service) walk(ctx context.Context, fd int, sp string, level, depth int, out *[]*pb.EntryInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	names, err := readDirNames(fd)
	if err != nil {
		if level > 1 && (errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist)) {
			return nil
		}
		return pathError("listing", sp, err)
	}
	slices.Sort(names)
	for _, name := range names {
		c := &node{sp: path.Join(sp, name), dir: fd, name: name}
		if err := c.stat(); err != nil {
			return pathError("listing", c.sp, err)
		}
		if !c.exists {
			continue // removed since the directory was read
		}
		*out = append(*out, f.entryFromStat(confineOf(ctx), c))
		if c.isDir() && level < depth {
			cfd, err := c.open(unix.O_RDONLY | unix.O_DIRECTORY)
			if err != nil {
				// An unreadable subdirectory, or one that vanished or was
				// swapped for something else, is still listed itself;
				// its contents are skipped rather than failing the whole
				// listing.
				continue
			}
			err = f.walk(ctx, cfd, c.sp, level+1, depth, out)
			unix.Close(cfd)
			if err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove deletes a file, a symlink (not its target) or a directory tree.
// As in envd (os.RemoveAll), a missing path is not an error. The sandbox
// root itself cannot be removed.
func (f *Service) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	n, err := f.lookup(ctx, req.Msg.GetPath(), lookupOpts{})
	if errors.Is(err, unix.ENOENT) {
		return connect.NewResponse(&pb.RemoveResponse{}), nil
	}
	if err != nil {
		return nil, f.rpcError(pathError("removing", req.Msg.GetPath(), err))
	}
	defer n.close()
	if n.sp == "/" {
		return nil, f.rpcError(fmt.Errorf("refusing to remove the sandbox root %q; remove the entries below it instead: %w", n.sp, sandbox.ErrInvalid))
	}
	if err := removeAllAt(n.dir, n.name); err != nil {
		return nil, f.rpcError(fmt.Errorf("removing %q: %w", encodePath(n.sp), mapOSError(unwrapOS(err))))
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// removeAllAt removes name in dir and, if it is a directory, everything
// below it, by descriptor: a directory swapped for a symlink on the way
// has the link removed, never what it points to.
func removeAllAt(dir int, name string) error {
	for attempt := 0; ; attempt++ {
		err := unix.Unlinkat(dir, name, 0)
		if err == nil || errors.Is(err, unix.ENOENT) {
			return nil
		}
		if !errors.Is(err, unix.EISDIR) && !errors.Is(err, unix.EPERM) {
			return err
		}
		fd, oerr := openat(dir, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		switch {
		case errors.Is(oerr, unix.ENOENT):
			return nil
		case errors.Is(oerr, unix.ENOTDIR), errors.Is(oerr, unix.ELOOP):
			if attempt < 3 {
				continue // no longer a directory: unlink it
			}
			return err
		case oerr != nil:
			return oerr
		}
		names, rerr := readDirNames(fd)
		var first error
		for _, n := range names {
			if err := removeAllAt(fd, n); err != nil && first == nil {
				first = err
			}
		}
		unix.Close(fd)
		if rerr != nil {
			return rerr
		}
		err = unix.Unlinkat(dir, name, unix.AT_REMOVEDIR)
		switch {
		case err == nil, errors.Is(err, unix.ENOENT):
			return nil
		case errors.Is(err, unix.ENOTEMPTY) && first == nil && attempt < 3:
			continue // filled again meanwhile
		case first != nil:
			return first
		}
		return err
	}
}

// entryInfo describes the entry n without following a final symlink.
func (f *Service) entryInfo(ctx context.Context, n *node) (*pb.EntryInfo, error) {
	if !n.exists {
		return nil, pathError("reading", n.sp, unix.ENOENT)
	}
	return f.entryFromStat(confineOf(ctx), n), nil
}

// entryFromStat builds an EntryInfo the way envd does: type and mode
// (permission bits only) of a symlink are its target's (type unspecified
// when the target is missing or outside the sandbox or the request's
// confinement), while size and the permissions string ("Lrwxrwxrwx") are
// the link's own. Names and paths are encoded (encodePath). confine is the
// request's confinement ("" for none).
func (f *Service) entryFromStat(confine string, n *node) *pb.EntryInfo {
	mode := fileMode(n.st.Mode)
	e := &pb.EntryInfo{
		Name:         encodePath(path.Base(n.sp)),
		Path:         encodePath(n.sp),
		Size:         n.st.Size,
		Permissions:  mode.String(),
		ModifiedTime: timestamppb.New(time.Unix(n.st.Mtim.Unix())),
	}
	target, hasTarget := mode, true
	if n.isSymlink() {
		hasTarget = false
		if t, err := readlinkat(n.dir, n.name); err == nil {
			t = encodePath(t)
			e.SymlinkTarget = &t
		}
		if tn, err := f.lookupIn(confine, n.sp, lookupOpts{follow: true}); err == nil {
			if tn.exists {
				target, hasTarget = fileMode(tn.st.Mode), true
			}
			tn.close()
		}
	}
	if hasTarget {
		e.Type = fileType(target)
		e.Mode = uint32(target.Perm())
	}
	e.Owner = f.names.name(f, "/etc/passwd", n.st.Uid)
	e.Group = f.names.name(f, "/etc/group", n.st.Gid)
	return e
}

// fileMode converts a stat(2) mode to an fs.FileMode, as os.Lstat does.
func fileMode(m uint32) fs.FileMode {
	mode := fs.FileMode(m & 0o777)
	switch m & unix.S_IFMT {
	case unix.S_IFBLK:
		mode |= fs.ModeDevice
	case unix.S_IFCHR:
		mode |= fs.ModeDevice | fs.ModeCharDevice
	case unix.S_IFDIR:
		mode |= fs.ModeDir
	case unix.S_IFIFO:
		mode |= fs.ModeNamedPipe
	case unix.S_IFLNK:
		mode |= fs.ModeSymlink
	case unix.S_IFSOCK:
		mode |= fs.ModeSocket
	}
	if m&unix.S_ISGID != 0 {
		mode |= fs.ModeSetgid
	}
	if m&unix.S_ISUID != 0 {
		mode |= fs.ModeSetuid
	}
	if m&unix.S_ISVTX != 0 {
		mode |= fs.ModeSticky
	}
	return mode
}

func fileType(m fs.FileMode) pb.FileType {
	switch {
	case m.IsRegular():
		return pb.FileType_FILE_TYPE_FILE
	case m.IsDir():
		return pb.FileType_FILE_TYPE_DIRECTORY
	case m&fs.ModeSymlink != 0:
		return pb.FileType_FILE_TYPE_SYMLINK
	}
	return pb.FileType_FILE_TYPE_UNSPECIFIED
}

// owner is who new files and directories belong to; nil keeps the
// daemon's own ids.
type owner struct{ uid, gid int }

// pathError describes err from an operation on sandbox path sp: the OS
// error's own (host) path is dropped and the sandbox sentinel wrapped. An
// error that already carries a sentinel (from lookup) is returned as it
// is.
func pathError(op, sp string, err error) error {
	if wire.HasSentinel(err) {
		return err
	}
	sp = encodePath(sp)
	inner := unwrapOS(err)
	if errors.Is(inner, fs.ErrNotExist) {
		return fmt.Errorf("%s %q: it does not exist: %w", op, sp, mapOSError(inner))
	}
	return fmt.Errorf("%s %q: %w", op, sp, mapOSError(inner))
}

// unwrapOS strips *fs.PathError, *os.LinkError, *os.SyscallError and
// similar wrappers, whose messages carry host paths, down to the errno.
func unwrapOS(err error) error {
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno
	}
	var pe *fs.PathError
	var le *os.LinkError
	var se *os.SyscallError
	switch {
	case errors.As(err, &pe):
		return pe.Err
	case errors.As(err, &le):
		return le.Err
	case errors.As(err, &se):
		return se.Err
	}
	return err
}

// scrubbedError keeps an error's chain for errors.Is while showing a
// message with the host location of Root rewritten to sandbox paths.
type scrubbedError struct {
	msg string
	err error
}

func (e *scrubbedError) Error() string { return e.msg }
func (e *scrubbedError) Unwrap() error { return e.err }

// scrub rewrites any host path under Root in err's message to the sandbox
// path. It is a safety net: errors built here already name sandbox paths,
// but one from deeper down (the tarball package) might not.
func (f *Service) scrub(err error) error {
	root := f.cfg.Root
	if err == nil || root == "/" {
		return err
	}
	msg := err.Error()
	if !strings.Contains(msg, root) {
		return err
	}
	msg = strings.ReplaceAll(msg, root+"/", "/")
	msg = strings.ReplaceAll(msg, root, "/")
	return &scrubbedError{msg: msg, err: err}
}

// internal logs an error that matches no sandbox sentinel and returns it
// with an id to find it in the logs.
func (f *Service) internal(err error) error {
	id := newID()
	f.log.Error("filesystem request failed", "error_id", id, "error", err)
	return &scrubbedError{msg: fmt.Sprintf("internal error %s: %s", id, err.Error()), err: err}
}

// rpcError turns err into the Connect error for a reply.
func (f *Service) rpcError(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if !wire.HasSentinel(err) {
		err = mapOSError(err)
	}
	err = f.scrub(err)
	if !wire.HasSentinel(err) {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			err = f.internal(err)
		}
	}
	return wire.ConnectError(err)
}

func newID() string {
	var b [8]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// idNames maps numeric user and group ids to names from the sandbox's own
// /etc/passwd and /etc/group (not the host's), re-reading a file at most
// every idNamesTTL.
type idNames struct {
	// mu guards files.
	mu    sync.Mutex
	files map[string]*idFile
}

const idNamesTTL = 2 * time.Second

// idFile is one parsed passwd or group file.
type idFile struct {
	checked time.Time
	mtime   time.Time
	size    int64
	byID    map[uint32]string
	// users holds passwd entries by name (nil for group files).
	users map[string]*User
}

// name returns the name of id in the sandbox file (/etc/passwd or
// /etc/group), or the id in decimal when it has none.
func (n *idNames) name(s *Service, file string, id uint32) string {
	if name, ok := n.load(s, file).byID[id]; ok {
		return name
	}
	return strconv.FormatUint(uint64(id), 10)
}

// user looks a user name (or a numeric uid) up in the sandbox's
// /etc/passwd; a uid it does not list is a user of that uid and gid with
// / as home.
func (n *idNames) user(s *Service, name string) (*User, bool) {
	f := n.load(s, "/etc/passwd")
	if u, ok := f.users[name]; ok {
		return u, true
	}
	if id, err := strconv.ParseUint(name, 10, 31); err == nil {
		if u, ok := f.users[f.byID[uint32(id)]]; ok {
			return u, true
		}
		return &User{Name: name, UID: int(id), GID: int(id), Home: "/", Groups: []uint32{uint32(id)}}, true
	}
	return nil, false
}

func (n *idNames) load(s *Service, file string) *idFile {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.files == nil {
		n.files = make(map[string]*idFile)
	}
	cur := n.files[file]
	now := time.Now()
	if cur != nil && now.Sub(cur.checked) < idNamesTTL {
		return cur
	}
	// Resolve inside the sandbox and read by descriptor, so a symlinked
	// /etc/passwd cannot make the daemon read a host file.
	fh, fi, err := s.openSandboxFile(file)
	if err != nil {
		cur = &idFile{}
	} else {
		if cur == nil || !fi.ModTime().Equal(cur.mtime) || fi.Size() != cur.size {
			cur = parseIDFile(fh, file == "/etc/passwd")
			cur.mtime, cur.size = fi.ModTime(), fi.Size()
		}
		fh.Close()
	}
	cur.checked = now
	n.files[file] = cur
	return cur
}

// openSandboxFile opens the regular file at sandbox path p for reading.
func (s *Service) openSandboxFile(p string) (*os.File, fs.FileInfo, error) {
	n, err := s.lookupIn("", p, lookupOpts{follow: true})
	if err != nil {
		return nil, nil, err
	}
	defer n.close()
	if !n.isRegular() {
		return nil, nil, pathError("reading", n.sp, unix.EINVAL)
	}
	fd, err := n.open(unix.O_RDONLY | unix.O_NONBLOCK | unix.O_NOCTTY)
	if err != nil {
		return nil, nil, err
	}
	fh := os.NewFile(uintptr(fd), n.sp)
	fi, err := fh.Stat()
	if err != nil || !fi.Mode().IsRegular() {
		fh.Close()
		return nil, nil, pathError("reading", n.sp, cmpErr(err, unix.EINVAL))
	}
	return fh, fi, nil
}

// parseIDFile reads a passwd ("name:x:uid:gid:...") or group
// ("name:x:gid:...") file; malformed lines are skipped.
func parseIDFile(fh io.Reader, passwd bool) *idFile {
	out := &idFile{byID: make(map[uint32]string)}
	if passwd {
		out.users = make(map[string]*User)
	}
	sc := bufio.NewScanner(fh)
	for sc.Scan() {
		fields := strings.Split(sc.Text(), ":")
		if len(fields) < 3 || fields[0] == "" || strings.HasPrefix(fields[0], "#") {
			continue
		}
		id, err := strconv.ParseUint(fields[2], 10, 32)
		if err != nil {
			continue
		}
		if _, dup := out.byID[uint32(id)]; !dup {
			out.byID[uint32(id)] = fields[0]
		}
		if passwd && len(fields) >= 4 {
			gid, err := strconv.ParseUint(fields[3], 10, 32)
			if err == nil {
				home := "/"
				if len(fields) >= 6 && fields[5] != "" {
					home = fields[5]
				}
				u := &User{Name: fields[0], UID: int(id), GID: int(gid), Home: home, Groups: []uint32{uint32(gid)}}
				if len(fields) >= 7 {
					u.Shell = fields[6]
				}
				out.users[fields[0]] = u
			}
		}
	}
	return out
}
