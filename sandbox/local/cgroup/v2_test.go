package cgroup

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

const hybridUnified = "/sys/fs/cgroup/unified"

// unifiedBase makes a scratch cgroup in the unified hierarchy of a hybrid
// host, so the v2 code runs there too (on a v2 host the other tests run
// it). That hierarchy holds none of the limit controllers, so only what
// needs none is tested: layout, clone3 into the group, cgroup.kill,
// cgroup.freeze, listing, loading and the leaf move.
func unifiedBase(t *testing.T) string {
	t.Helper()
	needUnified(t)
	base := filepath.Join(hybridUnified, uniqueName(t))
	if err := os.Mkdir(base, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		os.WriteFile(filepath.Join(base, "cgroup.kill"), []byte("1"), 0)
		for _, d := range subdirs(base) {
			eventually(2*time.Second, func() bool {
				err := syscall.Rmdir(d)
				return err == nil || errors.Is(err, syscall.ENOENT)
			})
		}
	})
	return base
}

// needUnified skips the test unless this is a hybrid host with its
// unified hierarchy where expected.
func needUnified(t *testing.T) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("managing cgroups needs root")
	}
	if hostVersion() != Hybrid || !onCgroupFS(hybridUnified) {
		t.Skip("only on hybrid hosts (with the unified hierarchy on " + hybridUnified + "); v2 hosts run the v2 code in every test")
	}
}

func TestV2OnUnified(t *testing.T) {
	base := unifiedBase(t)
	r := newV2Root(base)
	if got := r.Mode(); got.Version != V2 {
		t.Errorf("Mode() = %v, want v2", got)
	}
	g := newGroup(t, r, Limits{})
	if _, ok := g.FD(); !ok {
		t.Fatal("FD() not ok on v2")
	}
	if want := filepath.Join(base, parentName, g.Name()); g.Path(Memory) != want || g.Path("") != want {
		t.Errorf("Path = %q, want %q for every controller", g.Path(Memory), want)
	}
	p := start(t, g, `sleep 300 & sleep 300`)
	var pids []int
	if !eventually(5*time.Second, func() bool { pids, _ = g.Pids(); return len(pids) >= 3 }) {
		t.Fatalf("want 3 processes in the group, have %v", pids)
	}
	// Started inside the group by clone3, not moved there.
	own, err := os.ReadFile("/proc/" + strconv.Itoa(p.cmd.Process.Pid) + "/cgroup")
	if err != nil {
		t.Fatal(err)
	}
	if want := "0::" + strings.TrimPrefix(g.Path(""), hybridUnified) + "\n"; !strings.Contains(string(own), want) {
		t.Errorf("the process's cgroups are\n%s\nwant the line %q", own, want)
	}
	if _, err := g.Stats(); err != nil {
		t.Errorf("Stats: %v", err)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := g.Freeze(ctx); err != nil {
		t.Errorf("Freeze: %v", err)
	}
	if err := g.Thaw(ctx); err != nil {
		t.Errorf("Thaw: %v", err)
	}

	names, err := r.List()
	if err != nil || !slices.Contains(names, g.Name()) {
		t.Errorf("List() = %v, %v; want it to contain %q", names, err, g.Name())
	}
	r2, err := ParseRoot(r.String())
	if err != nil {
		t.Fatalf("ParseRoot(%q): %v", r, err)
	}
	h, err := r2.Load(g.Name())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	if got, _ := h.Pids(); !slices.Equal(got, pids) {
		t.Errorf("loaded group's Pids() = %v, want %v", got, pids)
	}

	if err := h.Kill(ctx); err != nil {
		t.Fatalf("Kill: %v", err)
	}
	for _, pid := range pids {
		if !eventually(time.Second, func() bool { return !alive(pid) }) {
			t.Errorf("pid %d survived Kill", pid)
		}
	}
	p.wait(t, 10*time.Second)
	if err := g.Delete(ctx); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(g.Path("")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("%s left after Delete", g.Path(""))
	}
	if _, ok := g.FD(); ok {
		t.Error("FD() still ok after Delete")
	}

	_, err = r.New(uniqueName(t), Limits{Pids: 5})
	if !errors.Is(err, sandbox.ErrUnavailable) || !strings.Contains(err.Error(), "subtree_control") {
		t.Errorf("New with a pids limit where v2 has no pids controller: got %v, want ErrUnavailable saying how to enable it", err)
	}
}

// TestV2Leaf: enabling a controller for the children of a cgroup that
// holds processes moves them to its leaf first.
func TestV2Leaf(t *testing.T) {
	rootCtl := filepath.Join(hybridUnified, "cgroup.subtree_control")
	needUnified(t)
	if !slices.Contains(v2AvailableAll(hybridUnified), "hugetlb") {
		t.Skip("the unified hierarchy offers no controller to enable")
	}
	// The test enables hugetlb below the unified root for its duration
	// (restored after base is gone: cleanups run last first).
	if have, _ := subtreeControl(hybridUnified); !slices.Contains(have, "hugetlb") {
		if err := os.WriteFile(rootCtl, []byte("+hugetlb"), 0); err != nil {
			t.Skipf("cannot enable hugetlb in the unified root: %v", err)
		}
		t.Cleanup(func() {
			if err := os.WriteFile(rootCtl, []byte("-hugetlb"), 0); err != nil {
				t.Errorf("restoring %s: %v", rootCtl, err)
			}
		})
	}
	base := unifiedBase(t)

	fd, err := unix.Open(base, unix.O_PATH|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	p := start(t, &Group{root: newV2Root(hybridUnified), name: filepath.Base(base), fd: fd}, `sleep 300`)
	pid := p.cmd.Process.Pid

	if err := enableV2(base, []string{"hugetlb"}); err != nil {
		t.Fatalf("enableV2 with a process in the cgroup: %v", err)
	}
	if have, _ := subtreeControl(base); !slices.Contains(have, "hugetlb") {
		t.Errorf("%s/cgroup.subtree_control = %v, want hugetlb", base, have)
	}
	if left, _ := readPids(filepath.Join(base, "cgroup.procs")); len(left) != 0 {
		t.Errorf("processes %v left in %s", left, base)
	}
	if moved, _ := readPids(filepath.Join(base, leafName, "cgroup.procs")); !slices.Contains(moved, pid) {
		t.Errorf("pid %d not in the leaf (it holds %v)", pid, moved)
	}
	// Groups can be made next to the leaf.
	g := newGroup(t, newV2Root(base), Limits{})
	if _, ok := g.FD(); !ok {
		t.Error("FD() not ok")
	}
}

// v2AvailableAll returns every controller in dir's cgroup.controllers.
func v2AvailableAll(dir string) []string {
	b, _ := os.ReadFile(filepath.Join(dir, "cgroup.controllers"))
	return strings.Fields(string(b))
}

func TestV2RootFor(t *testing.T) {
	for _, tc := range []struct{ own, base string }{
		{"/", "/sys/fs/cgroup"},
		{"/system.slice/cove.service", "/sys/fs/cgroup/system.slice/cove.service"},
		{"/system.slice/cove.service/leaf", "/sys/fs/cgroup/system.slice/cove.service"},
	} {
		r := v2RootFor("/sys/fs/cgroup", tc.own)
		if r.v2Base != tc.base || r.dirs[""] != filepath.Join(tc.base, parentName) {
			t.Errorf("v2RootFor(%q): base %q, dir %q; want base %q", tc.own, r.v2Base, r.dirs[""], tc.base)
		}
	}
}
