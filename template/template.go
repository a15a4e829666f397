// Package template builds, imports and stores root filesystems for
// sandboxes.
//
// A template is a root filesystem plus the defaults a sandbox starts with
// (environment, working directory, user). A Store keeps them in one host
// directory, content-addressed, and names them:
//
//	DIR/index.json                        names -> digests (replaced atomically)
//	DIR/blobs/sha256-<hex>/rootfs/        the root filesystem, shared read-only by sandboxes
//	DIR/blobs/sha256-<hex>/config.json    Config, Binds, size, source, creation time
//	DIR/tmp/                              builds and imports in progress
//	DIR/.lock                             flock(2): serialises changes across processes
//
// Templates come from three places: Build (Debian packages through
// mmdebstrap or debootstrap), Import (a `docker save` or OCI image layout
// tarball), and the built-in "host" template (the host's /usr bound
// read-only under a small generated /etc; see Store.Host).
//
// Every template's /etc/passwd has the sandbox user, uid 1000 (see
// Store.Import for the one exception). The store directory is private
// (0700): root filesystems keep their setuid binaries, which must not be
// reachable by other host users.
package template

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/mountinfo"
)

// HostName is the name of the built-in template made from the host's own
// /usr; it always exists and cannot be removed.
const HostName = "host"

// Config holds the defaults a sandbox made from a template starts with.
type Config struct {
	// Env is added to every process's environment (the sandbox spec's
	// own Env wins).
	Env map[string]string `json:"env,omitempty"`
	// Workdir is the default working directory, "" for the runtime's
	// (the workspace root).
	Workdir string `json:"workdir,omitempty"`
	// User is the default user (a name or uid, optionally followed by
	// ":group", each in the portable set of sandbox.ValidUserName), ""
	// for the runtime's unprivileged `user`, uid 1000. Runtimes use the
	// user part; the group comes from the sandbox's /etc/passwd.
	User string `json:"user,omitempty"`
}

// Template is a stored root filesystem. Its files must not be changed:
// sandboxes mount RootFS read-only as the lower layer of an overlay.
type Template struct {
	// Name is what users call it ("host", "python").
	Name string `json:"name"`
	// Digest identifies the content: "sha256:" and the hex SHA-256 of a
	// canonical manifest of the tree (every entry's path, type, mode,
	// owner, file content hash or link target, in byte order; times
	// excluded) followed by Config and Binds. The same content always gets
	// the same digest; two builds of the same packages usually differ
	// (logs, caches with dates).
	Digest string `json:"digest"`
	// RootFS is the host path of the root filesystem directory.
	RootFS string `json:"rootfs"`
	// Binds lists host directories the runtime must bind read-only at the
	// same path inside the sandbox (the host template's /usr); empty for
	// self-contained templates.
	Binds []string `json:"binds,omitempty"`
	// Config holds the sandbox defaults.
	Config Config `json:"config"`
	// Size is the total size in bytes of the regular files in RootFS
	// (each hard-linked file counted once; Binds not included).
	Size int64 `json:"size"`
	// Created is when the name was given to this content.
	Created time.Time `json:"created"`
	// Source says where the content came from ("debian bookworm
	// minbase + git", "image alpine.tar", "host /usr").
	Source string `json:"source,omitempty"`
}

// Store keeps templates in one host directory. It is safe for concurrent
// use by several goroutines and processes: changes take an exclusive
// flock on DIR/.lock, reads a shared one.
type Store struct {
	dir string
}

// Open opens the store in dir, creating it (mode 0700) when missing, and
// removes what crashed builds and imports left in DIR/tmp.
func Open(dir string) (*Store, error) {
	if dir == "" {
		return nil, fmt.Errorf("opening template store: empty directory: %w", sandbox.ErrInvalid)
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, fmt.Errorf("opening template store %s: %w", dir, err)
	}
	s := &Store{dir: abs}
	for _, d := range []string{abs, s.path("blobs"), s.path("tmp")} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return nil, fmt.Errorf("opening template store %s: %w", abs, err)
		}
	}
	if err := os.Chmod(abs, 0o700); err != nil {
		return nil, fmt.Errorf("opening template store %s: %w", abs, err)
	}
	s.cleanTmp()
	return s, nil
}

// Dir is the store's directory.
func (s *Store) Dir() string { return s.dir }

func (s *Store) path(elem ...string) string {
	return filepath.Join(append([]string{s.dir}, elem...)...)
}

var nameRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$`) })

// ValidName returns an error wrapping sandbox.ErrInvalid unless name can
// name a template: 1 to 64 letters, digits, '.', '_' or '-', starting with
// a letter or digit.
func ValidName(name string) error {
	if !nameRE().MatchString(name) {
		return fmt.Errorf("template name %q: use 1 to 64 letters, digits, '.', '_' or '-', starting with a letter or digit: %w", name, sandbox.ErrInvalid)
	}
	return nil
}

// Get returns the named template. "host" is prepared on first use (see
// Host). An unknown name is an error wrapping sandbox.ErrNotFound.
func (s *Store) Get(name string) (*Template, error) {
	if name == HostName {
		return s.Host()
	}
	if err := ValidName(name); err != nil {
		return nil, err
	}
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	r, ok := idx.Refs[name]
	if !ok {
		return nil, fmt.Errorf("template %q: %w; `cove template ls` lists the templates", name, sandbox.ErrNotFound)
	}
	return s.load(name, r)
}

// ByDigest returns the template with this content, named after the first
// name (in byte order) that refers to it, "host" for a generation of the
// host template, or "" when no name does any more (content kept because a
// sandbox uses it). A runtime that recorded a sandbox's Template.Digest
// uses it to find the same files again after the name was given to other
// content or the host template was made anew. Unknown content is
// sandbox.ErrNotFound.
func (s *Store) ByDigest(digest string) (*Template, error) {
	dir, err := s.blobDir(digest)
	if err != nil {
		return nil, err
	}
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	if _, err := os.Stat(dir); err != nil {
		return nil, fmt.Errorf("template content %s: %w; `cove template ls` lists the templates", digest, sandbox.ErrNotFound)
	}
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	name := ""
	if idx.Host != nil && idx.Host.Digest == digest {
		name = HostName
	}
	for n, r := range idx.Refs {
		if r.Digest == digest && (name == "" || name != HostName && n < name) {
			name = n
		}
	}
	r := ref{Digest: digest}
	if name != "" && name != HostName {
		r = idx.Refs[name]
	}
	return s.load(name, r)
}

// List returns every template: "host" first, then the others by name. A
// template whose files are damaged is listed with only its name and
// digest, and a Source that says so.
func (s *Store) List() ([]Template, error) {
	host, err := s.Host()
	if err != nil {
		return nil, err
	}
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	names := make([]string, 0, len(idx.Refs))
	for n := range idx.Refs {
		names = append(names, n)
	}
	sort.Strings(names)
	out := []Template{*host}
	for _, n := range names {
		r := idx.Refs[n]
		t, err := s.load(n, r)
		if err != nil {
			t = &Template{Name: n, Digest: r.Digest, Created: r.Created, Source: fmt.Sprintf("damaged; remove it with `cove template rm %s`", n)}
		}
		out = append(out, *t)
	}
	return out, nil
}

// Remove deletes the name. inUse is asked, with the template's digest,
// whether a sandbox (running or stopped) uses it; while it says true the
// removal is refused with an error wrapping sandbox.ErrState, even when
// another name shares the content. The content is deleted once no name
// refers to it. Remove also deletes any other unnamed content that inUse
// says is free (older generations of the host template, leftovers).
// "host" cannot be removed (sandbox.ErrInvalid); an unknown name is
// sandbox.ErrNotFound. A nil inUse means nothing is in use.
func (s *Store) Remove(name string, inUse func(digest string) bool) error {
	if inUse == nil {
		inUse = func(string) bool { return false }
	}
	if name == HostName {
		return fmt.Errorf("removing template %q: the host template is built in and cannot be removed: %w", name, sandbox.ErrInvalid)
	}
	if err := ValidName(name); err != nil {
		return err
	}
	unlock, err := s.lock(true)
	if err != nil {
		return err
	}
	idx, err := s.readIndex()
	if err != nil {
		unlock()
		return err
	}
	r, ok := idx.Refs[name]
	if !ok {
		unlock()
		return fmt.Errorf("removing template %q: %w; `cove template ls` lists the templates", name, sandbox.ErrNotFound)
	}
	if inUse(r.Digest) {
		unlock()
		return fmt.Errorf("removing template %q: a sandbox uses it; delete the sandboxes made from it (`cove sandbox ls`, `cove sandbox rm`) and retry: %w", name, sandbox.ErrState)
	}
	delete(idx.Refs, name)
	if err := s.writeIndex(idx); err != nil {
		unlock()
		return fmt.Errorf("removing template %q: %w", name, err)
	}
	// Move unreferenced content into tmp while locked (a rename, so no
	// reader ever sees half a tree), delete it after.
	trash := s.unreferenced(idx, inUse)
	unlock()
	var first error
	for _, d := range trash {
		if err := removeTree(d); err != nil && first == nil {
			first = fmt.Errorf("removing template %q: deleting its files: %w", name, err)
		}
	}
	return first
}

// unreferenced moves every blob that neither a name nor the host template
// refers to, and that inUse does not claim, into tmp and returns the new
// paths. The caller holds the exclusive lock.
func (s *Store) unreferenced(idx *index, inUse func(string) bool) []string {
	keep := map[string]bool{}
	for _, r := range idx.Refs {
		keep[r.Digest] = true
	}
	if idx.Host != nil {
		keep[idx.Host.Digest] = true
	}
	entries, _ := os.ReadDir(s.path("blobs"))
	var trash []string
	for _, e := range entries {
		d, ok := blobDigest(e.Name())
		if !ok || keep[d] || inUse(d) {
			continue
		}
		dst, err := s.tempDir("trash")
		if err != nil {
			continue
		}
		os.Remove(dst)
		if err := os.Rename(s.path("blobs", e.Name()), dst); err == nil {
			trash = append(trash, dst)
		}
	}
	return trash
}

// load reads the blob behind a ref. The caller holds a lock.
func (s *Store) load(name string, r ref) (*Template, error) {
	dir, err := s.blobDir(r.Digest)
	if err != nil {
		return nil, fmt.Errorf("template %q: %w", name, err)
	}
	m, err := readMeta(dir)
	if err != nil {
		return nil, fmt.Errorf("template %q: its files are damaged (%v); remove it with `cove template rm %s` and build or import it again: %w", name, err, name, sandbox.ErrNotFound)
	}
	created := r.Created
	if created.IsZero() {
		created = m.Created
	}
	return &Template{
		Name:    name,
		Digest:  r.Digest,
		RootFS:  filepath.Join(dir, "rootfs"),
		Binds:   m.Binds,
		Config:  m.Config,
		Size:    m.Size,
		Created: created,
		Source:  m.Source,
	}, nil
}

// index is DIR/index.json.
type index struct {
	Refs map[string]ref `json:"refs"`
	// Host is the current generation of the host template.
	Host *hostRef `json:"host,omitempty"`
}

type ref struct {
	Digest  string    `json:"digest"`
	Created time.Time `json:"created"`
}

type hostRef struct {
	// Stamp summarises the host files the template was made from; a
	// different stamp means it must be made again.
	Stamp  string `json:"stamp"`
	Digest string `json:"digest"`
}

// meta is a blob's config.json.
type meta struct {
	Config  Config    `json:"config"`
	Binds   []string  `json:"binds,omitempty"`
	Size    int64     `json:"size"`
	Source  string    `json:"source,omitempty"`
	Created time.Time `json:"created"`
}

func readMeta(blob string) (*meta, error) {
	b, err := os.ReadFile(filepath.Join(blob, "config.json"))
	if err != nil {
		return nil, err
	}
	var m meta
	if err := json.Unmarshal(b, &m); err != nil {
		return nil, fmt.Errorf("config.json: %w", err)
	}
	return &m, nil
}

func (s *Store) readIndex() (*index, error) {
	idx := &index{Refs: map[string]ref{}}
	b, err := os.ReadFile(s.path("index.json"))
	if errors.Is(err, fs.ErrNotExist) {
		return idx, nil
	}
	if err != nil {
		return nil, fmt.Errorf("reading template index: %w", err)
	}
	if err := json.Unmarshal(b, idx); err != nil {
		return nil, fmt.Errorf("reading template index %s: %v; fix or delete the file: %w", s.path("index.json"), err, sandbox.ErrInvalid)
	}
	if idx.Refs == nil {
		idx.Refs = map[string]ref{}
	}
	return idx, nil
}

// writeIndex replaces index.json atomically. The caller holds the
// exclusive lock.
func (s *Store) writeIndex(idx *index) error {
	b, err := json.MarshalIndent(idx, "", "  ")
	if err != nil {
		return err
	}
	return writeFileAtomic(s.path("index.json"), append(b, '\n'), 0o600)
}

// writeFileAtomic writes data to a temporary file beside name, syncs it
// and renames it over name.
func writeFileAtomic(name string, data []byte, perm fs.FileMode) error {
	f, err := os.CreateTemp(filepath.Dir(name), "."+filepath.Base(name)+".*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(data)
	if err == nil {
		err = f.Chmod(perm)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, name)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// lock takes the store's flock, exclusive or shared, and returns its
// release.
func (s *Store) lock(exclusive bool) (unlock func(), err error) {
	f, err := os.OpenFile(s.path(".lock"), os.O_RDWR|os.O_CREATE|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return nil, fmt.Errorf("locking template store: %w", err)
	}
	how := syscall.LOCK_SH
	if exclusive {
		how = syscall.LOCK_EX
	}
	for {
		err = syscall.Flock(int(f.Fd()), how)
		if err != syscall.EINTR {
			break
		}
	}
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("locking template store: %w", err)
	}
	return func() { f.Close() }, nil // closing the last fd releases the flock
}

var digestRE = sync.OnceValue(func() *regexp.Regexp { return regexp.MustCompile(`^sha256:[0-9a-f]{64}$`) })

// blobDir is the directory of the blob with this digest.
func (s *Store) blobDir(digest string) (string, error) {
	if !digestRE().MatchString(digest) {
		return "", fmt.Errorf("malformed digest %q in the template index: %w", digest, sandbox.ErrInvalid)
	}
	return s.path("blobs", "sha256-"+strings.TrimPrefix(digest, "sha256:")), nil
}

// blobDigest is the digest of a blob directory's name.
func blobDigest(dirName string) (string, bool) {
	d := "sha256:" + strings.TrimPrefix(dirName, "sha256-")
	return d, strings.HasPrefix(dirName, "sha256-") && digestRE().MatchString(d)
}

// tempDir makes a new directory in DIR/tmp named for its kind and this
// process, so that cleanTmp can tell whose it is.
func (s *Store) tempDir(kind string) (string, error) {
	var b [6]byte
	rand.Read(b[:])
	d := s.path("tmp", fmt.Sprintf("%s-%d-%s", kind, os.Getpid(), hex.EncodeToString(b[:])))
	if err := os.Mkdir(d, 0o700); err != nil {
		return "", err
	}
	return d, nil
}

// cleanTmp removes the entries of DIR/tmp whose process has ended.
func (s *Store) cleanTmp() {
	entries, _ := os.ReadDir(s.path("tmp"))
	for _, e := range entries {
		parts := strings.SplitN(e.Name(), "-", 3)
		if len(parts) != 3 {
			continue
		}
		pid, err := strconv.Atoi(parts[1])
		if err != nil || pid <= 0 {
			continue
		}
		if err := syscall.Kill(pid, 0); err == syscall.ESRCH {
			removeTree(s.path("tmp", e.Name()))
		}
	}
}

// commit gives name to the tree prepared in tmp (tmp/rootfs), writing
// tmp/config.json, and moves it into blobs unless the same content is
// there already. It refuses a name that exists (sandbox.ErrExist). tmp is
// gone afterwards either way.
func (s *Store) commit(ctx context.Context, name, tmp string, m meta) (*Template, error) {
	return s.store(ctx, tmp, m, func(idx *index, r ref) error {
		if _, ok := idx.Refs[name]; ok {
			return existErr(name)
		}
		idx.Refs[name] = r
		return nil
	}, name)
}

// commitHost is commit for a generation of the host template.
func (s *Store) commitHost(ctx context.Context, tmp string, m meta, stamp string) (*Template, error) {
	return s.store(ctx, tmp, m, func(idx *index, r ref) error {
		idx.Host = &hostRef{Stamp: stamp, Digest: r.Digest}
		return nil
	}, HostName)
}

// store hashes and stores the tree in tmp and, under the exclusive lock,
// lets name record it in the index.
func (s *Store) store(ctx context.Context, tmp string, m meta, record func(*index, ref) error, name string) (*Template, error) {
	defer removeTree(tmp)
	digest, size, err := digestTree(ctx, filepath.Join(tmp, "rootfs"), m.Config, m.Binds)
	if err != nil {
		return nil, fmt.Errorf("hashing template %q: %w", name, err)
	}
	m.Size = size
	m.Created = time.Now().UTC().Truncate(time.Second)
	b, err := json.MarshalIndent(m, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(tmp, "config.json"), append(b, '\n'), 0o600); err != nil {
		return nil, fmt.Errorf("storing template %q: %w", name, err)
	}
	// The tree is the sandbox's "/": it must be searchable by everyone.
	if err := os.Chmod(filepath.Join(tmp, "rootfs"), 0o755); err != nil {
		return nil, fmt.Errorf("storing template %q: %w", name, err)
	}

	unlock, err := s.lock(true)
	if err != nil {
		return nil, err
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return nil, err
	}
	r := ref{Digest: digest, Created: m.Created}
	if err := record(idx, r); err != nil {
		return nil, err
	}
	blob, err := s.blobDir(digest)
	if err != nil {
		return nil, err
	}
	if _, err := os.Stat(blob); errors.Is(err, fs.ErrNotExist) {
		if err := os.Rename(tmp, blob); err != nil {
			return nil, fmt.Errorf("storing template %q: %w", name, err)
		}
	} else if err != nil {
		return nil, fmt.Errorf("storing template %q: %w", name, err)
	}
	if err := s.writeIndex(idx); err != nil {
		return nil, fmt.Errorf("storing template %q: %w", name, err)
	}
	return s.load(name, r)
}

// checkNew validates a name for Build or Import and refuses one in use,
// before any work is done (commit checks again at the end).
func (s *Store) checkNew(name string) error {
	if name == HostName {
		return fmt.Errorf("template name %q is reserved for the built-in host template; choose another: %w", name, sandbox.ErrInvalid)
	}
	if err := ValidName(name); err != nil {
		return err
	}
	unlock, err := s.lock(false)
	if err != nil {
		return err
	}
	defer unlock()
	idx, err := s.readIndex()
	if err != nil {
		return err
	}
	if _, ok := idx.Refs[name]; ok {
		return existErr(name)
	}
	return nil
}

func existErr(name string) error {
	return fmt.Errorf("template %q: %w; remove it first with `cove template rm %s` or choose another name", name, sandbox.ErrExist, name)
}

// removeTree deletes a directory tree that a build or import made, after
// detaching anything still mounted below it: a build tool killed halfway
// may leave /proc or a bind of /dev mounted inside its target, and
// deleting through such a mount would delete host files.
func removeTree(dir string) error {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	for i := len(mounts) - 1; i >= 0; i-- { // deepest last in mountinfo order
		syscall.Unmount(mounts[i], syscall.MNT_DETACH)
	}
	if mounts, _ := mountinfo.Under(dir); len(mounts) > 0 {
		return fmt.Errorf("not deleting %s: %s is still mounted; unmount it and delete the directory by hand: %w", dir, mounts[0], sandbox.ErrState)
	}
	if err := os.RemoveAll(dir); err == nil || !errors.Is(err, fs.ErrPermission) {
		return err
	}
	// Without root, RemoveAll cannot enter a directory that lacks owner
	// write or search permission (an image may ship a 0555 one): grant
	// them, then retry. WalkDir does not follow symlinks.
	filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if d != nil && d.IsDir() {
			os.Chmod(p, 0o700)
		}
		return nil
	})
	return os.RemoveAll(dir)
}
