package guest

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"google.golang.org/protobuf/types/known/timestamppb"

	pb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/guest/gen/filesystem/filesystemconnect"
	"github.com/cove-sandbox/cove/sandbox"
)

// fsService serves envd's filesystem.Filesystem service and the /files and
// /cove/tar HTTP endpoints. Every path goes through Server.resolve, so it
// stays inside the sandbox root (and the directory a client confines its
// request to with ConfineHeader: resolveCtx); replies and error messages
// name sandbox paths only, never where Root lives on the host.
//
// The zero value (plus srv) is ready to use: NewServer builds it as
// &fsService{srv: s}.
type fsService struct {
	srv *Server

	// names caches the sandbox's /etc/passwd and /etc/group.
	names idNames

	// mu guards watchers.
	mu       sync.Mutex
	watchers map[string]*pollWatcher
}

var _ filesystemconnect.FilesystemHandler = (*fsService)(nil)

// Stat describes one entry without following a final symlink (envd's
// entryInfo uses lstat).
func (f *fsService) Stat(ctx context.Context, req *connect.Request[pb.StatRequest]) (*connect.Response[pb.StatResponse], error) {
	sp, hp, err := f.srv.resolveCtx(ctx, req.Msg.GetPath(), false)
	if err != nil {
		return nil, f.rpcError(err)
	}
	e, err := f.entryInfo(sp, hp)
	if err != nil {
		return nil, f.rpcError(err)
	}
	return connect.NewResponse(&pb.StatResponse{Entry: e}), nil
}

// MakeDir creates a directory and its parents. As in envd, an existing
// directory is AlreadyExists and an existing non-directory is
// InvalidArgument.
func (f *fsService) MakeDir(ctx context.Context, req *connect.Request[pb.MakeDirRequest]) (*connect.Response[pb.MakeDirResponse], error) {
	sp, hp, err := f.srv.resolveCtx(ctx, req.Msg.GetPath(), true)
	if err != nil {
		return nil, f.rpcError(err)
	}
	fi, err := os.Stat(hp)
	switch {
	case err == nil && fi.IsDir():
		return nil, f.rpcError(fmt.Errorf("directory %q already exists: %w", sp, sandbox.ErrExist))
	case err == nil:
		return nil, f.rpcError(fmt.Errorf("%q already exists and is not a directory; remove it first or pick another path: %w", sp, sandbox.ErrInvalid))
	case !errors.Is(err, fs.ErrNotExist):
		return nil, f.rpcError(pathError("checking", sp, err))
	}
	o, err := f.ownerFor(req.Header(), "")
	if err != nil {
		return nil, f.rpcError(err)
	}
	if err := f.mkdirAll(sp, hp, o); err != nil {
		return nil, f.rpcError(err)
	}
	e, err := f.entryInfo(sp, hp)
	if err != nil {
		return nil, f.rpcError(err)
	}
	return connect.NewResponse(&pb.MakeDirResponse{Entry: e}), nil
}

// Move renames source to destination, creating destination's parents.
// Like rename(2) (and envd), an existing destination file is replaced.
func (f *fsService) Move(ctx context.Context, req *connect.Request[pb.MoveRequest]) (*connect.Response[pb.MoveResponse], error) {
	src, srcHost, err := f.srv.resolveCtx(ctx, req.Msg.GetSource(), false)
	if err != nil {
		return nil, f.rpcError(err)
	}
	dst, dstHost, err := f.srv.resolveCtx(ctx, req.Msg.GetDestination(), false)
	if err != nil {
		return nil, f.rpcError(err)
	}
	if src == "/" || dst == "/" {
		return nil, f.rpcError(fmt.Errorf("cannot move %q to %q: the sandbox root cannot be moved or replaced: %w", src, dst, sandbox.ErrInvalid))
	}
	if _, err := os.Lstat(srcHost); err != nil {
		return nil, f.rpcError(pathError("moving", src, err))
	}
	o, err := f.ownerFor(req.Header(), "")
	if err != nil {
		return nil, f.rpcError(err)
	}
	if err := f.mkdirAll(path.Dir(dst), filepath.Dir(dstHost), o); err != nil {
		return nil, f.rpcError(err)
	}
	if err := os.Rename(srcHost, dstHost); err != nil {
		return nil, f.rpcError(fmt.Errorf("moving %q to %q: %w", src, dst, mapOSError(unwrapOS(err))))
	}
	e, err := f.entryInfo(dst, dstHost)
	if err != nil {
		return nil, f.rpcError(err)
	}
	return connect.NewResponse(&pb.MoveResponse{Entry: e}), nil
}

// ListDir lists a directory (following it if it is a symlink) down to
// depth levels; 0 means 1. Entries keep the requested path as their
// prefix, come in lexical pre-order, and symlinked directories are listed
// but never descended into.
func (f *fsService) ListDir(ctx context.Context, req *connect.Request[pb.ListDirRequest]) (*connect.Response[pb.ListDirResponse], error) {
	depth := int(req.Msg.GetDepth())
	if depth <= 0 {
		depth = 1
	}
	sp, _, err := f.srv.resolveCtx(ctx, req.Msg.GetPath(), false)
	if err != nil {
		return nil, f.rpcError(err)
	}
	_, hp, err := f.srv.resolveCtx(ctx, req.Msg.GetPath(), true)
	if err != nil {
		return nil, f.rpcError(err)
	}
	fi, err := os.Stat(hp)
	if err != nil {
		return nil, f.rpcError(pathError("listing", sp, err))
	}
	if !fi.IsDir() {
		return nil, f.rpcError(fmt.Errorf("listing %q: it is not a directory; use Stat for a single file: %w", sp, sandbox.ErrInvalid))
	}
	var entries []*pb.EntryInfo
	if err := f.walk(ctx, sp, hp, 1, depth, &entries); err != nil {
		return nil, f.rpcError(err)
	}
	return connect.NewResponse(&pb.ListDirResponse{Entries: entries}), nil
}

// walk appends the entries of the directory hp (sandbox path sp), which is
// at level-1 below the listed directory, recursing while level < depth.
func (f *fsService) walk(ctx context.Context, sp, hp string, level, depth int, out *[]*pb.EntryInfo) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	des, err := os.ReadDir(hp)
	if err != nil {
		if level > 1 && (errors.Is(err, fs.ErrPermission) || errors.Is(err, fs.ErrNotExist)) {
			// An unreadable or vanished subdirectory is still listed
			// itself; its contents are skipped rather than failing the
			// whole listing.
			return nil
		}
		return pathError("listing", sp, err)
	}
	for _, de := range des {
		csp, chp := path.Join(sp, de.Name()), filepath.Join(hp, de.Name())
		fi, err := de.Info()
		if errors.Is(err, fs.ErrNotExist) {
			continue // removed since ReadDir
		}
		if err != nil {
			return pathError("listing", csp, err)
		}
		*out = append(*out, f.entryFromInfo(csp, chp, fi))
		if fi.IsDir() && level < depth {
			if err := f.walk(ctx, csp, chp, level+1, depth, out); err != nil {
				return err
			}
		}
	}
	return nil
}

// Remove deletes a file, a symlink (not its target) or a directory tree.
// As in envd (os.RemoveAll), a missing path is not an error. The sandbox
// root itself cannot be removed.
func (f *fsService) Remove(ctx context.Context, req *connect.Request[pb.RemoveRequest]) (*connect.Response[pb.RemoveResponse], error) {
	sp, hp, err := f.srv.resolveCtx(ctx, req.Msg.GetPath(), false)
	if err != nil {
		return nil, f.rpcError(err)
	}
	if sp == "/" {
		return nil, f.rpcError(fmt.Errorf("refusing to remove the sandbox root %q; remove the entries below it instead: %w", sp, sandbox.ErrInvalid))
	}
	if err := os.RemoveAll(hp); err != nil {
		return nil, f.rpcError(fmt.Errorf("removing %q: %w", sp, mapOSError(unwrapOS(err))))
	}
	return connect.NewResponse(&pb.RemoveResponse{}), nil
}

// entryInfo describes the entry at sandbox path sp (host path hp) without
// following a final symlink.
func (f *fsService) entryInfo(sp, hp string) (*pb.EntryInfo, error) {
	fi, err := os.Lstat(hp)
	if err != nil {
		return nil, pathError("reading", sp, err)
	}
	return f.entryFromInfo(sp, hp, fi), nil
}

// entryFromInfo builds an EntryInfo the way envd does: type and mode
// (permission bits only) of a symlink are its target's (type unspecified
// when the target is missing or outside the sandbox), while size and the
// permissions string ("Lrwxrwxrwx") are the link's own.
func (f *fsService) entryFromInfo(sp, hp string, fi fs.FileInfo) *pb.EntryInfo {
	name := path.Base(sp)
	e := &pb.EntryInfo{
		Name:         name,
		Path:         sp,
		Size:         fi.Size(),
		Permissions:  fi.Mode().String(),
		ModifiedTime: timestamppb.New(fi.ModTime()),
	}
	target := fi
	if fi.Mode()&fs.ModeSymlink != 0 {
		target = nil
		if t, err := os.Readlink(hp); err == nil {
			e.SymlinkTarget = &t
		}
		if _, thp, err := f.srv.resolve(sp, true); err == nil {
			if ti, err := os.Lstat(thp); err == nil {
				target = ti
			}
		}
	}
	if target != nil {
		e.Type = fileType(target.Mode())
		e.Mode = uint32(target.Mode().Perm())
	}
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		e.Owner = f.names.name(f.srv, "/etc/passwd", st.Uid)
		e.Group = f.names.name(f.srv, "/etc/group", st.Gid)
	}
	return e
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

// mkdirAll creates the directory hp (sandbox path sp) and any missing
// parents with mode 0755, handing the ones it creates to o.
func (f *fsService) mkdirAll(sp, hp string, o *owner) error {
	// Find the directories that do not exist yet, deepest last, so only
	// those are chowned.
	var missing []string
	for p := hp; sandbox.Within(f.srv.cfg.Root, p); p = filepath.Dir(p) {
		if _, err := os.Lstat(p); err == nil {
			break
		}
		missing = append(missing, p)
		if p == f.srv.cfg.Root {
			break
		}
	}
	if err := os.MkdirAll(hp, 0o755); err != nil {
		return fmt.Errorf("creating directory %q: %w", sp, mapOSError(unwrapOS(err)))
	}
	if o != nil {
		for i := len(missing) - 1; i >= 0; i-- {
			if err := os.Lchown(missing[i], o.uid, o.gid); err != nil {
				return fmt.Errorf("handing directory %q to uid %d: %w", toSandbox(f.srv.cfg.Root, missing[i]), o.uid, mapOSError(unwrapOS(err)))
			}
		}
	}
	return nil
}

// pathError describes err from an operation on sandbox path sp: the OS
// error's own (host) path is dropped and the sandbox sentinel wrapped.
func pathError(op, sp string, err error) error {
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
// but one from deeper down (resolve, the tarball package) might not.
func (f *fsService) scrub(err error) error {
	root := f.srv.cfg.Root
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
func (f *fsService) internal(err error) error {
	id := newID()
	f.srv.log.Error("filesystem request failed", "error_id", id, "error", err)
	return &scrubbedError{msg: fmt.Sprintf("internal error %s: %s", id, err.Error()), err: err}
}

// rpcError turns err into the Connect error for a reply.
func (f *fsService) rpcError(err error) error {
	switch {
	case errors.Is(err, context.Canceled):
		return connect.NewError(connect.CodeCanceled, err)
	case errors.Is(err, context.DeadlineExceeded):
		return connect.NewError(connect.CodeDeadlineExceeded, err)
	}
	if !hasSentinel(err) {
		err = mapOSError(err)
	}
	err = f.scrub(err)
	if codeFor(err) == connect.CodeInternal {
		var ce *connect.Error
		if !errors.As(err, &ce) {
			err = f.internal(err)
		}
	}
	return connectError(err)
}

// hasSentinel reports whether err wraps one of the sandbox sentinels.
func hasSentinel(err error) bool { return codeFor(err) != connect.CodeInternal }

// statOwner returns the owner of a file.
func statOwner(fi fs.FileInfo) (owner, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return owner{}, false
	}
	return owner{int(st.Uid), int(st.Gid)}, true
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
	users map[string]*sysUser
}

// name returns the name of id in the sandbox file (/etc/passwd or
// /etc/group), or the id in decimal when it has none.
func (n *idNames) name(s *Server, file string, id uint32) string {
	if name, ok := n.load(s, file).byID[id]; ok {
		return name
	}
	return strconv.FormatUint(uint64(id), 10)
}

// user looks a user name (or a numeric uid) up in the sandbox's
// /etc/passwd; a uid it does not list is a user of that uid and gid with
// / as home.
func (n *idNames) user(s *Server, name string) (*sysUser, bool) {
	f := n.load(s, "/etc/passwd")
	if u, ok := f.users[name]; ok {
		return u, true
	}
	if id, err := strconv.ParseUint(name, 10, 31); err == nil {
		if u, ok := f.users[f.byID[uint32(id)]]; ok {
			return u, true
		}
		return &sysUser{name: name, uid: int(id), gid: int(id), home: "/", groups: []uint32{uint32(id)}}, true
	}
	return nil, false
}

func (n *idNames) load(s *Server, file string) *idFile {
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
	// Resolve through the sandbox so a symlinked /etc/passwd cannot make
	// the daemon read a host file.
	var fi fs.FileInfo
	_, hp, err := s.resolve(file, true)
	if err == nil {
		fi, err = os.Stat(hp)
	}
	if err != nil {
		cur = &idFile{}
	} else if cur == nil || !fi.ModTime().Equal(cur.mtime) || fi.Size() != cur.size {
		cur = parseIDFile(hp, file == "/etc/passwd")
		cur.mtime, cur.size = fi.ModTime(), fi.Size()
	}
	cur.checked = now
	n.files[file] = cur
	return cur
}

// parseIDFile reads a passwd ("name:x:uid:gid:...") or group
// ("name:x:gid:...") file; malformed lines are skipped.
func parseIDFile(hp string, passwd bool) *idFile {
	out := &idFile{byID: make(map[uint32]string)}
	if passwd {
		out.users = make(map[string]*sysUser)
	}
	fh, err := os.Open(hp)
	if err != nil {
		return out
	}
	defer fh.Close()
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
				out.users[fields[0]] = &sysUser{name: fields[0], uid: int(id), gid: int(gid), home: home, groups: []uint32{uint32(gid)}}
			}
		}
	}
	return out
}
