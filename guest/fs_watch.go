package guest

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
	"sync"
	"syscall"
	"time"

	"connectrpc.com/connect"
	"github.com/fsnotify/fsnotify"

	pb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/sandbox"
)

const (
	// maxQueuedEvents bounds the events a polling watcher holds between
	// two GetWatcherEvents calls; a watcher that falls further behind is
	// stopped with a ResourceExhausted error rather than growing without
	// bound.
	maxQueuedEvents = 10000
	// maxPollWatchers bounds the polling watchers alive at once.
	maxPollWatchers = 1024
	// keepAliveHeader lets a client pick the keepalive interval of a
	// stream in seconds, as envd's SDKs do.
	keepAliveHeader = "Keepalive-Ping-Interval"
)

// WatchDir streams changes under a directory: a StartEvent once the watch
// is in place, then one FilesystemEvent per operation with the name
// relative to the watched directory, and a keepalive event after every
// quiet keepalive interval. It ends when the client leaves.
func (f *fsService) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	d, err := f.openWatch(ctx, req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return f.rpcError(err)
	}
	defer d.w.Close()
	start := &pb.WatchDirResponse{Event: &pb.WatchDirResponse_Start{Start: &pb.WatchDirResponse_StartEvent{}}}
	if err := stream.Send(start); err != nil {
		return err
	}
	emit := func(e *pb.FilesystemEvent) error {
		return stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Filesystem{Filesystem: e}})
	}
	keepalive := func() error {
		return stream.Send(&pb.WatchDirResponse{Event: &pb.WatchDirResponse_Keepalive{Keepalive: &pb.WatchDirResponse_KeepAlive{}}})
	}
	err = d.run(ctx, emit, f.keepAlive(req.Header()), keepalive)
	if ctx.Err() != nil {
		return nil // the client left
	}
	return f.rpcError(err)
}

// keepAlive is the keepalive interval for a stream: the client's
// Keepalive-Ping-Interval header (seconds) or the daemon's default.
func (f *fsService) keepAlive(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get(keepAliveHeader)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return f.srv.cfg.KeepAlive
}

// pollWatcher is a watch kept by the daemon between GetWatcherEvents
// calls.
type pollWatcher struct {
	cancel context.CancelFunc
	done   chan struct{}

	// mu guards events and err.
	mu     sync.Mutex
	events []*pb.FilesystemEvent
	err    error // set when the watch stopped on its own
}

var errWatcherBehind = errors.New("watcher fell behind")

// CreateWatcher starts a watch whose events are collected by
// GetWatcherEvents until RemoveWatcher.
func (f *fsService) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
	f.mu.Lock()
	n := len(f.watchers)
	f.mu.Unlock()
	if n >= maxPollWatchers {
		return nil, f.rpcError(fmt.Errorf("%d watchers are already open; remove unused ones with RemoveWatcher: %w", n, sandbox.ErrLimit))
	}
	d, err := f.openWatch(ctx, req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return nil, f.rpcError(err)
	}
	id := "w" + newID()
	wctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	pw := &pollWatcher{cancel: cancel, done: make(chan struct{})}
	f.mu.Lock()
	if f.watchers == nil {
		f.watchers = make(map[string]*pollWatcher)
	}
	f.watchers[id] = pw
	f.mu.Unlock()

	go func() {
		defer close(pw.done)
		defer d.w.Close()
		err := d.run(wctx, func(e *pb.FilesystemEvent) error {
			pw.mu.Lock()
			defer pw.mu.Unlock()
			if len(pw.events) >= maxQueuedEvents {
				return errWatcherBehind
			}
			pw.events = append(pw.events, e)
			return nil
		}, 0, nil)
		if wctx.Err() != nil {
			return // removed
		}
		if errors.Is(err, errWatcherBehind) {
			err = fmt.Errorf("watcher %s queued %d events without being polled and was stopped; poll GetWatcherEvents more often, then create a new watcher: %w",
				id, maxQueuedEvents, sandbox.ErrLimit)
		}
		pw.mu.Lock()
		pw.err = err
		pw.events = nil
		pw.mu.Unlock()
	}()
	return connect.NewResponse(&pb.CreateWatcherResponse{WatcherId: id}), nil
}

// GetWatcherEvents returns and forgets the events collected since the
// last call. Once the watch has stopped on an error, it returns that error.
func (f *fsService) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
	pw, err := f.pollWatcher(req.Msg.GetWatcherId())
	if err != nil {
		return nil, f.rpcError(err)
	}
	pw.mu.Lock()
	events, werr := pw.events, pw.err
	pw.events = nil
	pw.mu.Unlock()
	if werr != nil {
		return nil, f.rpcError(werr)
	}
	return connect.NewResponse(&pb.GetWatcherEventsResponse{Events: events}), nil
}

// RemoveWatcher stops a watch and forgets it.
func (f *fsService) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
	id := req.Msg.GetWatcherId()
	pw, err := f.pollWatcher(id)
	if err != nil {
		return nil, f.rpcError(err)
	}
	f.mu.Lock()
	delete(f.watchers, id)
	f.mu.Unlock()
	pw.cancel()
	<-pw.done
	return connect.NewResponse(&pb.RemoveWatcherResponse{}), nil
}

func (f *fsService) pollWatcher(id string) (*pollWatcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pw, ok := f.watchers[id]
	if !ok {
		return nil, fmt.Errorf("watcher %q does not exist (it was removed, or the daemon restarted); create a new one: %w", id, sandbox.ErrNotFound)
	}
	return pw, nil
}

// closeWatchers stops every polling watcher.
func (f *fsService) closeWatchers() {
	f.mu.Lock()
	ws := f.watchers
	f.watchers = nil
	f.mu.Unlock()
	for _, pw := range ws {
		pw.cancel()
		<-pw.done
	}
}

// dirWatch is an inotify watch on a directory, and on every directory
// below it when recursive, turned into envd's FilesystemEvents.
type dirWatch struct {
	f                       *fsService
	w                       *fsnotify.Watcher
	sp, hp                  string // the watched directory
	recursive, includeEntry bool
}

// openWatch starts watching the directory p (following it if it is a
// symlink). The caller closes d.w.
func (f *fsService) openWatch(ctx context.Context, p string, recursive, includeEntry bool) (*dirWatch, error) {
	sp, hp, err := f.srv.resolveCtx(ctx, p, true)
	if err != nil {
		return nil, err
	}
	fi, err := os.Stat(hp)
	if err != nil {
		return nil, pathError("watching", sp, err)
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("watching %q: it is not a directory; watch its parent directory instead: %w", sp, sandbox.ErrInvalid)
	}
	w, err := fsnotify.NewWatcher()
	if err != nil {
		return nil, watchError(sp, err)
	}
	d := &dirWatch{f: f, w: w, sp: sp, hp: hp, recursive: recursive, includeEntry: includeEntry}
	if recursive {
		err = d.addTree(hp, nil)
	} else if err = w.Add(hp); err != nil {
		err = watchError(sp, err)
	}
	if err != nil {
		w.Close()
		return nil, err
	}
	return d, nil
}

// watchError explains a failure to set up an inotify watch on sp.
func watchError(sp string, err error) error {
	inner := unwrapOS(err)
	if errors.Is(inner, syscall.ENOSPC) || errors.Is(inner, syscall.EMFILE) {
		return fmt.Errorf("watching %q: the kernel's inotify limit is reached; watch fewer directories or raise fs.inotify.max_user_watches and fs.inotify.max_user_instances: %w", sp, sandbox.ErrLimit)
	}
	return pathError("watching", sp, err)
}

// addTree watches root and every directory below it, without following
// symlinks. With emit set (root was just created inside a recursive
// watch) it also reports a create event for each entry found, since
// they may have appeared before the watch was in place; a client may then
// see some creations twice. A failure on root itself or an exhausted
// inotify limit is an error; directories that vanish or cannot be read
// are skipped.
func (d *dirWatch) addTree(root string, emit func(*pb.FilesystemEvent) error) error {
	return filepath.WalkDir(root, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			if p == root {
				return watchError(d.sandboxPath(p), err)
			}
			return nil
		}
		if p != root && emit != nil {
			if err := d.emit(p, fsnotify.Create, emit); err != nil {
				return err
			}
		}
		if !de.IsDir() {
			return nil
		}
		if err := d.w.Add(p); err != nil {
			werr := watchError(d.sandboxPath(p), err)
			if p == root || errors.Is(werr, sandbox.ErrLimit) {
				return werr
			}
			return fs.SkipDir
		}
		return nil
	})
}

// run delivers events to emit until ctx ends, emit fails or the watch
// breaks. With keepEvery > 0, keepalive is called after every
// keepEvery without events.
func (d *dirWatch) run(ctx context.Context, emit func(*pb.FilesystemEvent) error, keepEvery time.Duration, keepalive func() error) error {
	var tick <-chan time.Time
	var ticker *time.Ticker
	if keepEvery > 0 && keepalive != nil {
		ticker = time.NewTicker(keepEvery)
		defer ticker.Stop()
		tick = ticker.C
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick:
			if err := keepalive(); err != nil {
				return err
			}
		case err, ok := <-d.w.Errors:
			if !ok {
				return fmt.Errorf("watching %q: the watch was closed: %w", d.sp, sandbox.ErrUnavailable)
			}
			if errors.Is(err, fsnotify.ErrEventOverflow) {
				return fmt.Errorf("watching %q: more changes happened than the kernel could queue and some were lost; watch again: %w", d.sp, sandbox.ErrLimit)
			}
			return fmt.Errorf("watching %q: %w", d.sp, mapOSError(unwrapOS(err)))
		case ev, ok := <-d.w.Events:
			if !ok {
				return fmt.Errorf("watching %q: the watch was closed: %w", d.sp, sandbox.ErrUnavailable)
			}
			if err := d.handle(ev, emit); err != nil {
				return err
			}
			if ticker != nil {
				ticker.Reset(keepEvery)
			}
		}
	}
}

// handle turns one inotify event into envd events and, in a recursive
// watch, starts watching a directory that was just created.
func (d *dirWatch) handle(ev fsnotify.Event, emit func(*pb.FilesystemEvent) error) error {
	if err := d.emit(ev.Name, ev.Op, emit); err != nil {
		return err
	}
	if d.recursive && ev.Has(fsnotify.Create) {
		if fi, err := os.Lstat(ev.Name); err == nil && fi.IsDir() {
			return d.addTree(ev.Name, emit)
		}
	}
	return nil
}

// emit reports the operations in op on host path name, in envd's order
// (create, rename, chmod, write, remove), one event each.
func (d *dirWatch) emit(name string, op fsnotify.Op, emit func(*pb.FilesystemEvent) error) error {
	rel, err := filepath.Rel(d.hp, name)
	if err != nil || rel == ".." || strings.HasPrefix(rel, "../") {
		return nil
	}
	rel = filepath.ToSlash(rel)
	for _, m := range []struct {
		op fsnotify.Op
		t  pb.EventType
	}{
		{fsnotify.Create, pb.EventType_EVENT_TYPE_CREATE},
		{fsnotify.Rename, pb.EventType_EVENT_TYPE_RENAME},
		{fsnotify.Chmod, pb.EventType_EVENT_TYPE_CHMOD},
		{fsnotify.Write, pb.EventType_EVENT_TYPE_WRITE},
		{fsnotify.Remove, pb.EventType_EVENT_TYPE_REMOVE},
	} {
		if !op.Has(m.op) {
			continue
		}
		e := &pb.FilesystemEvent{Name: rel, Type: m.t}
		// Removed and renamed paths are gone: stat-ing them could only
		// describe something else that took their place.
		if d.includeEntry && m.t != pb.EventType_EVENT_TYPE_REMOVE && m.t != pb.EventType_EVENT_TYPE_RENAME {
			if info, err := d.f.entryInfo(path.Join(d.sp, rel), name); err == nil {
				e.Entry = info
			}
		}
		if err := emit(e); err != nil {
			return err
		}
	}
	return nil
}

func (d *dirWatch) sandboxPath(host string) string {
	return toSandbox(d.f.srv.cfg.Root, host)
}
