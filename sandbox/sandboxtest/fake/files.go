package fake

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"path"
	"sort"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/tarball"
)

// resolve turns a session path into the real path of the entry it names,
// following every symlink on the way and the final one too when follow is
// set. A symlink leading out of the workspace, even for a moment, is
// ErrInvalid. Missing entries are fine: the path they would have is
// returned. s.mu is held.
func (s *Session) resolve(p string, follow bool) (string, error) {
	abs, err := sandbox.ResolvePath(s.root, p)
	if err != nil {
		return "", err
	}
	todo := s.below(abs)
	var stack []string // components of the resolved path below root
	links := 0
	lastLink := ""
	for len(todo) > 0 {
		c := todo[0]
		todo = todo[1:]
		switch c {
		case "", ".":
			continue
		case "..":
			if len(stack) == 0 {
				return "", fmt.Errorf("path %q leads out of the workspace through symlink %q: %w", p, lastLink, sandbox.ErrInvalid)
			}
			stack = stack[:len(stack)-1]
			continue
		}
		cur := s.join(append(stack, c))
		n := s.files[cur]
		if n == nil || n.typ != sandbox.TypeSymlink || (len(todo) == 0 && !follow) {
			stack = append(stack, c)
			continue
		}
		links++
		if links > maxSymlinks {
			return "", fmt.Errorf("path %q: too many levels of symbolic links: %w", p, sandbox.ErrInvalid)
		}
		lastLink = cur
		var next []string
		if path.IsAbs(n.target) {
			rel, ok := s.underRoot(n.target)
			if !ok {
				return "", fmt.Errorf("path %q leads out of the workspace through symlink %q -> %q: %w", p, cur, n.target, sandbox.ErrInvalid)
			}
			stack = nil
			next = rel
		} else {
			next = strings.Split(n.target, "/")
		}
		todo = append(next, todo...)
	}
	return s.join(stack), nil
}

// below splits a clean absolute path within root into its components
// below root.
func (s *Session) below(abs string) []string {
	rel := strings.TrimPrefix(strings.TrimPrefix(abs, s.root), "/")
	if rel == "" {
		return nil
	}
	return strings.Split(rel, "/")
}

// underRoot returns the components below root of an absolute symlink
// target whose first components name root itself; ok is false otherwise.
func (s *Session) underRoot(target string) ([]string, bool) {
	var comps []string
	for _, c := range strings.Split(target, "/") {
		if c != "" && c != "." {
			comps = append(comps, c)
		}
	}
	for _, rc := range strings.Split(strings.Trim(s.root, "/"), "/") {
		if rc == "" {
			continue // root is "/"
		}
		if len(comps) == 0 || comps[0] != rc {
			return nil, false
		}
		comps = comps[1:]
	}
	return comps, true
}

func (s *Session) join(comps []string) string {
	return path.Join(append([]string{s.root}, comps...)...)
}

// rel returns p (clean, within root) relative to root, "." for root.
func (s *Session) rel(p string) string {
	if p == s.root {
		return "."
	}
	return strings.TrimPrefix(strings.TrimPrefix(p, s.root), "/")
}

// mkdirAll makes p (a resolved path) and its missing parents directories;
// a file in the way is ErrExist. s.mu is held.
func (s *Session) mkdirAll(p string) error {
	cur := s.root
	for _, c := range s.below(p) {
		cur = path.Join(cur, c)
		n := s.files[cur]
		switch {
		case n == nil:
			s.files[cur] = &node{typ: sandbox.TypeDir, mode: 0o755, mtime: s.rt.now()}
		case n.typ != sandbox.TypeDir:
			return fmt.Errorf("%s is not a directory: %w", cur, sandbox.ErrExist)
		}
	}
	return nil
}

// usage is the bytes the workspace's files hold; s.mu is held.
func (s *Session) usage() int64 {
	var n int64
	for _, f := range s.files {
		n += int64(len(f.data))
	}
	return n
}

func (s *Session) diskLimit() int64 {
	if s.spec.Limits.DiskBytes > 0 {
		return s.spec.Limits.DiskBytes
	}
	return DefaultDiskBytes
}

// checkGrow says whether the disk can take grow more bytes; s.mu is held.
func (s *Session) checkGrow(grow int64) error {
	if grow > 0 && s.usage()+grow > s.diskLimit() {
		return fmt.Errorf("no space left on the sandbox's %d-byte disk: %w", s.diskLimit(), sandbox.ErrLimit)
	}
	return nil
}

// ReadFile returns the file's content as it is now.
func (s *Session) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("reading %q: %w", p, err)
	}
	defer s.mu.Unlock()
	data, err := s.readLocked(p)
	if err != nil {
		return nil, fmt.Errorf("reading %q: %w", p, err)
	}
	return io.NopCloser(bytes.NewReader(data)), nil
}

func (s *Session) readLocked(p string) ([]byte, error) {
	r, err := s.resolve(p, true)
	if err != nil {
		return nil, err
	}
	n := s.files[r]
	switch {
	case n == nil:
		return nil, fmt.Errorf("no such file: %w", sandbox.ErrNotFound)
	case n.typ == sandbox.TypeDir:
		return nil, fmt.Errorf("is a directory: %w", sandbox.ErrInvalid)
	}
	return n.data[:len(n.data):len(n.data)], nil
}

// WriteFile creates or replaces a file, creating its parents. A final
// symlink is followed, as open(2) does. The file gets perm's permission
// bits (0 means 0644), also when it existed before.
func (s *Session) WriteFile(ctx context.Context, p string, r io.Reader, perm uint32) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	// Read first, outside the lock; the disk limit bounds how much.
	data, err := io.ReadAll(io.LimitReader(tarball.ContextReader(ctx, r), s.diskLimit()+1))
	if err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if err := s.writeLocked(p, data, perm); err != nil {
		return fmt.Errorf("writing %q: %w", p, err)
	}
	return nil
}

func (s *Session) writeLocked(p string, data []byte, perm uint32) error {
	r, err := s.resolve(p, true)
	if err != nil {
		return err
	}
	if r == s.root {
		return fmt.Errorf("is the workspace root: %w", sandbox.ErrInvalid)
	}
	old := s.files[r]
	if old != nil && old.typ == sandbox.TypeDir {
		return fmt.Errorf("is a directory: %w", sandbox.ErrInvalid)
	}
	var oldLen int64
	if old != nil {
		oldLen = int64(len(old.data))
	}
	if err := s.checkGrow(int64(len(data)) - oldLen); err != nil {
		return err
	}
	if err := s.mkdirAll(path.Dir(r)); err != nil {
		return err
	}
	perm &= 0o777
	if perm == 0 {
		perm = 0o644
	}
	s.files[r] = &node{typ: sandbox.TypeFile, mode: perm, mtime: s.rt.now(), data: data}
	return nil
}

// Stat describes one entry without following a final symlink. Path is
// the absolute form of the path asked about.
func (s *Session) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	if err := s.lock(ctx); err != nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat %q: %w", p, err)
	}
	defer s.mu.Unlock()
	r, err := s.resolve(p, false)
	if err != nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat %q: %w", p, err)
	}
	n := s.files[r]
	if n == nil {
		return sandbox.FileInfo{}, fmt.Errorf("stat %q: %w", p, sandbox.ErrNotFound)
	}
	abs, _ := sandbox.ResolvePath(s.root, p)
	return fileInfo(abs, n), nil
}

func fileInfo(abs string, n *node) sandbox.FileInfo {
	fi := sandbox.FileInfo{
		Name:    path.Base(abs),
		Path:    abs,
		Type:    n.typ,
		Mode:    n.mode,
		ModTime: n.mtime,
	}
	switch n.typ {
	case sandbox.TypeFile:
		fi.Size = int64(len(n.data))
	case sandbox.TypeSymlink:
		fi.Size = int64(len(n.target))
		fi.SymlinkTarget = n.target
	}
	return fi
}

// List returns the entries under a directory (a final symlink is
// followed) in walk order: each directory before its contents, siblings
// sorted by name. Symlinked directories inside are listed, not entered.
// A path that is not a directory is ErrInvalid.
func (s *Session) List(ctx context.Context, p string, depth int) ([]sandbox.FileInfo, error) {
	if err := s.lock(ctx); err != nil {
		return nil, fmt.Errorf("listing %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if depth <= 0 {
		depth = 1
	}
	r, err := s.resolve(p, true)
	if err != nil {
		return nil, fmt.Errorf("listing %q: %w", p, err)
	}
	n := s.files[r]
	switch {
	case n == nil:
		return nil, fmt.Errorf("listing %q: %w", p, sandbox.ErrNotFound)
	case n.typ != sandbox.TypeDir:
		return nil, fmt.Errorf("listing %q: not a directory: %w", p, sandbox.ErrInvalid)
	}
	abs, _ := sandbox.ResolvePath(s.root, p)
	var out []sandbox.FileInfo
	for _, e := range s.walk(r) {
		rel := e // "/a/b" below r
		if r != "/" {
			rel = strings.TrimPrefix(e, r)
		}
		if strings.Count(rel, "/") > depth {
			continue
		}
		out = append(out, fileInfo(path.Join(abs, rel), s.files[e]))
	}
	return out, nil
}

// walk returns the paths below dir (resolved, a directory) in walk order;
// s.mu is held.
func (s *Session) walk(dir string) []string {
	prefix := dir + "/"
	if dir == "/" {
		prefix = "/"
	}
	var out []string
	for p := range s.files {
		if p != dir && strings.HasPrefix(p, prefix) {
			out = append(out, p)
		}
	}
	// NUL sorts before every byte a name may hold, so "a/b" comes before
	// "a-b" and each directory's contents follow it directly.
	sort.Slice(out, func(i, j int) bool {
		return strings.ReplaceAll(out[i], "/", "\x00") < strings.ReplaceAll(out[j], "/", "\x00")
	})
	return out
}

// Symlink makes link a symbolic link to target, as "ln -s target link"
// run in the workspace root would: the way a test plants the links that
// programs make in a real sandbox. link is confined like every session
// path (ErrInvalid out of the workspace); target is kept as given and may
// point anywhere, as a real link's may. ErrNotFound when link's directory
// is missing, ErrExist when something is at link already.
func (s *Session) Symlink(ctx context.Context, target, link string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("making link %q: %w", link, err)
	}
	defer s.mu.Unlock()
	abs, err := s.resolve(link, false)
	if err != nil {
		return fmt.Errorf("making link %q: %w", link, err)
	}
	if parent := s.files[path.Dir(abs)]; parent == nil || parent.typ != sandbox.TypeDir {
		return fmt.Errorf("making link %q: no such directory: %w", link, sandbox.ErrNotFound)
	}
	if s.files[abs] != nil || abs == s.root {
		return fmt.Errorf("making link %q: file exists: %w", link, sandbox.ErrExist)
	}
	s.files[abs] = &node{typ: sandbox.TypeSymlink, mode: 0o777, mtime: s.rt.now(), target: target}
	return nil
}

// Mkdir creates a directory and its parents; an existing directory (or a
// symlink to one) is fine, anything else in the way is ErrExist.
func (s *Session) Mkdir(ctx context.Context, p string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("making directory %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if err := s.mkdirLocked(p); err != nil {
		return fmt.Errorf("making directory %q: %w", p, err)
	}
	return nil
}

func (s *Session) mkdirLocked(p string) error {
	r, err := s.resolve(p, true)
	if err != nil {
		return err
	}
	if n := s.files[r]; n == nil {
		// A dangling symlink is in the way, as mkdir -p finds.
		if l, err := s.resolve(p, false); err == nil && s.files[l] != nil {
			return fmt.Errorf("a dangling symlink is in the way: %w", sandbox.ErrExist)
		}
	}
	return s.mkdirAll(r)
}

// Remove deletes a file, a symlink (not its target) or a directory tree.
func (s *Session) Remove(ctx context.Context, p string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("removing %q: %w", p, err)
	}
	defer s.mu.Unlock()
	if err := s.removeLocked(p); err != nil {
		return fmt.Errorf("removing %q: %w", p, err)
	}
	return nil
}

func (s *Session) removeLocked(p string) error {
	r, err := s.resolve(p, false)
	if err != nil {
		return err
	}
	if r == s.root {
		return fmt.Errorf("the workspace root cannot be removed: %w", sandbox.ErrInvalid)
	}
	if s.files[r] == nil {
		return fmt.Errorf("no such file or directory: %w", sandbox.ErrNotFound)
	}
	for _, c := range s.walk(r) {
		delete(s.files, c)
	}
	delete(s.files, r)
	return nil
}

// Move renames src to dst, creating dst's parents. A symlink is moved,
// not its target. An existing dst is ErrExist; moving a directory into
// itself or the root is ErrInvalid.
func (s *Session) Move(ctx context.Context, src, dst string) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("moving %q to %q: %w", src, dst, err)
	}
	defer s.mu.Unlock()
	if err := s.moveLocked(src, dst); err != nil {
		return fmt.Errorf("moving %q to %q: %w", src, dst, err)
	}
	return nil
}

func (s *Session) moveLocked(src, dst string) error {
	rs, err := s.resolve(src, false)
	if err != nil {
		return err
	}
	rd, err := s.resolve(dst, false)
	if err != nil {
		return err
	}
	switch {
	case rs == s.root:
		return fmt.Errorf("the workspace root cannot be moved: %w", sandbox.ErrInvalid)
	case s.files[rs] == nil:
		return fmt.Errorf("source: no such file or directory: %w", sandbox.ErrNotFound)
	case s.files[rd] != nil:
		return fmt.Errorf("destination already exists: %w", sandbox.ErrExist)
	case sandbox.Within(rs, rd):
		return fmt.Errorf("cannot move a directory into itself: %w", sandbox.ErrInvalid)
	}
	if err := s.mkdirAll(path.Dir(rd)); err != nil {
		return err
	}
	for _, c := range s.walk(rs) {
		s.files[rd+strings.TrimPrefix(c, rs)] = s.files[c]
		delete(s.files, c)
	}
	s.files[rd] = s.files[rs]
	delete(s.files, rs)
	return nil
}

// SnapshotWorkspace writes the workspace as a tar stream: members
// relative to the root in walk order, directories with a trailing "/",
// times truncated to the second.
func (s *Session) SnapshotWorkspace(ctx context.Context, w io.Writer) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("snapshotting workspace: %w", err)
	}
	type entry struct {
		rel string
		n   node
	}
	var entries []entry
	for _, p := range s.walk(s.root) {
		entries = append(entries, entry{s.rel(p), *s.files[p]})
	}
	s.mu.Unlock()

	tw := tar.NewWriter(w)
	for _, e := range entries {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr := &tar.Header{Name: e.rel, Mode: int64(e.n.mode), ModTime: e.n.mtime.Truncate(time.Second)}
		switch e.n.typ {
		case sandbox.TypeDir:
			hdr.Typeflag = tar.TypeDir
			hdr.Name += "/"
		case sandbox.TypeSymlink:
			hdr.Typeflag = tar.TypeSymlink
			hdr.Linkname = e.n.target
		default:
			hdr.Typeflag = tar.TypeReg
			hdr.Size = int64(len(e.n.data))
		}
		if err := tw.WriteHeader(hdr); err != nil {
			return fmt.Errorf("snapshotting workspace: %w", err)
		}
		if _, err := tw.Write(e.n.data); err != nil {
			return fmt.Errorf("snapshotting workspace: %w", err)
		}
	}
	if err := tw.Close(); err != nil {
		return fmt.Errorf("snapshotting workspace: %w", err)
	}
	return nil
}

// RestoreWorkspace extracts a tar stream into the workspace with the same
// rules as tarball.Extract: every member passes tarball.CheckHeader, no
// member is written through a symlink, a later member replaces an earlier
// entry, modes are masked to 0777 and hard links (to earlier members of
// the stream only) become copies. Entries the stream does not name are
// kept.
func (s *Session) RestoreWorkspace(ctx context.Context, r io.Reader) error {
	if err := s.lock(ctx); err != nil {
		return fmt.Errorf("restoring workspace: %w", err)
	}
	s.mu.Unlock()
	tr := tar.NewReader(r)
	written := make(map[string]bool) // regular files from this stream
	for {
		if err := ctx.Err(); err != nil {
			return err
		}
		hdr, err := tr.Next()
		if err == io.EOF {
			return nil
		}
		if err != nil {
			return fmt.Errorf("restoring workspace: reading tar stream: %w: %w", err, sandbox.ErrInvalid)
		}
		name, err := tarball.CheckHeader(hdr)
		if err != nil {
			return fmt.Errorf("restoring workspace: %w", err)
		}
		var data []byte
		if isRegular(hdr) {
			if hdr.Size > s.diskLimit() {
				return fmt.Errorf("restoring workspace: tar member %q: %d bytes do not fit the %d-byte disk: %w", hdr.Name, hdr.Size, s.diskLimit(), sandbox.ErrLimit)
			}
			if data, err = io.ReadAll(tarball.ContextReader(ctx, tr)); err != nil {
				return fmt.Errorf("restoring workspace: tar member %q: %w: %w", hdr.Name, err, sandbox.ErrInvalid)
			}
		}
		if err := s.restoreMember(ctx, hdr, name, data, written); err != nil {
			return fmt.Errorf("restoring workspace: %w", err)
		}
	}
}

func isRegular(hdr *tar.Header) bool {
	switch hdr.Typeflag {
	case tar.TypeReg, tar.TypeCont, tar.TypeGNUSparse:
		return true
	case tar.TypeRegA:
		return !strings.HasSuffix(hdr.Name, "/")
	}
	return false
}

func (s *Session) restoreMember(ctx context.Context, hdr *tar.Header, name string, data []byte, written map[string]bool) error {
	if name == "." {
		return nil
	}
	if err := s.lock(ctx); err != nil {
		return err
	}
	defer s.mu.Unlock()
	bad := func(format string, args ...any) error {
		return fmt.Errorf("tar member %q: %s: %w", hdr.Name, fmt.Sprintf(format, args...), sandbox.ErrInvalid)
	}
	// Parents: real directories only, never through a symlink.
	cur := s.root
	comps := strings.Split(name, "/")
	for _, c := range comps[:len(comps)-1] {
		cur = path.Join(cur, c)
		n := s.files[cur]
		switch {
		case n == nil:
			s.files[cur] = &node{typ: sandbox.TypeDir, mode: 0o755, mtime: s.rt.now()}
		case n.typ == sandbox.TypeSymlink:
			return bad("parent %q is a symlink; refusing to write through it", s.rel(cur))
		case n.typ != sandbox.TypeDir:
			return bad("parent %q is not a directory", s.rel(cur))
		}
	}
	p := path.Join(s.root, name)
	mode := uint32(hdr.Mode) & 0o777
	nn := &node{mode: mode, mtime: hdr.ModTime}
	switch {
	case isRegular(hdr):
		nn.typ, nn.data = sandbox.TypeFile, data
	case hdr.Typeflag == tar.TypeDir || hdr.Typeflag == tar.TypeRegA:
		nn.typ = sandbox.TypeDir
	case hdr.Typeflag == tar.TypeSymlink:
		nn.typ, nn.target = sandbox.TypeSymlink, hdr.Linkname
	case hdr.Typeflag == tar.TypeLink:
		target := path.Join(s.root, path.Clean(hdr.Linkname))
		t := s.files[target]
		if !written[target] || t == nil || t.typ != sandbox.TypeFile {
			return bad("hard link target %q is not a regular file written earlier by this stream", hdr.Linkname)
		}
		// A copy: the fake has no inodes to share, and nodes must not
		// share a backing array that appends would write through.
		nn.typ, nn.data, nn.mode = sandbox.TypeFile, bytes.Clone(t.data), t.mode
	default:
		return bad("unsupported member type %q", string(hdr.Typeflag))
	}
	old := s.files[p]
	if old != nil && old.typ == sandbox.TypeDir {
		if nn.typ == sandbox.TypeDir {
			old.mode, old.mtime = nn.mode, nn.mtime
			return nil
		}
		if len(s.walk(p)) > 0 {
			return fmt.Errorf("tar member %q: a directory that is not empty is in the way: %w", hdr.Name, sandbox.ErrExist)
		}
	}
	var oldLen int64
	if old != nil {
		oldLen = int64(len(old.data))
	}
	if err := s.checkGrow(int64(len(nn.data)) - oldLen); err != nil {
		return fmt.Errorf("tar member %q: %w", hdr.Name, err)
	}
	s.files[p] = nn
	if nn.typ == sandbox.TypeFile {
		written[p] = true
	} else {
		delete(written, p)
	}
	return nil
}
