package cgroup

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// TestChild: a child group below a sandbox's has its own limits in the
// hierarchies asked for; a thread that writes "0" to its tasks files
// (opened earlier) moves there, and what it forks is born there, while
// its process stays where it was; deleting the parent deletes the child.
func TestChild(t *testing.T) {
	r := testRoot(t)
	if r.Version() == V2 {
		if _, err := newGroup(t, r, Limits{}).NewChild("work", Limits{}, Memory, Pids); !errors.Is(err, sandbox.ErrUnavailable) {
			t.Errorf("NewChild on v2: %v, want ErrUnavailable", err)
		}
		return
	}
	g := newGroup(t, r, Limits{Pids: 40, MemoryBytes: 96 << 20})
	w, err := g.NewChild("work", Limits{Pids: 8, MemoryBytes: 32 << 20}, Memory, Pids)
	if err != nil {
		t.Fatal(err)
	}
	if w.Name() != g.Name()+"/work" || w.Path(Pids) != filepath.Join(g.Path(Pids), "work") || w.Path(CPU) != "" {
		t.Errorf("child: name %q, pids path %q, cpu path %q", w.Name(), w.Path(Pids), w.Path(CPU))
	}
	if got := strings.TrimSpace(readFile(t, filepath.Join(w.Path(Pids), "pids.max"))); got != "8" {
		t.Errorf("the child's pids.max = %q, want 8", got)
	}
	if _, err := g.NewChild("work", Limits{}, Memory, Pids); !errors.Is(err, sandbox.ErrExist) {
		t.Errorf("a second child of the same name: %v, want ErrExist", err)
	}
	loaded, err := g.LoadChild("work", Memory, Pids)
	if err != nil || loaded.Path(Memory) != w.Path(Memory) {
		t.Fatalf("LoadChild: %v, %v", loaded, err)
	}
	if len(w.TasksFiles()) != 2 {
		t.Fatalf("TasksFiles() = %v, want memory's and pids'", w.TasksFiles())
	}

	var files []*os.File
	for _, p := range w.TasksFiles() {
		f, err := os.OpenFile(p, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		files = append(files, f)
	}
	type result struct {
		pid, tid int
		err      error
	}
	got, stop := make(chan result), make(chan struct{})
	var mover func(locked chan struct{})
	mover = func(locked chan struct{}) {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		if unix.Gettid() == unix.Getpid() {
			// The main thread moved would take the process along (/proc/PID/cgroup shows it).
			next := make(chan struct{})
			go mover(next)
			<-next
			runtime.UnlockOSThread()
			return
		}
		close(locked)
		for _, f := range files {
			if _, err := f.Write([]byte("0")); err != nil {
				got <- result{err: err}
				return
			}
			f.Close()
		}
		cmd := exec.Command("sleep", "60")
		err := cmd.Start()
		if err != nil {
			got <- result{err: err}
			return
		}
		got <- result{pid: cmd.Process.Pid, tid: unix.Gettid()}
		<-stop
		cmd.Process.Kill()
		cmd.Wait()
		close(got)
	}
	go mover(make(chan struct{}))
	res := <-got
	if res.err != nil {
		t.Fatal(res.err)
	}
	own := readFile(t, "/proc/self/cgroup")
	child := readFile(t, fmt.Sprintf("/proc/%d/cgroup", res.pid))
	for _, line := range strings.Split(child, "\n") {
		f := strings.SplitN(line, ":", 3)
		if len(f) != 3 {
			continue
		}
		for _, c := range strings.Split(f[1], ",") {
			switch c {
			case Memory, Pids:
				if !strings.HasSuffix(w.Path(c), f[2]) {
					t.Errorf("the child process's %s cgroup is %q, want the child group's (%s)", c, f[2], w.Path(c))
				}
			}
		}
	}
	if strings.Contains(own, "/work") {
		t.Errorf("the test process moved into the child:\n%s", own)
	}
	stats, err := w.Stats()
	if err != nil || stats.Pids < 2 {
		t.Errorf("the child's stats: %+v %v, want the thread and the sleep", stats, err)
	}

	// The thread ends, and leaves the group (a Delete kills every process
	// with a thread in it).
	close(stop)
	<-got
	if !eventually(5*time.Second, func() bool {
		_, err := os.Stat(fmt.Sprintf("/proc/self/task/%d", res.tid))
		return errors.Is(err, os.ErrNotExist)
	}) {
		t.Fatal("the thread in the child did not end")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(w.Path(Pids)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the child outlived its parent's Delete: %v", err)
	}
}
