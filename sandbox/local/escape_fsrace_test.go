package local

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
	"strconv"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest"
	fspb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/sandbox"

	"connectrpc.com/connect"
)

// The attack's roles, run inside a sandbox by the test binary (caught
// before TestMain, so escape_test.go's probe stays as it is):
//
//	fsrace-setup     as root: make /etc/cove-fsrace, the canary, which
//	                 the sandbox's user can neither read nor change
//	fsrace-flip SEC  as the user: make /workspace/d, then swap it with a
//	                 symlink to /etc/cove-fsrace for SEC seconds; print
//	                 the swap count
//	fsrace-snapshot  as root: print every entry of /etc/cove-fsrace
//	                 with its mode and content hash
const (
	fsraceOutside = "/etc/cove-fsrace"
	fsraceCanary  = "CANARY-in-the-sandbox-etc"
)

func init() {
	if len(os.Args) < 2 || !strings.HasPrefix(os.Args[1], "fsrace-") {
		return
	}
	if err := fsraceRole(os.Args[1], os.Args[2:]); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	os.Exit(0)
}

// fsraceTree makes the files both directories hold.
func fsraceTree(dir, content string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o750); err != nil {
		return err
	}
	for _, f := range []string{"secret.txt", "victim", "sub/secret.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), mode); err != nil {
			return err
		}
	}
	return nil
}

func fsraceRole(role string, args []string) error {
	d, swap := "/workspace/d", "/workspace/.d-swap"
	switch role {
	case "fsrace-setup":
		if err := fsraceTree(fsraceOutside, fsraceCanary, 0o640); err != nil {
			return err
		}
		if err := os.Chmod(fsraceOutside, 0o750); err != nil {
			return err
		}
		return os.WriteFile(filepath.Join(fsraceOutside, "outside-only.txt"), []byte(fsraceCanary), 0o640)
	case "fsrace-flip":
		if err := fsraceTree(d, "inside", 0o666); err != nil {
			return err
		}
		if err := os.Symlink(fsraceOutside, swap); err != nil {
			return err
		}
		secs, _ := strconv.Atoi(args[0])
		end := time.Now().Add(time.Duration(secs) * time.Second)
		n := 0
		for time.Now().Before(end) {
			for range 100 {
				if unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE) == nil {
					n++
				}
			}
		}
		if fi, err := os.Lstat(d); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE)
		}
		fmt.Println(n)
		return nil
	case "fsrace-snapshot":
		return filepath.WalkDir(fsraceOutside, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			line := p + " " + fi.Mode().String()
			if fi.Mode().IsRegular() {
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				line += fmt.Sprintf(" %x", sha256.Sum256(data))
			}
			fmt.Println(line)
			return nil
		})
	}
	return fmt.Errorf("unknown role %q", role)
}

// TestEscapeFSRace attacks the file API of a real sandbox as the code in
// it would, with the user's rights only: a process swaps /workspace/d
// (the user's) with a symlink to /etc/cove-fsrace (root's, unreadable to
// the user) as fast as it can while the harness reads, writes, lists,
// removes, moves, makes directories, archives, extracts and watches
// through /workspace/d with the Session, thousands of calls. The daemon
// acts as root, so a call that followed the link would read or change
// what the user cannot: the workspace confinement promises it never
// does. No byte of the canary comes back, and /etc/cove-fsrace is the
// same at the end.
func TestEscapeFSRace(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	err = s.WriteFile(ctx, ".fsrace", f, 0o755)
	f.Close()
	if err != nil {
		t.Fatal(err)
	}
	role := func(args ...string) string {
		t.Helper()
		var out, errOut strings.Builder
		st, err := s.Exec(ctx, sandbox.ExecRequest{Cmd: "/workspace/.fsrace", Args: args, User: "root", Stdout: &out, Stderr: &errOut})
		if err != nil || st.Code != 0 {
			t.Fatalf("%v: %v, exit %+v: %s", args, err, st, errOut.String())
		}
		return out.String()
	}
	role("fsrace-setup")
	before := role("fsrace-snapshot")

	// The flipper runs for a fixed time; the calls go on while it does.
	var flips strings.Builder
	var flipErr strings.Builder
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: "/workspace/.fsrace", Args: []string{"fsrace-flip", "10"}, Stdout: &flips, Stderr: &flipErr})
	if err != nil {
		t.Fatal(err)
	}
	flipping := make(chan struct{})
	go func() { p.Wait(context.Background()); close(flipping) }()

	var tarIn bytes.Buffer
	tw := tar.NewWriter(&tarIn)
	tw.WriteHeader(&tar.Header{Name: "tarred.txt", Mode: 0o644, Size: 6, Typeflag: tar.TypeReg})
	tw.Write([]byte("tarred"))
	tw.Close()
	arch, _ := s.(sandbox.Archiver)
	var fsc interface {
		CreateWatcher(context.Context, *connect.Request[fspb.CreateWatcherRequest]) (*connect.Response[fspb.CreateWatcherResponse], error)
	}
	if gs, ok := s.(interface{ Client() *guest.Client }); ok {
		fsc = gs.Client().FS
	}

	var escapes []string
	escaped := func(op, what string) {
		if len(escapes) < 20 {
			escapes = append(escapes, op+" "+what)
		}
	}
	ok := map[string]int{}
	count := func(op string, err error) {
		if err == nil {
			ok[op]++
		}
	}
	calls, rounds := 0, 0
	done := false
	for ; !done; rounds++ {
		select {
		case <-flipping:
			done = true
		default:
		}
		if rc, err := s.ReadFile(ctx, "d/secret.txt"); err == nil {
			data, rerr := io.ReadAll(rc)
			rc.Close()
			count("ReadFile", rerr)
			if bytes.Contains(data, []byte(fsraceCanary)) {
				escaped("ReadFile", "returned the canary")
			}
		}
		if _, err := s.Stat(ctx, "d/outside-only.txt"); err == nil {
			escaped("Stat", "found a file outside the workspace")
		}
		fis, err := s.List(ctx, "d", 2)
		count("List", err)
		for _, fi := range fis {
			if fi.Name == "outside-only.txt" {
				escaped("List", "listed a file outside the workspace")
			}
		}
		if arch != nil {
			var tarOut bytes.Buffer
			err := arch.ReadDirTar(ctx, "/workspace/d", &tarOut)
			count("ReadDirTar", err)
			if bytes.Contains(tarOut.Bytes(), []byte(fsraceCanary)) || bytes.Contains(tarOut.Bytes(), []byte("outside-only")) {
				escaped("ReadDirTar", "archived the canary")
			}
			count("WriteDirTar", arch.WriteDirTar(ctx, "/workspace/d", bytes.NewReader(tarIn.Bytes())))
			calls += 2
		}
		count("WriteFile", s.WriteFile(ctx, "d/secret.txt", strings.NewReader("written"), 0o666))
		count("Mkdir", s.Mkdir(ctx, fmt.Sprintf("d/newdir-%d", rounds)))
		count("Remove", s.Remove(ctx, "d/victim"))
		s.WriteFile(ctx, "d/victim", strings.NewReader("inside"), 0o644)
		count("Move", s.Move(ctx, "d/victim", fmt.Sprintf("moved-%d", rounds)))
		if rounds%5 == 0 {
			count("Remove tree", s.Remove(ctx, "d/sub"))
			s.WriteFile(ctx, "d/sub/secret.txt", strings.NewReader("inside"), 0o644)
		}
		if fsc != nil && rounds%10 == 0 {
			req := connect.NewRequest(&fspb.CreateWatcherRequest{Path: "/workspace/d", Recursive: true})
			req.Header().Set(guest.ConfineHeader, "/workspace")
			_, err := fsc.CreateWatcher(ctx, req)
			count("CreateWatcher", err)
			calls++
		}
		calls += 9
	}
	after := role("fsrace-snapshot")
	n, err := strconv.Atoi(strings.TrimSpace(flips.String()))
	if err != nil {
		t.Fatalf("the flipper printed %q: %s", flips.String(), flipErr.String())
	}
	t.Logf("%d calls in %d rounds, %d swaps; successes: %v", calls, rounds, n, ok)
	if n < rounds {
		t.Fatalf("only %d swaps in %d rounds: the attack did not run", n, rounds)
	}
	if len(escapes) > 0 {
		slices.Sort(escapes)
		t.Errorf("calls through /workspace/d reached /etc/cove-fsrace:\n%s", strings.Join(slices.Compact(escapes), "\n"))
	}
	if before != after {
		t.Errorf("/etc/cove-fsrace changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, op := range []string{"ReadFile", "List", "WriteFile", "Mkdir", "Remove", "Move"} {
		if ok[op] == 0 {
			t.Errorf("%s never succeeded: the attack tested nothing", op)
		}
	}
}
