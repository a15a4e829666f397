package local

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// loopsOf returns the loop devices bound to a sandbox's disk image.
func loopsOf(t *testing.T, rt *Runtime, id string) []string {
	t.Helper()
	image := filepath.Join(rt.dir(id), "disk", "disk.img")
	paths, _ := filepath.Glob("/sys/block/loop*/loop/backing_file")
	var devs []string
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err == nil && strings.TrimSuffix(strings.TrimSpace(string(b)), " (deleted)") == image {
			devs = append(devs, filepath.Base(filepath.Dir(filepath.Dir(p))))
		}
	}
	return devs
}

// holdMounts makes a thread with a copy of a mount namespace, as any
// process that clones one does (a container runtime starting, systemd's
// PrivateTmp, another sandbox): enter, when set, names the namespace to
// copy (/proc/PID/task/TID/ns/mnt); else the copy is of the host's.
// The copy is private, so no unmount elsewhere reaches it. The returned
// func lets go (the thread ends, and the namespace with it).
func holdMounts(t *testing.T, enter string) func() {
	t.Helper()
	ready, done := make(chan error), make(chan struct{})
	go func() {
		runtime.LockOSThread() // never unlocked: the thread ends with the goroutine
		err := func() error {
			if enter != "" {
				fd, err := unix.Open(enter, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					return err
				}
				defer unix.Close(fd)
				if err := unix.Unshare(unix.CLONE_FS); err != nil {
					return err
				}
				if err := unix.Setns(fd, unix.CLONE_NEWNS); err != nil {
					return err
				}
			}
			if err := unix.Unshare(unix.CLONE_NEWNS | unix.CLONE_FS); err != nil {
				return err
			}
			return unix.Mount("", "/", "", unix.MS_REC|unix.MS_PRIVATE, "")
		}()
		ready <- err
		if err == nil {
			<-done
		}
	}()
	if err := <-ready; err != nil {
		t.Fatalf("copying a mount namespace: %v", err)
	}
	var once sync.Once
	release := func() { once.Do(func() { close(done) }) }
	t.Cleanup(release)
	return release
}

// diskNamespace returns the mount namespace file of the supervisor thread
// that holds a running sandbox's disk, or the host's when none does.
func diskNamespace(t *testing.T, rt *Runtime, id string) string {
	t.Helper()
	pids, err := rt.Processes(id)
	if err != nil {
		t.Fatal(err)
	}
	own, _ := os.Readlink("/proc/thread-self/ns/mnt")
	base := filepath.Join("/proc", strconv.Itoa(pids[0]), "task")
	tasks, _ := os.ReadDir(base)
	for _, task := range tasks {
		if ns, err := os.Readlink(filepath.Join(base, task.Name(), "ns", "mnt")); err == nil && ns != own {
			return filepath.Join(base, task.Name(), "ns", "mnt")
		}
	}
	return "/proc/1/ns/mnt"
}

// stopFrees stops a sandbox and checks that its loop device is free.
func stopFrees(t *testing.T, rt *Runtime, id string) {
	t.Helper()
	if err := rt.Stop(context.Background(), id); err != nil {
		t.Fatalf("stop: %v", err)
	}
	if devs := loopsOf(t, rt, id); len(devs) > 0 {
		t.Fatalf("stop reported success, but the disk's loop device %v is still bound", devs)
	}
}

// resumeKeeps resumes a sandbox and checks the file it wrote.
func resumeKeeps(t *testing.T, rt *Runtime, id string) {
	t.Helper()
	s, err := rt.Resume(context.Background(), id)
	if err != nil {
		t.Fatalf("resume: %v", err)
	}
	var out strings.Builder
	if _, err := s.Exec(context.Background(), sandbox.ExecRequest{Cmd: "cat", Args: []string{"kept"}, Stdout: &out}); err != nil || out.String() != "mine" {
		t.Fatalf("after resume the sandbox's file reads %q (%v), want \"mine\"", out.String(), err)
	}
}

// TestStopFreesDisk: a sandbox's disk mount lives in no other sandbox's
// mount namespace, nor in the host's, so a stop frees its loop device
// while others run (and whatever clones the host's namespace meanwhile),
// says so when something does hold it, and the resume after works.
func TestStopFreesDisk(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	newDisk := func() sandbox.Session {
		s, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 64 << 20}})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
		if err := s.WriteFile(ctx, "kept", strings.NewReader("mine"), 0o644); err != nil {
			t.Fatal(err)
		}
		return s
	}
	a := newDisk()
	newDisk() // started after a, while a's disk is mounted

	t.Run("others running", func(t *testing.T) {
		for range 5 {
			stopFrees(t, rt, a.ID())
			resumeKeeps(t, rt, a.ID())
			newDisk() // yet another start while a runs
		}
	})

	t.Run("host namespace copied", func(t *testing.T) {
		for range 3 {
			release := holdMounts(t, "")
			stopFrees(t, rt, a.ID())
			release()
			resumeKeeps(t, rt, a.ID())
		}
	})

	t.Run("held", func(t *testing.T) {
		// A process in the namespace that mounts the disk keeps its
		// filesystem: the stop must say so, and the resume wait for it.
		release := holdMounts(t, diskNamespace(t, rt, a.ID()))
		err := rt.Stop(ctx, a.ID())
		if devs := loopsOf(t, rt, a.ID()); len(devs) == 0 {
			t.Fatalf("the held disk was freed (stop: %v); the test holds nothing", err)
		}
		if !errors.Is(err, sandbox.ErrUnavailable) {
			t.Fatalf("stop of a sandbox whose disk stays held: %v, want ErrUnavailable", err)
		}
		if strings.Contains(err.Error(), rt.cfg.Dir) || strings.Contains(err.Error(), "/dev/loop") {
			t.Errorf("the stop's error names a host path or device: %v", err)
		}
		time.AfterFunc(500*time.Millisecond, release)
		resumeKeeps(t, rt, a.ID())
	})
}

// TestForkRunningDisk: a fork of a running sandbox copies its disk, whose
// mount is in the supervisor's namespace only, frozen: data written just
// before (still in the page cache) is in the copy, and the copy is a disk
// of its own.
func TestForkRunningDisk(t *testing.T) {
	rt := newRuntime(t)
	ctx := context.Background()
	s, err := rt.Create(ctx, sandbox.Spec{Limits: sandbox.Limits{DiskBytes: 64 << 20}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), s.ID()) })
	sum := sh(t, s, "head -c 20000000 /dev/urandom > data && sha256sum data")
	f, err := rt.Fork(ctx, s.ID())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rt.Delete(context.Background(), f.ID()) })
	if got := sh(t, f, "sha256sum data"); got != sum {
		t.Errorf("the fork's copy of a file written just before: %q, want %q", got, sum)
	}
	sh(t, f, "echo fork > only-in-fork")
	if out := sh(t, s, "ls"); strings.Contains(out, "only-in-fork") {
		t.Errorf("a file written in the fork appeared in the original: %q", out)
	}
}
