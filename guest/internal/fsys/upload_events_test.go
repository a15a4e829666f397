package fsys

import (
	"context"
	"errors"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"

	pb "github.com/cove-sandbox/cove/guest/gen/filesystem"
)

// watchEvents streams a WatchDir of dir into a channel.
func watchEvents(t *testing.T, e *watchEnv, dir string, recursive bool) <-chan *pb.FilesystemEvent {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stream, err := e.fs.WatchDir(ctx, connect.NewRequest(&pb.WatchDirRequest{Path: dir, Recursive: recursive}))
	if err != nil {
		t.Fatal(err)
	}
	if !stream.Receive() || stream.Msg().GetStart() == nil {
		t.Fatalf("no start event: %v", stream.Err())
	}
	ch := make(chan *pb.FilesystemEvent, 1000)
	go func() {
		defer close(ch)
		for stream.Receive() {
			if ev := stream.Msg().GetFilesystem(); ev != nil {
				ch <- ev
			}
		}
	}()
	return ch
}

// eventsUntil collects events until one creates flag (written by the
// host after what the test is about: events come in order).
func eventsUntil(t *testing.T, e *watchEnv, ch <-chan *pb.FilesystemEvent, dir, flag string) []string {
	t.Helper()
	if err := os.WriteFile(e.host(dir+"/"+flag), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-ch:
			if !ok {
				t.Fatalf("the watch ended; events so far: %q", got)
			}
			if ev.GetName() == flag {
				if ev.GetType() == pb.EventType_EVENT_TYPE_CREATE {
					return got
				}
				continue
			}
			got = append(got, ev.GetName()+" "+strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_")))
		case <-timeout:
			t.Fatalf("no create event of %s; events so far: %q", flag, got)
		}
	}
}

// failingReader gives some bytes, then fails: an upload cut short.
type failingReader struct{ n int }

func (r *failingReader) Read(p []byte) (int, error) {
	if r.n > 0 {
		r.n = 0
		return copy(p, "partial"), nil
	}
	return 0, errors.New("connection reset")
}

// TestUploadWatchEvents: an upload streams into a temporary file renamed
// over its target, and a watch reports it as envd's in-place write
// would: a create and a write of a new file, a write of a replaced one,
// nothing of the temporary file or of an upload that failed. A file the
// sandbox names like a temporary one is reported as it is.
func TestUploadWatchEvents(t *testing.T) {
	e := newWatchEnv(t)
	ctx := context.Background()
	if err := os.MkdirAll(e.host("/workspace/w/sub"), 0o755); err != nil {
		t.Fatal(err)
	}
	upload := func(p, data string) {
		t.Helper()
		if _, err := e.svc.writeFile(ctx, p, strings.NewReader(data), writeOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		name      string
		recursive bool
		do        func()
		want      []string
	}{
		{"new file", false, func() { upload("/workspace/w/new.txt", "first") },
			[]string{"new.txt create", "new.txt write"}},
		{"replaced file", false, func() { upload("/workspace/w/new.txt", "second") },
			[]string{"new.txt write"}},
		{"in a subdirectory", true, func() { upload("/workspace/w/sub/a.txt", "a"); upload("/workspace/w/sub/a.txt", "b") },
			[]string{"sub/a.txt create", "sub/a.txt write", "sub/a.txt write"}},
		{"failed upload", false, func() {
			_, err := e.svc.writeFile(ctx, "/workspace/w/new.txt", &failingReader{n: 1}, writeOptions{})
			if err == nil {
				t.Fatal("an upload whose body failed succeeded")
			}
		}, nil},
		{"the sandbox's own look-alike", false, func() {
			if err := os.WriteFile(e.host("/workspace/w/"+uploadPrefix+"0123456789abcdef"), []byte("x"), 0o644); err != nil {
				t.Fatal(err)
			}
		}, []string{uploadPrefix + "0123456789abcdef create", uploadPrefix + "0123456789abcdef write"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ch := watchEvents(t, e, "/workspace/w", tc.recursive)
			tc.do()
			got := eventsUntil(t, e, ch, "/workspace/w", "flag-"+strings.ReplaceAll(tc.name, " ", "-"))
			if !slices.Equal(got, tc.want) {
				t.Errorf("events %q, want %q", got, tc.want)
			}
		})
	}
	data, err := os.ReadFile(e.host("/workspace/w/new.txt"))
	if err != nil || string(data) != "second" {
		t.Errorf("new.txt after a failed upload: %q %v, want the last good upload's content", data, err)
	}
	ents, _ := os.ReadDir(e.host("/workspace/w"))
	for _, ent := range ents {
		if strings.HasPrefix(ent.Name(), uploadPrefix) && ent.Name() != uploadPrefix+"0123456789abcdef" {
			t.Errorf("temporary file %s left behind", ent.Name())
		}
	}
}

// TestUploadNotesBounded: the notes of uploads a watch may still see are
// bounded in number.
func TestUploadNotesBounded(t *testing.T) {
	var u uploadNotes
	for i := range maxUploadNotes + 10 {
		u.add(uploadPrefix+strings.Repeat("x", i%7)+newID(), false)
	}
	if len(u.notes) > maxUploadNotes || len(u.order) != len(u.notes) {
		t.Fatalf("%d notes (%d in order), want at most %d", len(u.notes), len(u.order), maxUploadNotes)
	}
}

// TestUploadPollWatcherEvents: the polling watchers (CreateWatcher,
// GetWatcherEvents; E2B's Python SDK's sync watch_dir) see uploads as the
// streamed watch does.
func TestUploadPollWatcherEvents(t *testing.T) {
	e := newWatchEnv(t)
	ctx := context.Background()
	if err := os.MkdirAll(e.host("/workspace/p"), 0o755); err != nil {
		t.Fatal(err)
	}
	res, err := e.fs.CreateWatcher(ctx, connect.NewRequest(&pb.CreateWatcherRequest{Path: "/workspace/p"}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := e.svc.writeFile(ctx, "/workspace/p/up.txt", strings.NewReader("x"), writeOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(e.host("/workspace/p/flag"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	var got []string
	for end := time.Now().Add(30 * time.Second); !slices.Contains(got, "flag create"); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(end) {
			t.Fatalf("no create event of flag; events so far: %q", got)
		}
		evs, err := e.fs.GetWatcherEvents(ctx, connect.NewRequest(&pb.GetWatcherEventsRequest{WatcherId: res.Msg.GetWatcherId()}))
		if err != nil {
			t.Fatal(err)
		}
		for _, ev := range evs.Msg.GetEvents() {
			got = append(got, ev.GetName()+" "+strings.ToLower(strings.TrimPrefix(ev.GetType().String(), "EVENT_TYPE_")))
		}
	}
	if want := []string{"up.txt create", "up.txt write", "flag create"}; !slices.Equal(got, want) {
		t.Errorf("events %q, want %q", got, want)
	}
}
