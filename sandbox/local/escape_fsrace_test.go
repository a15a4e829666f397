package local

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/guest"
	fspb "github.com/cove-sandbox/cove/guest/gen/filesystem"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/sandbox/sandboxtest"

	"connectrpc.com/connect"
)

// TestEscapeFSRace attacks the file API of a real sandbox as the code in
// it would, with the user's rights only: a process swaps /workspace/d
// (the user's) with a symlink to /etc/cove-attack (root's, unreadable to
// the user) as fast as it can while the harness reads, writes, lists,
// removes, moves, makes directories, archives, extracts and watches
// through /workspace/d with the Session, thousands of calls. The daemon
// acts as root, so a call that followed the link would read or change
// what the user cannot: the workspace confinement promises it never
// does. No byte of the canary comes back, and /etc/cove-attack is the
// same at the end.
func TestEscapeFSRace(t *testing.T) { onTiers(t, testEscapeFSRace) }

func testEscapeFSRace(t *testing.T, iso string) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Isolation: iso})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	a := sandboxtest.NewAttacker(t, s)
	role := func(args ...string) string { t.Helper(); return a.Run(t, "root", args...) }
	role("attack-setup")
	before := role("attack-snapshot")

	// The flipper runs for a fixed time; the calls go on while it does.
	var flips strings.Builder
	var flipErr strings.Builder
	// The user makes the tree and the link first: the calls below must
	// not make /workspace/d (as root) before it does.
	a.Run(t, "", "attack-prepare")
	p, err := s.Start(ctx, sandbox.ExecRequest{Cmd: a.Path, Args: []string{"attack-flip", "10"}, Stdout: &flips, Stderr: &flipErr})
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
			if bytes.Contains(data, []byte(sandboxtest.AttackCanary)) {
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
			if bytes.Contains(tarOut.Bytes(), []byte(sandboxtest.AttackCanary)) || bytes.Contains(tarOut.Bytes(), []byte("outside-only")) {
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
	after := role("attack-snapshot")
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
		t.Errorf("calls through /workspace/d reached /etc/cove-attack:\n%s", strings.Join(slices.Compact(escapes), "\n"))
	}
	if before != after {
		t.Errorf("/etc/cove-attack changed:\nbefore:\n%s\nafter:\n%s", before, after)
	}
	for _, op := range []string{"ReadFile", "List", "WriteFile", "Mkdir", "Remove", "Move"} {
		if ok[op] == 0 {
			t.Errorf("%s never succeeded: the attack tested nothing", op)
		}
	}
}
