package manifest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"path"
	"strings"
	"sync"

	"github.com/cove-sandbox/cove/sandbox"
)

// fakeSession is an in-memory sandbox with just what Apply uses: Mkdir,
// WriteFile, Stat and Exec of a few account and metadata commands. The
// other methods fail.
type fakeSession struct {
	mu sync.Mutex // guards everything below
	// nodes maps a clean absolute path to what is there.
	nodes map[string]*fakeNode
	// execs logs every command as "user: cmd args...".
	execs []string
	// accounts holds existing "passwd/NAME" and "group/NAME" keys.
	accounts map[string]bool
	// dirMode is the mode Mkdir gives new directories.
	dirMode uint32
	// fail names commands that exit 1 with "boom" on stderr.
	fail map[string]bool
}

type fakeNode struct {
	dir   bool
	data  []byte
	mode  uint32
	group string
}

var _ sandbox.Session = (*fakeSession)(nil)

var errNotImplemented = errors.New("not implemented by fakeSession")

func newFakeSession() *fakeSession {
	return &fakeSession{
		nodes:    map[string]*fakeNode{"/": {dir: true, mode: 0o755}},
		accounts: map[string]bool{},
		dirMode:  0o755,
	}
}

// files returns every path under prefix with "dir" or its content and mode.
func (f *fakeSession) files(prefix string) map[string]string {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string]string{}
	for p, n := range f.nodes {
		if p != prefix && !strings.HasPrefix(p, prefix+"/") {
			continue
		}
		if n.dir {
			out[p] = fmt.Sprintf("dir %04o", n.mode)
		} else {
			out[p] = fmt.Sprintf("%04o %s", n.mode, n.data)
		}
		if n.group != "" {
			out[p] += " group=" + n.group
		}
	}
	return out
}

func (f *fakeSession) resolve(p string) (string, error) {
	return sandbox.ResolvePath("/", p)
}

// mkdirLocked makes p and its parents.
func (f *fakeSession) mkdirLocked(p string) error {
	if p != "/" {
		if err := f.mkdirLocked(path.Dir(p)); err != nil {
			return err
		}
	}
	if n, ok := f.nodes[p]; ok {
		if !n.dir {
			return fmt.Errorf("mkdir %s: %w", p, sandbox.ErrExist)
		}
		return nil
	}
	f.nodes[p] = &fakeNode{dir: true, mode: f.dirMode}
	return nil
}

func (f *fakeSession) Mkdir(ctx context.Context, p string) error {
	p, err := f.resolve(p)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.mkdirLocked(p)
}

func (f *fakeSession) WriteFile(ctx context.Context, p string, r io.Reader, perm uint32) error {
	p, err := f.resolve(p)
	if err != nil {
		return err
	}
	data, err := io.ReadAll(r)
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if err := f.mkdirLocked(path.Dir(p)); err != nil {
		return err
	}
	if n, ok := f.nodes[p]; ok && n.dir {
		return fmt.Errorf("write %s: is a directory: %w", p, sandbox.ErrInvalid)
	}
	f.nodes[p] = &fakeNode{data: data, mode: perm}
	return nil
}

func (f *fakeSession) Stat(ctx context.Context, p string) (sandbox.FileInfo, error) {
	p, err := f.resolve(p)
	if err != nil {
		return sandbox.FileInfo{}, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n, ok := f.nodes[p]
	if !ok {
		return sandbox.FileInfo{}, fmt.Errorf("stat %s: %w", p, sandbox.ErrNotFound)
	}
	typ := sandbox.TypeFile
	if n.dir {
		typ = sandbox.TypeDir
	}
	return sandbox.FileInfo{Name: path.Base(p), Path: p, Type: typ, Size: int64(len(n.data)), Mode: n.mode}, nil
}

// Exec understands getent, chmod and chgrp, and accepts groupadd, useradd
// and usermod, recording them as accounts.
func (f *fakeSession) Exec(ctx context.Context, req sandbox.ExecRequest) (sandbox.ExitStatus, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.execs = append(f.execs, req.User+": "+strings.Join(append([]string{req.Cmd}, req.Args...), " "))
	args := req.Args
	last := ""
	if len(args) > 0 {
		last = args[len(args)-1]
	}
	if f.fail[req.Cmd] {
		if req.Stderr != nil {
			io.WriteString(req.Stderr, "boom\n")
		}
		return sandbox.ExitStatus{Code: 1}, nil
	}
	switch req.Cmd {
	case "getent":
		if f.accounts[args[0]+"/"+args[1]] {
			return sandbox.ExitStatus{}, nil
		}
		return sandbox.ExitStatus{Code: 2}, nil
	case "groupadd":
		f.accounts["group/"+last] = true
	case "useradd":
		f.accounts["passwd/"+last] = true
		if args[0] == "-U" {
			f.accounts["group/"+last] = true
		}
	case "usermod":
	case "chmod", "chgrp":
		n, ok := f.nodes[last]
		if !ok {
			if req.Stderr != nil {
				fmt.Fprintf(req.Stderr, "%s: cannot access '%s': No such file or directory\n", req.Cmd, last)
			}
			return sandbox.ExitStatus{Code: 1}, nil
		}
		if req.Cmd == "chgrp" {
			n.group = args[0]
			break
		}
		var mode uint32
		if _, err := fmt.Sscanf(args[0], "%o", &mode); err != nil {
			return sandbox.ExitStatus{Code: 1}, nil
		}
		n.mode = mode
	default:
		return sandbox.ExitStatus{}, fmt.Errorf("exec %s: %w", req.Cmd, sandbox.ErrNotFound)
	}
	return sandbox.ExitStatus{}, nil
}

func (f *fakeSession) ID() string { return "fake" }

func (f *fakeSession) Info(ctx context.Context) (sandbox.Info, error) {
	return sandbox.Info{ID: "fake", State: sandbox.StateRunning}, nil
}

func (f *fakeSession) Start(ctx context.Context, req sandbox.ExecRequest) (sandbox.Process, error) {
	return nil, errNotImplemented
}

func (f *fakeSession) Attach(ctx context.Context, sel sandbox.ProcessSelector, stdout, stderr io.Writer) (sandbox.Process, error) {
	return nil, errNotImplemented
}

func (f *fakeSession) Processes(ctx context.Context) ([]sandbox.ProcessInfo, error) {
	return nil, errNotImplemented
}

func (f *fakeSession) ReadFile(ctx context.Context, p string) (io.ReadCloser, error) {
	return nil, errNotImplemented
}

func (f *fakeSession) List(ctx context.Context, p string, depth int) ([]sandbox.FileInfo, error) {
	return nil, errNotImplemented
}

func (f *fakeSession) Remove(ctx context.Context, p string) error { return errNotImplemented }

func (f *fakeSession) Move(ctx context.Context, src, dst string) error { return errNotImplemented }

func (f *fakeSession) SnapshotWorkspace(ctx context.Context, w io.Writer) error {
	return errNotImplemented
}

func (f *fakeSession) RestoreWorkspace(ctx context.Context, r io.Reader) error {
	return errNotImplemented
}

func (f *fakeSession) DialPort(ctx context.Context, port int) (net.Conn, error) {
	return nil, errNotImplemented
}
