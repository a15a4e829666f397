package fsys

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

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
func (f *Service) WatchDir(ctx context.Context, req *connect.Request[pb.WatchDirRequest], stream *connect.ServerStream[pb.WatchDirResponse]) error {
	d, err := f.openWatch(ctx, req.Msg.GetPath(), req.Msg.GetRecursive(), req.Msg.GetIncludeEntry())
	if err != nil {
		return f.rpcError(err)
	}
	defer d.close()
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
func (f *Service) keepAlive(h http.Header) time.Duration {
	if n, err := strconv.Atoi(h.Get(keepAliveHeader)); err == nil && n > 0 {
		return time.Duration(n) * time.Second
	}
	return f.cfg.KeepAlive
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
func (f *Service) CreateWatcher(ctx context.Context, req *connect.Request[pb.CreateWatcherRequest]) (*connect.Response[pb.CreateWatcherResponse], error) {
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
		defer d.close()
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
func (f *Service) GetWatcherEvents(ctx context.Context, req *connect.Request[pb.GetWatcherEventsRequest]) (*connect.Response[pb.GetWatcherEventsResponse], error) {
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
func (f *Service) RemoveWatcher(ctx context.Context, req *connect.Request[pb.RemoveWatcherRequest]) (*connect.Response[pb.RemoveWatcherResponse], error) {
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

func (f *Service) pollWatcher(id string) (*pollWatcher, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	pw, ok := f.watchers[id]
	if !ok {
		return nil, fmt.Errorf("watcher %q does not exist (it was removed, or the daemon restarted); create a new one: %w", id, sandbox.ErrNotFound)
	}
	return pw, nil
}

// CloseWatchers stops every polling watcher.
func (f *Service) CloseWatchers() {
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
//
// A watch is added on the directory a descriptor refers to (through
// /proc/self/fd), never by path: a directory the sandbox swaps for a
// symlink cannot make the daemon watch what the link points to. Events
// are named by the watch they come from, and the entries of
// IncludeEntry are looked up again inside the request's confinement.
type dirWatch struct {
	f                       *Service
	confine                 string // the request's confinement, "" for none
	sp                      string // the watched directory
	recursive, includeEntry bool

	ifd  int      // the inotify instance, for adding watches
	file *os.File // the same, read through the runtime's poller
	// dirs is the directory each watch descriptor watches, relative to
	// sp ("." for sp itself). Only the goroutine that set the watch up
	// and then the one running it touch it, one after the other.
	dirs map[int32]string
	// renames are the uploads whose temporary file was seen moving
	// away, by rename cookie (see translateUpload); run's goroutine's.
	renames map[uint32]uploadNote
	// batches carries what the reader goroutine reads, errs its error.
	batches   chan []inotifyEvent
	errs      chan error
	done      chan struct{}
	closeOnce sync.Once
}

// inotifyEvent is one event as the kernel reports it.
type inotifyEvent struct {
	wd     int32
	mask   uint32
	cookie uint32 // ties the two halves of a rename
	name   string // in the watched directory; "" for the directory itself
}

// watchMask is what fsnotify asks for on Add: the events envd reports.
const watchMask = unix.IN_CREATE | unix.IN_MODIFY | unix.IN_DELETE | unix.IN_DELETE_SELF |
	unix.IN_MOVED_TO | unix.IN_MOVED_FROM | unix.IN_MOVE_SELF | unix.IN_ATTRIB | unix.IN_ONLYDIR

// openWatch starts watching the directory p (following it if it is a
// symlink). The caller calls d.close.
func (f *Service) openWatch(ctx context.Context, p string, recursive, includeEntry bool) (*dirWatch, error) {
	n, err := f.lookup(ctx, p, lookupOpts{follow: true})
	if err != nil {
		return nil, pathError("watching", p, err)
	}
	defer n.close()
	if !n.exists {
		return nil, pathError("watching", n.sp, unix.ENOENT)
	}
	if !n.isDir() {
		return nil, fmt.Errorf("watching %q: it is not a directory; watch its parent directory instead: %w", encodePath(n.sp), sandbox.ErrInvalid)
	}
	fd, err := n.open(unix.O_RDONLY | unix.O_DIRECTORY)
	if err != nil {
		return nil, pathError("watching", n.sp, err)
	}
	defer unix.Close(fd)
	ifd, err := unix.InotifyInit1(unix.IN_CLOEXEC | unix.IN_NONBLOCK)
	if err != nil {
		return nil, watchError(n.sp, err)
	}
	d := &dirWatch{
		f: f, confine: confineOf(ctx), sp: n.sp, recursive: recursive, includeEntry: includeEntry,
		ifd: ifd, file: os.NewFile(uintptr(ifd), "inotify"), dirs: map[int32]string{}, renames: map[uint32]uploadNote{},
		batches: make(chan []inotifyEvent), errs: make(chan error, 1), done: make(chan struct{}),
	}
	if err := d.addTree(fd, ".", nil); err != nil {
		d.close()
		return nil, err
	}
	go d.read()
	return d, nil
}

// close stops the watch.
func (d *dirWatch) close() {
	d.closeOnce.Do(func() {
		close(d.done)
		d.file.Close()
	})
}

// read passes the kernel's events to run until the watch is closed.
func (d *dirWatch) read() {
	buf := make([]byte, 64<<10)
	for {
		n, err := d.file.Read(buf)
		if err != nil {
			select {
			case d.errs <- err:
			case <-d.done:
			}
			return
		}
		var evs []inotifyEvent
		for off := 0; off+unix.SizeofInotifyEvent <= n; {
			raw := (*unix.InotifyEvent)(unsafe.Pointer(&buf[off]))
			end := off + unix.SizeofInotifyEvent + int(raw.Len)
			if end > n {
				break
			}
			name := strings.TrimRight(string(buf[off+unix.SizeofInotifyEvent:end]), "\x00")
			evs = append(evs, inotifyEvent{wd: raw.Wd, mask: raw.Mask, cookie: raw.Cookie, name: name})
			off = end
		}
		select {
		case d.batches <- evs:
		case <-d.done:
			return
		}
	}
}

// watchError explains a failure to set up an inotify watch on sp.
func watchError(sp string, err error) error {
	inner := unwrapOS(err)
	if errors.Is(inner, syscall.ENOSPC) || errors.Is(inner, syscall.EMFILE) {
		return fmt.Errorf("watching %q: the kernel's inotify limit is reached; watch fewer directories or raise fs.inotify.max_user_watches and fs.inotify.max_user_instances: %w", encodePath(sp), sandbox.ErrLimit)
	}
	if errors.Is(inner, syscall.ENOENT) {
		// procFD's path is missing: /proc is not mounted.
		return fmt.Errorf("watching %q: the daemon cannot reach /proc/self/fd: %w", encodePath(sp), sandbox.ErrUnavailable)
	}
	return pathError("watching", sp, err)
}

// addTree watches the open directory fd (rel below the watched one) and,
// in a recursive watch, every directory below it, opened by descriptor
// without following symlinks. With emit set (rel was just created inside
// a recursive watch) it also reports a create event for each entry found,
// since they may have appeared before the watch was in place; a client
// may then see some creations twice. A failure on the watched directory
// itself or an exhausted inotify limit is an error; directories that
// vanish or cannot be read are skipped.
func (d *dirWatch) addTree(fd int, rel string, emit func(*pb.FilesystemEvent) error) error {
	wd, err := unix.InotifyAddWatch(d.ifd, procFD(fd), watchMask)
	if err != nil {
		werr := watchError(path.Join(d.sp, rel), err)
		if rel == "." || errors.Is(werr, sandbox.ErrLimit) || errors.Is(werr, sandbox.ErrUnavailable) {
			return werr
		}
		return nil
	}
	d.dirs[int32(wd)] = rel
	if !d.recursive {
		return nil
	}
	names, err := readDirNames(fd)
	if err != nil {
		return nil
	}
	slices.Sort(names)
	for _, name := range names {
		crel := path.Join(rel, name)
		if emit != nil {
			if err := d.emit(crel, unix.IN_CREATE, emit); err != nil {
				return err
			}
		}
		var st unix.Stat_t
		if fstatat(fd, name, &st) != nil || st.Mode&unix.S_IFMT != unix.S_IFDIR {
			continue
		}
		cfd, err := openat(fd, name, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
		if err != nil {
			continue
		}
		err = d.addTree(cfd, crel, emit)
		unix.Close(cfd)
		if err != nil {
			return err
		}
	}
	return nil
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
		case err := <-d.errs:
			return fmt.Errorf("watching %q: %w", encodePath(d.sp), mapOSError(unwrapOS(err)))
		case evs := <-d.batches:
			for _, ev := range evs {
				if err := d.handle(ev, emit); err != nil {
					return err
				}
			}
			if ticker != nil {
				ticker.Reset(keepEvery)
			}
		}
	}
}

// handle turns one inotify event into envd events, as fsnotify (which
// envd uses) would, and in a recursive watch starts watching a directory
// that was just created.
func (d *dirWatch) handle(ev inotifyEvent, emit func(*pb.FilesystemEvent) error) error {
	if ev.mask&unix.IN_Q_OVERFLOW != 0 {
		return fmt.Errorf("watching %q: more changes happened than the kernel could queue and some were lost; watch again: %w", encodePath(d.sp), sandbox.ErrLimit)
	}
	dir, ok := d.dirs[ev.wd]
	if !ok {
		return nil // a watch already removed
	}
	rel := dir
	if ev.name != "" {
		rel = path.Join(dir, ev.name)
		if mask, ok := d.translateUpload(ev); ok {
			if mask == 0 {
				return nil
			}
			return d.emit(rel, mask, emit)
		}
	}
	switch {
	case ev.mask&(unix.IN_IGNORED|unix.IN_UNMOUNT) != 0:
		delete(d.dirs, ev.wd)
		return nil
	case ev.mask&unix.IN_DELETE_SELF != 0:
		// The parent's watch reports the removal of a subdirectory.
		delete(d.dirs, ev.wd)
		if dir != "." {
			return nil
		}
	case ev.mask&unix.IN_MOVE_SELF != 0:
		// The directory moved: its name here is stale, so stop watching
		// it (a move within the tree is seen by the parent's watch, which
		// then watches it under its new name).
		unix.InotifyRmWatch(d.ifd, uint32(ev.wd))
		delete(d.dirs, ev.wd)
	}
	if err := d.emit(rel, ev.mask, emit); err != nil {
		return err
	}
	if d.recursive && ev.mask&(unix.IN_CREATE|unix.IN_MOVED_TO) != 0 && ev.mask&unix.IN_ISDIR != 0 {
		n, err := d.f.lookupIn(d.confine, path.Join(d.sp, rel), lookupOpts{})
		if err != nil {
			return nil
		}
		defer n.close()
		if !n.isDir() {
			return nil
		}
		fd, err := n.open(unix.O_RDONLY | unix.O_DIRECTORY)
		if err != nil {
			return nil
		}
		defer unix.Close(fd)
		return d.addTree(fd, rel, emit)
	}
	return nil
}

// emit reports the operations in mask on rel (relative to the watched
// directory), in envd's order (create, rename, chmod, write, remove), one
// event each.
func (d *dirWatch) emit(rel string, mask uint32, emit func(*pb.FilesystemEvent) error) error {
	for _, m := range []struct {
		mask uint32
		t    pb.EventType
	}{
		{unix.IN_CREATE | unix.IN_MOVED_TO, pb.EventType_EVENT_TYPE_CREATE},
		{unix.IN_MOVE_SELF | unix.IN_MOVED_FROM, pb.EventType_EVENT_TYPE_RENAME},
		{unix.IN_ATTRIB, pb.EventType_EVENT_TYPE_CHMOD},
		{unix.IN_MODIFY, pb.EventType_EVENT_TYPE_WRITE},
		{unix.IN_DELETE | unix.IN_DELETE_SELF, pb.EventType_EVENT_TYPE_REMOVE},
	} {
		if mask&m.mask == 0 {
			continue
		}
		e := &pb.FilesystemEvent{Name: encodePath(rel), Type: m.t}
		// Removed and renamed paths are gone: stat-ing them could only
		// describe something else that took their place.
		if d.includeEntry && m.t != pb.EventType_EVENT_TYPE_REMOVE && m.t != pb.EventType_EVENT_TYPE_RENAME {
			if n, err := d.f.lookupIn(d.confine, path.Join(d.sp, rel), lookupOpts{}); err == nil {
				if n.exists {
					e.Entry = d.f.entryFromStat(d.confine, n)
				}
				n.close()
			}
		}
		if err := emit(e); err != nil {
			return err
		}
	}
	return nil
}
