package fsys

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/guest/gen/filesystem/filesystemconnect"
)

// watchEnv is the filesystem service alone behind an HTTP server, over
// a temporary root with a /workspace.
type watchEnv struct {
	svc  *Service
	root string
	fs   filesystemconnect.FilesystemClient
}

func newWatchEnv(t *testing.T) *watchEnv {
	t.Helper()
	root := t.TempDir()
	if err := os.MkdirAll(filepath.Join(root, "workspace"), 0o755); err != nil {
		t.Fatal(err)
	}
	svc := New(Config{Root: root, Workdir: "/workspace", KeepAlive: 30 * time.Second})
	mux := http.NewServeMux()
	mux.Handle(filesystemconnect.NewFilesystemHandler(svc))
	hs := httptest.NewServer(WithConfine(mux))
	t.Cleanup(func() {
		hs.Close()
		svc.CloseWatchers()
	})
	return &watchEnv{svc: svc, root: root, fs: filesystemconnect.NewFilesystemClient(hs.Client(), hs.URL)}
}

func (e *watchEnv) host(p string) string { return filepath.Join(e.root, p) }

// wantCode fails unless err has the Connect code want and keeps the host
// root out of its message.
func wantCode(t *testing.T, e *watchEnv, err error, want connect.Code) {
	t.Helper()
	if err == nil {
		t.Fatalf("got no error, want %v", want)
	}
	if got := connect.CodeOf(err); got != want {
		t.Fatalf("got code %v (%v), want %v", got, err, want)
	}
	if strings.Contains(err.Error(), e.root) {
		t.Errorf("message %q reveals the host root %q", err.Error(), e.root)
	}
}

func TestWatchPollingBounded(t *testing.T) {
	e := newWatchEnv(t)
	ctx := context.Background()
	res, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/workspace"}))
	if err != nil {
		t.Fatal(err)
	}
	id := res.Msg.GetWatcherId()
	// Each write is at least one event; never poll, so the queue fills.
	fh, err := os.Create(e.host("/workspace/busy"))
	if err != nil {
		t.Fatal(err)
	}
	defer fh.Close()
	deadline := time.Now().Add(60 * time.Second)
	for {
		for range 1000 {
			if _, err := fh.Write([]byte("x")); err != nil {
				t.Fatal(err)
			}
		}
		f := e.svc
		pw, err := f.pollWatcher(id)
		if err != nil {
			t.Fatal(err)
		}
		pw.mu.Lock()
		n, werr := len(pw.events), pw.err
		pw.mu.Unlock()
		if n > maxQueuedEvents {
			t.Fatalf("%d events queued, want at most %d", n, maxQueuedEvents)
		}
		if werr != nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("watcher never reported falling behind (%d events queued)", n)
		}
	}
	_, err = e.fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: id}))
	wantCode(t, e, err, connect.CodeResourceExhausted)
}
