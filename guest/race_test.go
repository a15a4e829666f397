package guest

import (
	"archive/tar"
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"connectrpc.com/connect"
	"golang.org/x/sys/unix"

	fspb "github.com/cove-sandbox/cove/guest/gen/filesystem"
)

// TestFSRaceSymlinkSwap attacks the file API as a hostile sandbox would:
// while the API reads, writes, lists, removes, moves, makes directories,
// archives, extracts and watches through /workspace/d, a goroutine swaps
// that directory for a symlink to a directory outside the workspace and
// back, as fast as renameat2(RENAME_EXCHANGE) goes. Whatever the API
// answers (errors are fine while the tree changes under it), it must never
// return a byte of the outside directory nor change it: the canary's
// content is never read back, and the outside tree is the same at the end.
//
// The outside directory is the sandbox's own /etc (the daemon runs as root
// in a sandbox, so reaching it through the workspace bypasses the user's
// permissions) and a host directory outside the daemon's Root (what the
// hostproc runtime's Root is: a host directory).
func TestFSRaceSymlinkSwap(t *testing.T) {
	for _, target := range []string{"sandbox-etc", "host-dir"} {
		t.Run(target, func(t *testing.T) {
			srv, c := startTestServer(t, Config{})
			root := srv.cfg.Root
			s := NewSession(c, SessionOptions{ID: "race"})

			var outside, link string
			switch target {
			case "sandbox-etc":
				outside = filepath.Join(root, "etc", "fsrace")
				link = "../etc/fsrace"
			case "host-dir":
				outside = t.TempDir()
				link = outside
			}
			a := newSwapAttack(t, root, outside, link)
			a.run(t, s, 1000, 10*time.Second)
		})
	}
}

// canary is the content of every file outside the workspace.
const canary = "CANARY-outside-the-workspace"

// swapAttack is one directory of the workspace, /workspace/d, that a
// goroutine keeps swapping with a symlink to a directory outside it.
type swapAttack struct {
	inside  string // the real directory, named /workspace/d or /workspace/.d-swap
	outside string // the host path of the outside directory
	realFD  int    // the real directory, whatever its name
	before  map[string]string
}

func newSwapAttack(t *testing.T, root, outside, link string) *swapAttack {
	t.Helper()
	ws := filepath.Join(root, "workspace")
	mkTree(t, outside, canary)
	if err := os.WriteFile(filepath.Join(outside, "outside-only.txt"), []byte(canary), 0o640); err != nil {
		t.Fatal(err)
	}
	inside := filepath.Join(ws, "d")
	mkTree(t, inside, "inside")
	if err := os.Symlink(link, filepath.Join(ws, ".d-swap")); err != nil {
		t.Fatal(err)
	}
	fd, err := unix.Open(inside, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return &swapAttack{inside: inside, outside: outside, realFD: fd, before: snapshotTree(t, outside)}
}

// mkTree makes the files both directories hold, with the given content.
func mkTree(t *testing.T, dir, content string) {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o750); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"secret.txt", "victim", "sub/secret.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), 0o640); err != nil {
			t.Fatal(err)
		}
	}
}

// snapshotTree describes every entry under dir: type, mode and content.
func snapshotTree(t *testing.T, dir string) map[string]string {
	t.Helper()
	out := map[string]string{}
	err := filepath.WalkDir(dir, func(p string, de fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := de.Info()
		if err != nil {
			return err
		}
		desc := fi.Mode().String()
		if fi.Mode().IsRegular() {
			data, err := os.ReadFile(p)
			if err != nil {
				return err
			}
			desc += fmt.Sprintf(" %x", sha256.Sum256(data))
		}
		rel, _ := filepath.Rel(dir, p)
		out[rel] = desc
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// flip swaps the real directory and the symlink until stop closes.
func (a *swapAttack) flip(stop <-chan struct{}, done chan<- int) {
	d, swap := a.inside, filepath.Join(filepath.Dir(a.inside), ".d-swap")
	n := 0
	for {
		select {
		case <-stop:
			// Leave the real directory in place.
			if fi, err := os.Lstat(d); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
				unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE)
			}
			done <- n
			return
		default:
		}
		if err := unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE); err == nil {
			n++
		}
	}
}

// restore puts back, in the real directory, what an operation of the
// attack may have removed or moved away.
func (a *swapAttack) restore() {
	if fd, err := unix.Openat(a.realFD, "victim", unix.O_WRONLY|unix.O_CREAT|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0o640); err == nil {
		unix.Write(fd, []byte("inside"))
		unix.Close(fd)
	}
	unix.Mkdirat(a.realFD, "sub", 0o750)
}

// run attacks for n rounds of every operation or until budget is spent.
func (a *swapAttack) run(t *testing.T, s *Session, n int, budget time.Duration) {
	ctx := context.Background()
	rounds := 0
	stop, flips := make(chan struct{}), make(chan int, 1)
	go a.flip(stop, flips)
	stopped := false
	stopFlipping := func() int {
		if stopped {
			return 0
		}
		stopped = true
		close(stop)
		return <-flips
	}
	defer stopFlipping()

	// violations holds the first escape seen per operation; the attack
	// goes on for a while after the first, to show every operation that
	// escapes.
	violations := map[string]string{}
	firstAt := -1
	violation := func(op, msg string) {
		if _, ok := violations[op]; !ok {
			violations[op] = msg
		}
		if firstAt < 0 {
			firstAt = rounds
		}
	}
	leaked := func(op string, data []byte) {
		if bytes.Contains(data, []byte(canary)) {
			violation(op, "returned the content of a file outside the workspace")
		}
	}
	var tarIn bytes.Buffer
	tw := tar.NewWriter(&tarIn)
	tw.WriteHeader(&tar.Header{Name: "tarred.txt", Mode: 0o644, Size: 6, Typeflag: tar.TypeReg})
	tw.Write([]byte("tarred"))
	tw.Close()

	// ok counts the successes per operation: an API that failed every
	// call while the tree changes would pass the rest of the test.
	ok := map[string]int{}
	count := func(op string, err error) {
		if err == nil {
			ok[op]++
		}
	}
	var watchers []string
	deadline := time.Now().Add(budget)
	for ; rounds < n && time.Now().Before(deadline) && (firstAt < 0 || rounds < firstAt+100); rounds++ {
		rc, err := s.ReadFile(ctx, "d/secret.txt")
		if err == nil {
			data, rerr := io.ReadAll(rc)
			rc.Close()
			leaked("ReadFile", data)
			count("ReadFile", rerr)
		}
		if _, err := s.Stat(ctx, "d/outside-only.txt"); err == nil {
			violation("Stat", "found a file outside the workspace")
		}
		_, err = s.Stat(ctx, "d/secret.txt")
		count("Stat", err)
		fis, err := s.List(ctx, "d", 2)
		count("List", err)
		if err == nil {
			for _, fi := range fis {
				if fi.Name == "outside-only.txt" {
					violation("List", "returned a file outside the workspace")
				}
			}
		}
		var tarOut bytes.Buffer
		err = s.ReadDirTar(ctx, "d", &tarOut)
		count("ReadDirTar", err)
		if err == nil {
			leaked("ReadDirTar", tarOut.Bytes())
			if bytes.Contains(tarOut.Bytes(), []byte("outside-only.txt")) {
				violation("ReadDirTar", "archived a file outside the workspace")
			}
		}
		count("WriteFile", s.WriteFile(ctx, "d/secret.txt", strings.NewReader("written"), 0o666))
		count("WriteFile new", s.WriteFile(ctx, fmt.Sprintf("d/new-%d", rounds), strings.NewReader("new"), 0))
		count("Mkdir", s.Mkdir(ctx, fmt.Sprintf("d/newdir-%d", rounds)))
		count("Remove", s.Remove(ctx, "d/victim"))
		a.restore()
		count("Move out", s.Move(ctx, "d/victim", fmt.Sprintf("moved-%d", rounds)))
		a.restore()
		if s.WriteFile(ctx, "mv-src", strings.NewReader("dropped"), 0) == nil {
			count("Move in", s.Move(ctx, "mv-src", fmt.Sprintf("d/dropped-%d", rounds)))
		}
		count("WriteDirTar", s.WriteDirTar(ctx, "d", bytes.NewReader(tarIn.Bytes())))
		if rounds%4 == 0 {
			count("Remove tree", s.Remove(ctx, "d/sub"))
			a.restore()
		}
		if rounds%10 == 0 && len(watchers) < 100 {
			res, err := s.c.FS.CreateWatcher(ctx, req(s, &fspb.CreateWatcherRequest{Path: "d", Recursive: rounds%20 == 0}))
			if err == nil {
				watchers = append(watchers, res.Msg.GetWatcherId())
			}
		}
	}
	flipped := stopFlipping()
	t.Logf("%d rounds of every operation, %d swaps; successes: %v", rounds, flipped, ok)
	for _, op := range []string{"ReadFile", "Stat", "List", "ReadDirTar", "WriteFile", "WriteFile new", "Mkdir",
		"Remove", "Move out", "Move in", "WriteDirTar", "Remove tree"} {
		if ok[op] == 0 && len(violations) == 0 {
			t.Errorf("%s never succeeded in %d rounds: the attack tested nothing", op, rounds)
		}
	}
	if flipped < rounds {
		t.Fatalf("only %d swaps in %d rounds: the attack did not run", flipped, rounds)
	}

	// A watch set up through the symlink would report changes outside;
	// one set up on the real directory stopped when the directory first
	// moved (as envd's do). A watch made now shows that events arrive in
	// the time waited.
	res, err := s.c.FS.CreateWatcher(ctx, req(s, &fspb.CreateWatcherRequest{Path: "d"}))
	if err != nil {
		t.Fatalf("CreateWatcher after the attack: %v", err)
	}
	watchers = append(watchers, res.Msg.GetWatcherId())
	if err := os.WriteFile(filepath.Join(a.outside, "ping"), []byte(canary), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(a.inside, "pong"), nil, 0o600); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(filepath.Join(a.outside, "ping"))
	var names []string
	seen := func() bool { return slices.Contains(names, "pong") }
	for wait := time.Now().Add(10 * time.Second); !seen() && time.Now().Before(wait); {
		for _, id := range watchers {
			res, err := s.c.FS.GetWatcherEvents(ctx, req(s, &fspb.GetWatcherEventsRequest{WatcherId: id}))
			if err != nil {
				t.Fatalf("GetWatcherEvents: %v", err)
			}
			for _, ev := range res.Msg.GetEvents() {
				names = append(names, ev.GetName())
			}
		}
		time.Sleep(20 * time.Millisecond)
	}
	if slices.Contains(names, "ping") {
		violation("CreateWatcher", "reported a change in a directory outside the workspace")
	}
	if !seen() {
		t.Errorf("no watcher reported the change in the workspace (got %v): the watches do not work", names)
	}
	for _, id := range watchers {
		s.c.FS.RemoveWatcher(ctx, req(s, &fspb.RemoveWatcherRequest{WatcherId: id}))
	}
	os.Remove(filepath.Join(a.outside, "ping"))

	after := snapshotTree(t, a.outside)
	var diff []string
	for k, v := range after {
		if a.before[k] != v {
			diff = append(diff, fmt.Sprintf("%s: %q, was %q", k, v, a.before[k]))
		}
	}
	for k, v := range a.before {
		if _, ok := after[k]; !ok {
			diff = append(diff, fmt.Sprintf("%s: removed, was %q", k, v))
		}
	}
	if len(diff) > 0 {
		slices.Sort(diff)
		violation("writes", "changed the directory outside the workspace:\n"+strings.Join(diff, "\n"))
	}
	for op, msg := range violations {
		t.Errorf("%s %s", op, msg)
	}
}

// TestFSMoveNoReplace: with NoReplaceHeader (what Session.Move sends),
// the daemon itself refuses an existing destination, so one that appears
// between the Session's check and the move is not replaced; without it,
// Move replaces as envd's does.
func TestFSMoveNoReplace(t *testing.T) {
	e := newFSEnv(t, Config{})
	ctx := context.Background()
	move := func(noReplace bool) error {
		r := connect.NewRequest(&fspb.MoveRequest{Source: "/workspace/src", Destination: "/workspace/dst"})
		if noReplace {
			r.Header().Set(NoReplaceHeader, "1")
		}
		_, err := e.fs.Move(ctx, r)
		return err
	}
	e.write(t, "/workspace/src", "source")
	e.write(t, "/workspace/dst", "destination")
	wantCode(t, e, move(true), connect.CodeAlreadyExists)
	for p, want := range map[string]string{"/workspace/src": "source", "/workspace/dst": "destination"} {
		if data, err := os.ReadFile(e.host(p)); err != nil || string(data) != want {
			t.Errorf("%s after a refused move: %q, %v; want %q", p, data, err, want)
		}
	}
	if err := move(false); err != nil {
		t.Fatalf("Move without the header: %v", err)
	}
	if data, err := os.ReadFile(e.host("/workspace/dst")); err != nil || string(data) != "source" {
		t.Errorf("dst after a move that replaces: %q, %v", data, err)
	}
}
