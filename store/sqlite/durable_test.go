package sqlite

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/cove-sandbox/cove/store"
)

// TestDurableAcrossReopen writes one of everything, closes the store,
// opens the file again and finds it all as written.
func TestDurableAcrossReopen(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	ctx := t.Context()
	key := store.APIKey{ID: "key-a", TeamID: teamA.ID, Name: "ci", Prefix: "cove_a", Hash: "hash-a", Admin: true, CreatedAt: t0, LastUsedAt: ptr(t0.Add(time.Hour))}
	box := sb("sb-1", teamA.ID, 0, "env", "prod")
	box.Deadline = t0.Add(time.Hour)
	box.IdleTimeout = time.Minute
	snap := store.Snapshot{ID: "snap-1", TeamID: teamA.ID, SandboxID: box.ID, Size: 42, CreatedAt: t0}
	port := store.Port{SandboxID: box.ID, Port: 8080, Token: "tok", CreatedAt: t0}
	u := use(teamA.ID, box.ID, 0, 10, 1.5, 1000)

	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	for _, err := range []error{
		s.CreateTeam(ctx, teamA),
		s.CreateKey(ctx, key),
		s.PutSandbox(ctx, box),
		s.PutSnapshot(ctx, snap),
		s.PutPort(ctx, port),
		s.AddUsage(ctx, u),
	} {
		checkErr(t, err, nil)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openAt(t, path)
	check := func(what string, want, got any, err error) {
		t.Helper()
		checkErr(t, err, nil)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s after reopening (-want +got):\n%s", what, diff)
		}
	}
	gotTeam, err := s.GetTeam(ctx, teamA.ID)
	check("team", teamA, gotTeam, err)
	gotKeys, err := s.ListKeys(ctx, teamA.ID)
	check("keys", []store.APIKey{key}, gotKeys, err)
	gotBox, err := s.GetSandbox(ctx, teamA.ID, box.ID)
	check("sandbox", box, gotBox, err)
	page, _, err := s.ListSandboxes(ctx, store.SandboxFilter{Labels: map[string]string{"env": "prod"}})
	check("sandboxes by label", []store.Sandbox{box}, page, err)
	gotSnap, err := s.GetSnapshot(ctx, teamA.ID, snap.ID)
	check("snapshot", snap, gotSnap, err)
	gotPort, err := s.GetPort(ctx, box.ID, port.Port)
	check("port", port, gotPort, err)
	gotUsage, err := s.UsageByTeam(ctx, teamA.ID, u.Start, u.End)
	check("usage", []store.Usage{u}, gotUsage, err)
}

// TestConcurrentWriters runs 20 goroutines that write at once, half of
// them through a second Store on the same file, as a second process
// would, while others read. No call may fail (SQLITE_BUSY, "database is
// locked") and every write must be there after.
func TestConcurrentWriters(t *testing.T) {
	t.Parallel()
	path := filepath.Join(t.TempDir(), "cove.db")
	s1 := openAt(t, path)
	s2 := openAt(t, path)
	ctx := t.Context()
	checkErr(t, s1.CreateTeam(ctx, teamA), nil)
	checkErr(t, s1.CreateKey(ctx, store.APIKey{ID: "k", TeamID: teamA.ID, Hash: "h"}), nil)

	const writers, each = 20, 5
	var wg sync.WaitGroup
	errs := make(chan error, writers*each*3+100)
	for g := range writers {
		s := s1
		if g%2 == 1 {
			s = s2
		}
		wg.Go(func() {
			for i := range each {
				x := sb(fmt.Sprintf("sb-%02d-%02d", g, i), teamA.ID, g*each+i, "g", strconv.Itoa(g))
				if err := s.PutSandbox(ctx, x); err != nil {
					errs <- err
					continue
				}
				if err := s.TouchSandbox(ctx, x.ID, x.CreatedAt.Add(time.Minute)); err != nil {
					errs <- err
				}
				if err := s.AddUsage(ctx, use(teamA.ID, x.ID, 0, 1, 1, 1)); err != nil {
					errs <- err
				}
			}
		})
	}
	// Readers, and the one read that sometimes writes, alongside.
	done := make(chan struct{})
	for r := range 2 {
		s := []*Store{s1, s2}[r%2]
		wg.Go(func() {
			for {
				select {
				case <-done:
					return
				default:
				}
				if _, err := s.KeyByHash(ctx, "h"); err != nil {
					errs <- err
				}
				if _, _, err := s.ListSandboxes(ctx, store.SandboxFilter{TeamID: teamA.ID, Limit: 10}); err != nil {
					errs <- err
				}
				time.Sleep(5 * time.Millisecond) // a busy server, not a spin loop
			}
		})
	}
	go func() {
		// Stop the readers when the writers are done: wait for the
		// writers' count of rows rather than a second WaitGroup.
		defer close(done)
		deadline := time.Now().Add(30 * time.Second)
		for time.Now().Before(deadline) {
			u, err := s1.UsageByTeam(ctx, teamA.ID, at(0), at(1))
			if err == nil && len(u) == writers*each {
				return
			}
			time.Sleep(10 * time.Millisecond)
		}
	}()
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Errorf("concurrent call: %v", err)
	}

	all, _, err := s2.ListSandboxes(ctx, store.SandboxFilter{Limit: maxLimit})
	checkErr(t, err, nil)
	if len(all) != writers*each {
		t.Errorf("got %d sandboxes, want %d", len(all), writers*each)
	}
	for _, x := range all {
		if want := x.CreatedAt.Add(time.Minute); !x.LastActivity.Equal(want) {
			t.Errorf("sandbox %s: last activity %v, want %v", x.ID, x.LastActivity, want)
		}
	}
	u, err := s1.UsageByTeam(ctx, teamA.ID, at(0), at(1))
	checkErr(t, err, nil)
	if len(u) != writers*each {
		t.Errorf("got usage of %d sandboxes, want %d", len(u), writers*each)
	}
}

// crashEnv, set, makes TestCrashSafety the child: it writes to the
// database it names until it is killed.
const crashEnv = "COVE_TEST_SQLITE_CRASH_CHILD"

// TestCrashSafety kills (SIGKILL) a child process that writes in a loop,
// a few times over, and checks after each kill that the database opens,
// is intact, and holds every write the child had reported committed, each
// whole (a sandbox with its labels) or not at all.
func TestCrashSafety(t *testing.T) {
	t.Parallel()
	if path := os.Getenv(crashEnv); path != "" {
		crashChild(path)
		return
	}
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	path := filepath.Join(t.TempDir(), "cove.db")
	ctx := t.Context()
	s, err := Open(ctx, path)
	if err != nil {
		t.Fatal(err)
	}
	checkErr(t, s.CreateTeam(ctx, teamA), nil)
	s.Close()

	reported := map[string]bool{}
	for round := range 3 {
		ids := runCrashChild(t, path, round)
		if len(ids) == 0 {
			t.Fatalf("round %d: the child reported no write", round)
		}
		for _, id := range ids {
			reported[id] = true
		}

		s := openAt(t, path)
		var check string
		if err := s.queryRow(ctx, `PRAGMA integrity_check`).Scan(&check); err != nil || check != "ok" {
			t.Fatalf("round %d: integrity check: %q, %v", round, check, err)
		}
		have := map[string]bool{}
		for _, f := range []store.SandboxFilter{{}, {Labels: map[string]string{"crash": "yes"}}} {
			n := 0
			for f.Limit = maxLimit; ; {
				page, next, err := s.ListSandboxes(ctx, f)
				checkErr(t, err, nil)
				for _, x := range page {
					have[x.ID] = true
				}
				n += len(page)
				if next == "" {
					break
				}
				f.After = next
			}
			if len(f.Labels) > 0 && n != len(have) {
				t.Errorf("round %d: %d sandboxes, %d of them with their labels: a transaction was torn", round, len(have), n)
			}
		}
		for id := range reported {
			if !have[id] {
				t.Errorf("round %d: sandbox %s was reported committed and is gone", round, id)
			}
		}
		t.Logf("round %d: %d writes reported before the kill, %d sandboxes in all", round, len(ids), len(have))
		s.Close()
	}
}

// runCrashChild starts the child, lets it commit a few dozen writes, kills
// it at a random moment, and returns the ids it reported committed.
func runCrashChild(t *testing.T, path string, round int) []string {
	t.Helper()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer r.Close()
	cmd := exec.Command(os.Args[0], "-test.run=^TestCrashSafety$", "-test.count=1")
	cmd.Env = append(os.Environ(), crashEnv+"="+path, "COVE_TEST_CRASH_ROUND="+strconv.Itoa(round))
	cmd.ExtraFiles = []*os.File{w} // fd 3 in the child
	var stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stderr, &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()

	var ids []string
	enough := make(chan struct{})
	lines := make(chan struct{})
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(r)
		for sc.Scan() {
			ids = append(ids, sc.Text())
			if len(ids) == 30 {
				close(enough)
			}
		}
	}()
	select {
	case <-enough:
		time.Sleep(time.Duration(rand.IntN(5000)) * time.Microsecond)
	case <-lines:
	case <-time.After(20 * time.Second):
	}
	cmd.Process.Kill()
	cmd.Wait()
	<-lines // the pipe's write end died with the child: all lines are read
	if len(ids) < 30 {
		t.Logf("child output:\n%s", stderr.String())
	}
	return ids
}

// crashChild writes sandboxes (with labels, so each is a transaction of
// several statements) and usage until it is killed, and reports each id
// on fd 3 once its write is committed.
func crashChild(path string) {
	report := os.NewFile(3, "report")
	ctx := context.Background()
	s, err := Open(ctx, path)
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		os.Exit(2)
	}
	round := os.Getenv("COVE_TEST_CRASH_ROUND")
	stop := time.Now().Add(20 * time.Second) // if the parent never kills
	for i := 0; time.Now().Before(stop); i++ {
		x := sb(fmt.Sprintf("sb-%s-%05d", round, i), teamA.ID, i, "crash", "yes", "round", round, "pad", strings.Repeat("x", 500))
		if err := s.PutSandbox(ctx, x); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		if err := s.AddUsage(ctx, use(teamA.ID, x.ID, 0, 1, 1, 1)); err != nil {
			fmt.Fprintln(os.Stderr, "child:", err)
			os.Exit(2)
		}
		fmt.Fprintln(report, x.ID)
	}
	os.Exit(3)
}
