package cgroup

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// readPids parses a cgroup.procs file. A missing file (the group is gone)
// is no pids.
func readPids(file string) ([]int, error) {
	b, err := os.ReadFile(file)
	if errors.Is(err, os.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	var pids []int
	for _, f := range strings.Fields(string(b)) {
		pid, err := strconv.Atoi(f)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", file, err)
		}
		pids = append(pids, pid)
	}
	return pids, nil
}

// subdirs returns dir and every cgroup below it, children before parents.
func subdirs(dir string) []string {
	var out []string
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		if e.IsDir() {
			out = append(out, subdirs(filepath.Join(dir, e.Name()))...)
		}
	}
	return append(out, dir)
}

// Pids returns the processes in the group and the groups below it, in
// every hierarchy, sorted and without duplicates.
func (g *Group) Pids() ([]int, error) {
	seen := map[int]bool{}
	for _, d := range g.dirs() {
		for _, sub := range subdirs(d) {
			pids, err := readPids(filepath.Join(sub, "cgroup.procs"))
			if err != nil {
				return nil, fmt.Errorf("listing the processes of cgroup %q: %w", g.name, err)
			}
			for _, p := range pids {
				seen[p] = true
			}
		}
	}
	pids := make([]int, 0, len(seen))
	for p := range seen {
		pids = append(pids, p)
	}
	slices.Sort(pids)
	return pids, nil
}

// freezeFile returns the file that freezes the group and the values that
// freeze and thaw it; "" if the group cannot be frozen.
func (g *Group) freezeFile() (file, frozen, thawed string) {
	if g.root.version == V2 {
		f := filepath.Join(g.Path(""), "cgroup.freeze")
		if _, err := os.Stat(f); err != nil {
			return "", "", "" // Linux before 5.2
		}
		return f, "1", "0"
	}
	d := g.Path(Freezer)
	if d == "" {
		return "", "", ""
	}
	return filepath.Join(d, "freezer.state"), "FROZEN", "THAWED"
}

// isFrozen reports whether the group's freeze has taken hold on every
// process.
func (g *Group) isFrozen() (bool, error) {
	if g.root.version == V2 {
		b, err := os.ReadFile(filepath.Join(g.Path(""), "cgroup.events"))
		return bytes.Contains(b, []byte("frozen 1")), err
	}
	b, err := os.ReadFile(filepath.Join(g.Path(Freezer), "freezer.state"))
	return strings.TrimSpace(string(b)) == "FROZEN", err
}

// Freeze stops every process of the group (and the groups below) where it
// stands, until Thaw; it waits until they all are stopped or ctx ends (a
// process in uninterruptible sleep delays it). ErrUnavailable without a
// freezer (v1 without the freezer hierarchy, v2 before Linux 5.2).
func (g *Group) Freeze(ctx context.Context) error {
	if err := g.freeze(ctx); err != nil {
		return fmt.Errorf("freezing cgroup %q: %w", g.name, err)
	}
	return nil
}

func (g *Group) freeze(ctx context.Context) error {
	file, frozen, _ := g.freezeFile()
	if file == "" {
		return fmt.Errorf("the freezer is unavailable on this %s host: %w", g.root.version, sandbox.ErrUnavailable)
	}
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 5*time.Millisecond) {
		// v1 retries tasks it could not freeze on each write.
		if err := os.WriteFile(file, []byte(frozen), 0); err != nil {
			return err
		}
		ok, err := g.isFrozen()
		if err != nil {
			return err
		}
		if ok {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(delay):
		}
	}
}

// Thaw lets the processes of a frozen group run again. ErrUnavailable
// without a freezer.
func (g *Group) Thaw(ctx context.Context) error {
	file, _, thawed := g.freezeFile()
	if file == "" {
		return fmt.Errorf("thawing cgroup %q: the freezer is unavailable on this %s host: %w", g.name, g.root.version, sandbox.ErrUnavailable)
	}
	if err := os.WriteFile(file, []byte(thawed), 0); err != nil {
		return fmt.Errorf("thawing cgroup %q: %w", g.name, err)
	}
	return nil
}

// freezeWait bounds how long Kill waits for a freeze before it kills
// anyway: a process stuck in uninterruptible sleep cannot be frozen.
const freezeWait = 100 * time.Millisecond

// Kill sends SIGKILL to every process in the group and the groups below,
// and returns once none is left, or with ctx's error when ctx ends first.
// No process escapes by forking: v2 uses cgroup.kill (Linux 5.14), which
// the kernel applies to the whole group at once; otherwise the group is
// frozen, every process killed, thawed, and this is repeated until the
// group is empty. Killing an empty or deleted group does nothing.
func (g *Group) Kill(ctx context.Context) error {
	if err := g.kill(ctx); err != nil {
		return fmt.Errorf("killing the processes of cgroup %q: %w", g.name, err)
	}
	return nil
}

func (g *Group) kill(ctx context.Context) error {
	killFile := filepath.Join(g.Path(""), "cgroup.kill")
	useKill := false
	if g.root.version == V2 {
		_, err := os.Stat(killFile)
		useKill = err == nil
	}
	for {
		pids, err := g.Pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 {
			return nil
		}
		if useKill {
			if err := os.WriteFile(killFile, []byte("1"), 0); err != nil && !errors.Is(err, os.ErrNotExist) {
				return err
			}
		} else if err := g.killFrozen(ctx); err != nil {
			return err
		}
		if err := g.waitEmpty(ctx, 200*time.Millisecond); err != nil {
			return err
		}
	}
}

// killFrozen kills the group's processes once, frozen so that none forks
// or exits (freeing its pid for reuse) between being listed and killed.
// Without a freezer it signals through pidfds, so a pid reused by another
// process meanwhile is not hit.
func (g *Group) killFrozen(ctx context.Context) error {
	file, _, thawed := g.freezeFile()
	frozen := false
	if file != "" {
		fctx, cancel := context.WithTimeout(ctx, freezeWait)
		frozen = g.freeze(fctx) == nil
		cancel()
		defer os.WriteFile(file, []byte(thawed), 0)
	}
	pids, err := g.Pids()
	if err != nil {
		return err
	}
	if frozen {
		for _, pid := range pids {
			unix.Kill(pid, unix.SIGKILL)
		}
		return nil
	}
	// Not frozen: take a pidfd of each, then signal those still listed,
	// so each pidfd is known to name a process of the group.
	fds := map[int]int{}
	for _, pid := range pids {
		if fd, err := unix.PidfdOpen(pid, 0); err == nil {
			fds[pid] = fd
		} else if errors.Is(err, unix.ENOSYS) {
			fds[pid] = -1 // Linux before 5.3: plain kill
		}
	}
	defer func() {
		for _, fd := range fds {
			if fd >= 0 {
				unix.Close(fd)
			}
		}
	}()
	still, err := g.Pids()
	if err != nil {
		return err
	}
	for _, pid := range still {
		fd, ok := fds[pid]
		switch {
		case !ok:
			continue // new since the first listing: the next round gets it
		case fd < 0:
			unix.Kill(pid, unix.SIGKILL)
		default:
			unix.PidfdSendSignal(fd, unix.SIGKILL, nil, 0)
		}
	}
	return nil
}

// waitEmpty waits until the group holds no process, for at most d, or
// until ctx ends (then ctx's error and how many are left).
func (g *Group) waitEmpty(ctx context.Context, d time.Duration) error {
	deadline := time.Now().Add(d)
	for delay := 50 * time.Microsecond; ; delay = min(2*delay, 5*time.Millisecond) {
		pids, err := g.Pids()
		if err != nil {
			return err
		}
		if len(pids) == 0 || time.Now().After(deadline) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("%d processes left (pids %v): %w", len(pids), pids, ctx.Err())
		case <-time.After(delay):
		}
	}
}

// Delete kills the group's processes (see Kill), removes its directory in
// every hierarchy (and any group below it) and closes its descriptor.
// Deleting a deleted group does nothing.
func (g *Group) Delete(ctx context.Context) error {
	if err := g.kill(ctx); err != nil {
		return fmt.Errorf("deleting cgroup %q: %w", g.name, err)
	}
	g.Close()
	if err := g.removeDirs(time.Second); err != nil {
		return fmt.Errorf("deleting cgroup %q: %w", g.name, err)
	}
	return nil
}

// removeDirs removes the group's directories, children first. An empty
// v1 group can stay busy for a moment after its last process exits, so
// EBUSY is retried for up to wait.
func (g *Group) removeDirs(wait time.Duration) error {
	deadline := time.Now().Add(wait)
	var errs []error
	for _, d := range g.dirs() {
		for _, sub := range subdirs(d) {
			for delay := 100 * time.Microsecond; ; delay = min(2*delay, 20*time.Millisecond) {
				err := unix.Rmdir(sub)
				if err == nil || errors.Is(err, unix.ENOENT) {
					break
				}
				if !errors.Is(err, unix.EBUSY) || time.Now().After(deadline) {
					errs = append(errs, fmt.Errorf("removing %s: %w", sub, err))
					break
				}
				time.Sleep(delay)
			}
		}
	}
	return errors.Join(errs...)
}
