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
	"testing"
	"time"

	"github.com/cove-sandbox/cove/store"
	"github.com/cove-sandbox/cove/store/internal/check"
)

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
		var integrity string
		if err := s.queryRow(ctx, `PRAGMA integrity_check`).Scan(&integrity); err != nil || integrity != "ok" {
			t.Fatalf("round %d: integrity check: %q, %v", round, integrity, err)
		}
		have := map[string]bool{}
		for _, f := range []store.SandboxFilter{{}, {Labels: map[string]string{"crash": "yes"}}} {
			n := 0
			for f.Limit = check.MaxLimit; ; {
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
