package guest

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"github.com/google/go-cmp/cmp"

	pb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/guest/gen/filesystem/filesystemconnect"
)

// fsEnv is a daemon on a temporary root, served over HTTP.
type fsEnv struct {
	srv  *Server
	hs   *httptest.Server
	root string // host directory that is the sandbox's "/"
	fs   filesystemconnect.FilesystemClient
}

func newFSEnv(t *testing.T, cfg Config) *fsEnv {
	t.Helper()
	if cfg.Root == "" {
		cfg.Root = t.TempDir()
	}
	if cfg.Workdir == "" {
		cfg.Workdir = "/workspace"
	}
	if err := os.MkdirAll(filepath.Join(cfg.Root, cfg.Workdir), 0o755); err != nil {
		t.Fatal(err)
	}
	srv, err := NewServer(cfg)
	if err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(srv.Handler())
	t.Cleanup(func() {
		hs.Close()
		srv.fs.CloseWatchers()
	})
	return &fsEnv{srv: srv, hs: hs, root: srv.cfg.Root, fs: filesystemconnect.NewFilesystemClient(hs.Client(), hs.URL)}
}

// host returns the host path of sandbox path p.
func (e *fsEnv) host(p string) string { return filepath.Join(e.root, p) }

func (e *fsEnv) write(t *testing.T, p, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Dir(e.host(p)), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.host(p), []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// noHostPath fails when msg reveals where the sandbox root is on the host.
func (e *fsEnv) noHostPath(t *testing.T, msg string) {
	t.Helper()
	if strings.Contains(msg, e.root) {
		t.Errorf("message %q reveals the host root %q", msg, e.root)
	}
}

func wantCode(t *testing.T, e *fsEnv, err error, want connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
	e.noHostPath(t, err.Error())
}

func TestFSHostilePaths(t *testing.T) {
	e := newFSEnv(t, Config{})
	// A symlink inside the root that points at the host's /etc.
	if err := os.Symlink("/etc", e.host("/workspace/evil")); err != nil {
		t.Fatal(err)
	}
	hostile := map[string]string{
		"dotdot":      "../../etc/passwd",
		"abs-dotdot":  "/../etc",
		"symlink-out": "evil/passwd",
		"symlink-new": "/workspace/evil/cove-test-new",
		"nul":         "a\x00b",
		"long":        strings.Repeat("a", 10000),
	}
	ctx := context.Background()
	rpcs := map[string]func(p string) error{
		"Stat": func(p string) error {
			_, err := e.fs.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: p}))
			return err
		},
		"MakeDir": func(p string) error {
			_, err := e.fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: p}))
			return err
		},
		"MoveSource": func(p string) error {
			_, err := e.fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: p, Destination: "/workspace/moved"}))
			return err
		},
		"MoveDestination": func(p string) error {
			e.write(t, "/workspace/src.txt", "x")
			_, err := e.fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "/workspace/src.txt", Destination: p}))
			return err
		},
		"ListDir": func(p string) error {
			_, err := e.fs.ListDir(ctx, connect.NewRequest(&pb.ListDirRequest{Path: p, Depth: 3}))
			return err
		},
		"Remove": func(p string) error {
			_, err := e.fs.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: p}))
			return err
		},
		"WatchDir": func(p string) error {
			stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: p, Recursive: true}))
			if err != nil {
				return err
			}
			defer stream.Close()
			for stream.Receive() {
				return errors.New("got an event, want an error")
			}
			return stream.Err()
		},
		"CreateWatcher": func(p string) error {
			_, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: p}))
			return err
		},
	}
	for rpc, call := range rpcs {
		for name, p := range hostile {
			t.Run(rpc+"/"+name, func(t *testing.T) {
				wantCode(t, e, call(p), connect.CodeInvalidArgument)
			})
		}
	}
	if _, err := os.Lstat("/etc/cove-test-new"); err == nil {
		t.Errorf("/etc/cove-test-new was created on the host")
	}
	if _, err := os.Lstat("/etc/passwd"); err != nil {
		t.Errorf("host /etc/passwd: %v", err)
	}
}

func TestFSStat(t *testing.T) {
	e := newFSEnv(t, Config{})
	// Owner names come from the sandbox's /etc/passwd and /etc/group,
	// not the host's.
	e.write(t, "/etc/passwd", fmt.Sprintf("sandboxer:x:%d:%d::/home/sandboxer:/bin/sh\n", os.Getuid(), os.Getgid()))
	e.write(t, "/etc/group", fmt.Sprintf("crew:x:%d:\n", os.Getgid()))
	e.write(t, "/workspace/file.txt", "hello")
	if err := os.Chmod(e.host("/workspace/file.txt"), 0o640); err != nil {
		t.Fatal(err)
	}
	mtime := time.Date(2024, 1, 2, 3, 4, 5, 0, time.UTC)
	if err := os.Chtimes(e.host("/workspace/file.txt"), mtime, mtime); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("file.txt", e.host("/workspace/link")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("missing", e.host("/workspace/dangling")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("/etc", e.host("/workspace/outside")); err != nil {
		t.Fatal(err)
	}
	target := func(s string) *string { return &s }
	tests := []struct {
		path string
		want *pb.EntryInfo
	}{
		{"/workspace/file.txt", &pb.EntryInfo{
			Name: "file.txt", Path: "/workspace/file.txt", Type: pb.FileType_FILE_TYPE_FILE,
			Size: 5, Mode: 0o640, Permissions: "-rw-r-----", Owner: "sandboxer", Group: "crew",
		}},
		{"file.txt", &pb.EntryInfo{
			Name: "file.txt", Path: "/workspace/file.txt", Type: pb.FileType_FILE_TYPE_FILE,
			Size: 5, Mode: 0o640, Permissions: "-rw-r-----", Owner: "sandboxer", Group: "crew",
		}},
		{"/workspace", &pb.EntryInfo{
			Name: "workspace", Path: "/workspace", Type: pb.FileType_FILE_TYPE_DIRECTORY,
			Mode: 0o755, Permissions: "drwxr-xr-x", Owner: "sandboxer", Group: "crew",
		}},
		// A symlink has its target's type and mode, its own size and
		// permissions string, and its target as stored.
		{"/workspace/link", &pb.EntryInfo{
			Name: "link", Path: "/workspace/link", Type: pb.FileType_FILE_TYPE_FILE,
			Size: 8, Mode: 0o640, Permissions: "Lrwxrwxrwx", Owner: "sandboxer", Group: "crew",
			SymlinkTarget: target("file.txt"),
		}},
		{"/workspace/dangling", &pb.EntryInfo{
			Name: "dangling", Path: "/workspace/dangling", Type: pb.FileType_FILE_TYPE_UNSPECIFIED,
			Size: 7, Permissions: "Lrwxrwxrwx", Owner: "sandboxer", Group: "crew",
			SymlinkTarget: target("missing"),
		}},
		// Stat does not follow a final symlink, so one that leads out is
		// described, not refused.
		{"/workspace/outside", &pb.EntryInfo{
			Name: "outside", Path: "/workspace/outside", Type: pb.FileType_FILE_TYPE_UNSPECIFIED,
			Size: 4, Permissions: "Lrwxrwxrwx", Owner: "sandboxer", Group: "crew",
			SymlinkTarget: target("/etc"),
		}},
	}
	for _, tt := range tests {
		t.Run(tt.path, func(t *testing.T) {
			res, err := e.fs.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: tt.path}))
			if err != nil {
				t.Fatal(err)
			}
			got := res.Msg.GetEntry()
			if got.GetModifiedTime() == nil {
				t.Errorf("modified_time is not set")
			}
			if tt.path == "/workspace/file.txt" && !got.GetModifiedTime().AsTime().Equal(mtime) {
				t.Errorf("modified_time = %v, want %v", got.GetModifiedTime().AsTime(), mtime)
			}
			got.ModifiedTime = nil
			if tt.want.Type == pb.FileType_FILE_TYPE_DIRECTORY {
				got.Size = 0
			}
			if diff := cmp.Diff(tt.want, got, cmpProto); diff != "" {
				t.Errorf("Stat(%q) mismatch (-want +got):\n%s", tt.path, diff)
			}
		})
	}

	t.Run("numeric owner without a name", func(t *testing.T) {
		e := newFSEnv(t, Config{})
		e.write(t, "/workspace/f", "")
		res, err := e.fs.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: "/workspace/f"}))
		if err != nil {
			t.Fatal(err)
		}
		if got, want := res.Msg.GetEntry().GetOwner(), fmt.Sprint(os.Getuid()); got != want {
			t.Errorf("owner = %q, want %q (no /etc/passwd in the sandbox)", got, want)
		}
	})

	t.Run("missing", func(t *testing.T) {
		_, err := e.fs.Stat(context.Background(), connect.NewRequest(&pb.StatRequest{Path: "/workspace/nope"}))
		wantCode(t, e, err, connect.CodeNotFound)
		if !strings.Contains(err.Error(), "/workspace/nope") {
			t.Errorf("error %q does not name the sandbox path", err)
		}
	})
}

// cmpProto compares protobuf messages field by field, ignoring internal
// state.
var cmpProto = cmp.Comparer(func(a, b *pb.EntryInfo) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.GetName() == b.GetName() && a.GetPath() == b.GetPath() && a.GetType() == b.GetType() &&
		a.GetSize() == b.GetSize() && a.GetMode() == b.GetMode() && a.GetPermissions() == b.GetPermissions() &&
		a.GetOwner() == b.GetOwner() && a.GetGroup() == b.GetGroup() &&
		(a.SymlinkTarget == nil) == (b.SymlinkTarget == nil) && a.GetSymlinkTarget() == b.GetSymlinkTarget()
})

func TestFSListDir(t *testing.T) {
	e := newFSEnv(t, Config{})
	e.write(t, "/workspace/a/b/c/deep.txt", "deep")
	e.write(t, "/workspace/a/one.txt", "1")
	e.write(t, "/workspace/top.txt", "top")
	e.write(t, "/other/inside.txt", "x")
	if err := os.Symlink("../other", e.host("/workspace/linkdir")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.host("/other"), e.host("/workspace/hostlink")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(e.host("/workspace/a"), e.host("/alink")); err != nil {
		t.Fatal(err)
	}
	list := func(p string, depth uint32) ([]string, error) {
		res, err := e.fs.ListDir(context.Background(), connect.NewRequest(&pb.ListDirRequest{Path: p, Depth: depth}))
		if err != nil {
			return nil, err
		}
		var paths []string
		for _, en := range res.Msg.GetEntries() {
			if en.GetName() != filepath.Base(en.GetPath()) {
				t.Errorf("entry %q has name %q", en.GetPath(), en.GetName())
			}
			paths = append(paths, en.GetPath())
		}
		return paths, nil
	}
	tests := []struct {
		path  string
		depth uint32
		want  []string
	}{
		{"/workspace", 0, []string{"/workspace/a", "/workspace/hostlink", "/workspace/linkdir", "/workspace/top.txt"}},
		{"/workspace", 1, []string{"/workspace/a", "/workspace/hostlink", "/workspace/linkdir", "/workspace/top.txt"}},
		{"/workspace", 2, []string{"/workspace/a", "/workspace/a/b", "/workspace/a/one.txt", "/workspace/hostlink", "/workspace/linkdir", "/workspace/top.txt"}},
		// Symlinked directories are listed, never descended into.
		{"/workspace", 10, []string{"/workspace/a", "/workspace/a/b", "/workspace/a/b/c", "/workspace/a/b/c/deep.txt", "/workspace/a/one.txt", "/workspace/hostlink", "/workspace/linkdir", "/workspace/top.txt"}},
		{"a", 1, []string{"/workspace/a/b", "/workspace/a/one.txt"}},
		// A listed directory that is a symlink is followed, and entries
		// keep the requested path.
		{"/workspace/linkdir", 1, []string{"/workspace/linkdir/inside.txt"}},
		{"/alink", 1, []string{"/alink/b", "/alink/one.txt"}},
	}
	for _, tt := range tests {
		t.Run(fmt.Sprintf("%s/%d", tt.path, tt.depth), func(t *testing.T) {
			got, err := list(tt.path, tt.depth)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("ListDir(%q, %d) mismatch (-want +got):\n%s", tt.path, tt.depth, diff)
			}
		})
	}
	t.Run("file", func(t *testing.T) {
		_, err := list("/workspace/top.txt", 1)
		wantCode(t, e, err, connect.CodeInvalidArgument)
	})
	t.Run("missing", func(t *testing.T) {
		_, err := list("/workspace/missing", 1)
		wantCode(t, e, err, connect.CodeNotFound)
	})
}

func TestFSMakeDir(t *testing.T) {
	e := newFSEnv(t, Config{})
	ctx := context.Background()
	res, err := e.fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "x/y/z"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Msg.GetEntry().GetPath(), "/workspace/x/y/z"; got != want {
		t.Errorf("entry path = %q, want %q", got, want)
	}
	if got := res.Msg.GetEntry().GetType(); got != pb.FileType_FILE_TYPE_DIRECTORY {
		t.Errorf("entry type = %v, want directory", got)
	}
	if fi, err := os.Stat(e.host("/workspace/x/y/z")); err != nil || !fi.IsDir() {
		t.Fatalf("directory not created: %v", err)
	}
	_, err = e.fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/workspace/x/y"}))
	wantCode(t, e, err, connect.CodeAlreadyExists)

	e.write(t, "/workspace/file", "")
	_, err = e.fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/workspace/file"}))
	wantCode(t, e, err, connect.CodeInvalidArgument)
	_, err = e.fs.MakeDir(ctx, connect.NewRequest(&pb.MakeDirRequest{Path: "/workspace/file/sub"}))
	wantCode(t, e, err, connect.CodeInvalidArgument)
}

func TestFSMove(t *testing.T) {
	e := newFSEnv(t, Config{})
	ctx := context.Background()
	e.write(t, "/workspace/src.txt", "content")
	res, err := e.fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "src.txt", Destination: "/workspace/new/parents/dst.txt"}))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := res.Msg.GetEntry().GetPath(), "/workspace/new/parents/dst.txt"; got != want {
		t.Errorf("entry path = %q, want %q", got, want)
	}
	if b, err := os.ReadFile(e.host("/workspace/new/parents/dst.txt")); err != nil || string(b) != "content" {
		t.Errorf("moved file: %q, %v", b, err)
	}
	if _, err := os.Lstat(e.host("/workspace/src.txt")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("source still exists: %v", err)
	}

	// A symlink is moved itself, not its target.
	e.write(t, "/workspace/target", "t")
	if err := os.Symlink("target", e.host("/workspace/ln")); err != nil {
		t.Fatal(err)
	}
	if _, err := e.fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "ln", Destination: "ln2"})); err != nil {
		t.Fatal(err)
	}
	if got, err := os.Readlink(e.host("/workspace/ln2")); err != nil || got != "target" {
		t.Errorf("moved link = %q, %v; want a link to target", got, err)
	}

	_, err = e.fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "missing", Destination: "x"}))
	wantCode(t, e, err, connect.CodeNotFound)
	_, err = e.fs.Move(ctx, connect.NewRequest(&pb.MoveRequest{Source: "/", Destination: "/workspace/root"}))
	wantCode(t, e, err, connect.CodeInvalidArgument)
}

func TestFSRemove(t *testing.T) {
	e := newFSEnv(t, Config{})
	ctx := context.Background()
	remove := func(p string) error {
		_, err := e.fs.Remove(ctx, connect.NewRequest(&pb.RemoveRequest{Path: p}))
		return err
	}
	e.write(t, "/workspace/tree/a/b/c.txt", "c")
	if err := remove("tree"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Lstat(e.host("/workspace/tree")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("tree still exists: %v", err)
	}
	// envd's Remove is os.RemoveAll: a missing path is fine.
	if err := remove("/workspace/never-existed"); err != nil {
		t.Errorf("removing a missing path: %v", err)
	}
	// A symlink is removed, not what it points to.
	e.write(t, "/data/keep.txt", "keep")
	if err := os.Symlink("/data", e.host("/workspace/datalink")); err != nil {
		t.Fatal(err)
	}
	if err := remove("/workspace/datalink"); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(e.host("/data/keep.txt")); err != nil {
		t.Errorf("symlink target was removed: %v", err)
	}
	wantCode(t, e, remove("/"), connect.CodeInvalidArgument)
	if _, err := os.Stat(e.root); err != nil {
		t.Fatalf("root was removed: %v", err)
	}
}

// eventStream collects a WatchDir stream's events on a channel.
func eventStream(t *testing.T, e *fsEnv, req *pb.WatchDirRequest) <-chan *pb.WatchDirResponse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := e.fs.WatchDir(ctx, connect.NewRequest(req))
	if err != nil {
		t.Fatal(err)
	}
	ch := make(chan *pb.WatchDirResponse, 1000)
	if !stream.Receive() {
		t.Fatalf("no start event: %v", stream.Err())
	}
	if stream.Msg().GetStart() == nil {
		t.Fatalf("first event is %v, want a start event", stream.Msg())
	}
	go func() {
		defer close(ch)
		defer stream.Close()
		for stream.Receive() {
			ch <- stream.Msg()
		}
	}()
	return ch
}

// waitEvent waits (generously) for an event matching ok.
func waitEvent(t *testing.T, ch <-chan *pb.WatchDirResponse, what string, ok func(*pb.WatchDirResponse) bool) *pb.WatchDirResponse {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		select {
		case ev, open := <-ch:
			if !open {
				t.Fatalf("stream ended while waiting for %s", what)
			}
			if ok(ev) {
				return ev
			}
		case <-timeout:
			t.Fatalf("no %s event", what)
		}
	}
}

func isEvent(name string, typ pb.EventType) func(*pb.WatchDirResponse) bool {
	return func(ev *pb.WatchDirResponse) bool {
		fe := ev.GetFilesystem()
		return fe != nil && fe.GetName() == name && fe.GetType() == typ
	}
}

func TestWatchDir(t *testing.T) {
	e := newFSEnv(t, Config{})
	e.write(t, "/workspace/w/existing/old.txt", "")
	ch := eventStream(t, e, &pb.WatchDirRequest{Path: "w", Recursive: true, IncludeEntry: true})

	e.write(t, "/workspace/w/f.txt", "one")
	ev := waitEvent(t, ch, "create f.txt", isEvent("f.txt", pb.EventType_EVENT_TYPE_CREATE))
	if got, want := ev.GetFilesystem().GetEntry().GetPath(), "/workspace/w/f.txt"; got != want {
		t.Errorf("create event entry path = %q, want %q", got, want)
	}
	waitEvent(t, ch, "write f.txt", isEvent("f.txt", pb.EventType_EVENT_TYPE_WRITE))

	// Subdirectories that existed and ones created later are watched.
	e.write(t, "/workspace/w/existing/new.txt", "")
	waitEvent(t, ch, "create existing/new.txt", isEvent("existing/new.txt", pb.EventType_EVENT_TYPE_CREATE))
	if err := os.MkdirAll(e.host("/workspace/w/later/deeper"), 0o755); err != nil {
		t.Fatal(err)
	}
	waitEvent(t, ch, "create later", isEvent("later", pb.EventType_EVENT_TYPE_CREATE))
	e.write(t, "/workspace/w/later/deeper/x.txt", "x")
	waitEvent(t, ch, "create later/deeper/x.txt", isEvent("later/deeper/x.txt", pb.EventType_EVENT_TYPE_CREATE))

	if err := os.Remove(e.host("/workspace/w/f.txt")); err != nil {
		t.Fatal(err)
	}
	ev = waitEvent(t, ch, "remove f.txt", isEvent("f.txt", pb.EventType_EVENT_TYPE_REMOVE))
	if ev.GetFilesystem().Entry != nil {
		t.Errorf("remove event carries an entry: %v", ev.GetFilesystem().GetEntry())
	}
}

func TestWatchDirKeepAlive(t *testing.T) {
	e := newFSEnv(t, Config{KeepAlive: 20 * time.Millisecond})
	ch := eventStream(t, e, &pb.WatchDirRequest{Path: "/workspace"})
	waitEvent(t, ch, "keepalive", func(ev *pb.WatchDirResponse) bool { return ev.GetKeepalive() != nil })
}

func TestWatchDirErrors(t *testing.T) {
	e := newFSEnv(t, Config{})
	e.write(t, "/workspace/file", "")
	ctx := context.Background()
	for p, want := range map[string]connect.Code{
		"/workspace/file":    connect.CodeInvalidArgument,
		"/workspace/missing": connect.CodeNotFound,
	} {
		stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: p}))
		if err == nil {
			if stream.Receive() {
				t.Errorf("WatchDir(%q) sent %v, want an error", p, stream.Msg())
			}
			err = stream.Err()
			stream.Close()
		}
		wantCode(t, e, err, want)
		_, err = e.fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: p}))
		wantCode(t, e, err, want)
	}
}

func TestWatchPolling(t *testing.T) {
	e := newFSEnv(t, Config{})
	ctx := context.Background()
	res, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/workspace", Recursive: true}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	e.write(t, "/workspace/sub/polled.txt", "x")

	var names []string
	deadline := time.Now().Add(20 * time.Second)
	for !slices.Contains(names, "sub/polled.txt") {
		if time.Now().After(deadline) {
			t.Fatalf("no event for sub/polled.txt; got %v", names)
		}
		ev, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
		if err != nil {
			t.Fatal(err)
		}
		for _, fe := range ev.Msg.GetEvents() {
			names = append(names, fe.GetName())
		}
		time.Sleep(10 * time.Millisecond)
	}

	if _, err := e.fs.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id})); err != nil {
		t.Fatal(err)
	}
	_, err = e.fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, e, err, connect.CodeNotFound)
	_, err = e.fs.RemoveWatcher(ctx, connect.NewRequest(&pb.RemoveWatcherRequest{WatcherId: id}))
	wantCode(t, e, err, connect.CodeNotFound)
}

func TestFSConfine(t *testing.T) {
	e := newFSEnv(t, Config{})
	e.write(t, "/workspace/in.txt", "in")
	e.write(t, "/other/out.txt", "out")
	if err := os.Symlink("../other", e.host("/workspace/escape")); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	stat := func(p string) (*pb.EntryInfo, error) {
		req := connect.NewRequest(&pb.StatRequest{Path: p})
		req.Header().Set(ConfineHeader, "/workspace")
		res, err := e.fs.Stat(ctx, req)
		if err != nil {
			return nil, err
		}
		return res.Msg.GetEntry(), nil
	}
	if en, err := stat("in.txt"); err != nil || en.GetPath() != "/workspace/in.txt" {
		t.Errorf("Stat(in.txt) = %v, %v", en, err)
	}
	_, err := stat("/other/out.txt")
	wantCode(t, e, err, connect.CodeInvalidArgument)
	_, err = stat("escape/out.txt")
	wantCode(t, e, err, connect.CodeInvalidArgument)

	req := connect.NewRequest(&pb.ListDirRequest{Path: "escape"})
	req.Header().Set(ConfineHeader, "/workspace")
	_, err = e.fs.ListDir(ctx, req)
	wantCode(t, e, err, connect.CodeInvalidArgument)
}

func TestFSAccessToken(t *testing.T) {
	e := newFSEnv(t, Config{AccessToken: "s3cret"})
	ctx := context.Background()
	_, err := e.fs.Stat(ctx, connect.NewRequest(&pb.StatRequest{Path: "/workspace"}))
	wantCode(t, e, err, connect.CodeUnauthenticated)

	stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: "/workspace"}))
	if err == nil {
		for stream.Receive() {
			t.Errorf("WatchDir without a token sent %v", stream.Msg())
		}
		err = stream.Err()
		stream.Close()
	}
	wantCode(t, e, err, connect.CodeUnauthenticated)

	req := connect.NewRequest(&pb.StatRequest{Path: "/workspace"})
	req.Header().Set(AccessTokenHeader, "s3cret")
	if _, err := e.fs.Stat(ctx, req); err != nil {
		t.Errorf("Stat with the token: %v", err)
	}
}
