package kubetest

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/sandbox/mountinfo"
	"golang.org/x/sys/unix"
)

// sweepLock serialises sweeps across test binaries.
const sweepLock = "/run/lock/cove-kubetest-sweep.lock"

// sweep tears down the clusters of test binaries that died without
// stopping them: directories named covek-PID-HEX in the temporary
// directory whose owner (PID, at the start time in its state file) is
// gone, and the rules of a kube-proxy no cluster runs now. Clusters of
// live binaries are left alone.
func sweep(logf func(string, ...any)) {
	unlock, err := lockSweeps()
	if err != nil {
		logf("sweep: %v", err)
		return
	}
	defer unlock()
	sweepLocked(logf)
}

// lockSweeps takes the lock that serialises sweeps across binaries.
func lockSweeps() (unlock func(), err error) {
	lock, err := os.OpenFile(sweepLock, os.O_CREATE|os.O_RDWR, 0o600)
	if err != nil {
		return nil, err
	}
	if err := unix.Flock(int(lock.Fd()), unix.LOCK_EX); err != nil {
		lock.Close()
		return nil, err
	}
	return func() { lock.Close() }, nil
}

// sweepLocked is sweep, its caller holding the lock.
func sweepLocked(logf func(string, ...any)) {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), namePrefix+"-*-*"))
	for _, dir := range dirs {
		if !ownerGone(dir) {
			continue
		}
		st, err := readState(dir)
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			logf("sweep: %s: %v", dir, err)
			continue
		}
		logf("sweeping the cluster of a dead test binary: %s", dir)
		if err := teardown(dir, st); err != nil {
			logf("sweep: %s: %v", dir, err)
		}
	}
	sweepServices(logf)
}

// ownerGone reports whether the test binary that made dir has exited.
func ownerGone(dir string) bool {
	parts := strings.Split(filepath.Base(dir), "-")
	if len(parts) != 3 {
		return false
	}
	pid, err := strconv.Atoi(parts[1])
	if err != nil {
		return false
	}
	st, err := readState(dir)
	if err != nil {
		// No state yet: the owner may be making it; only a dead pid
		// says the directory is abandoned.
		return errors.Is(err, os.ErrNotExist) && syscall.Kill(pid, 0) == syscall.ESRCH
	}
	return st.Owner.Pid != pid || !st.Owner.alive()
}

// teardown stops what a cluster made, live or abandoned, in the order
// that keeps anything from restarting what was just stopped: the
// kubelet, then the containers (by their cgroups, which outlive
// containerd), then every other process (the recorded ones, and the
// shims and runcs that name the directory), then cgroups, the bridge,
// and the directory.
func teardown(dir string, st state) error {
	var errs []error
	for _, p := range st.Procs {
		if p.Name == "kubelet" {
			p.kill()
			errs = append(errs, waitGone([]procID{p}, 10*time.Second))
		}
	}
	cgroups := containerCgroups(dir)
	errs = append(errs, killCgroups(cgroups))
	all := append(append([]procID(nil), st.Procs...), procsMentioning(dir+"/")...)
	for _, p := range all {
		p.kill()
	}
	errs = append(errs, waitGone(all, 20*time.Second))
	// A shim that containerd started as it died.
	late := procsMentioning(dir + "/")
	for _, p := range late {
		p.kill()
	}
	errs = append(errs, waitGone(late, 10*time.Second))
	errs = append(errs, removeCgroups(cgroups))
	removeSharedCgroupParents(dir)
	errs = append(errs, deleteBridge(st.Bridge), deleteForwardTable(st.Bridge))
	if err := errors.Join(errs...); err != nil {
		// Leave the directory for the next sweep rather than removing
		// files still in use.
		return err
	}
	return removeDir(dir)
}

// containerCgroups lists the cgroup directories of the cluster's
// containers: containerd keeps a task directory per container under its
// state, and runc made /sys/fs/cgroup/HIERARCHY/k8s.io/ID for each (the
// kubelet, without per-QoS cgroups, gives pods no cgroup parent).
func containerCgroups(dir string) []string {
	tasks, _ := os.ReadDir(filepath.Join(dir, "containerd", "state", "io.containerd.runtime.v2.task", "k8s.io"))
	var out []string
	for _, t := range tasks {
		if len(t.Name()) != 64 {
			continue
		}
		found, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "k8s.io", t.Name()))
		out = append(out, found...)
	}
	return out
}

// killCgroups kills every process in the cgroups and waits for them to
// be empty.
func killCgroups(cgroups []string) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		busy := 0
		for _, cg := range cgroups {
			data, err := os.ReadFile(filepath.Join(cg, "cgroup.procs"))
			if err != nil {
				continue
			}
			for _, f := range strings.Fields(string(data)) {
				if pid, err := strconv.Atoi(f); err == nil && pid > 1 {
					busy++
					_ = syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		if busy == 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("containers' processes still running after SIGKILL")
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// removeCgroups removes the (empty) container cgroups, deepest first,
// retrying while the kernel still counts exiting tasks.
func removeCgroups(cgroups []string) error {
	var left []string
	for _, cg := range cgroups {
		var err error
		for range 50 {
			if err = removeCgroupTree(cg); err == nil {
				break
			}
			time.Sleep(100 * time.Millisecond)
		}
		if err != nil {
			left = append(left, cg)
		}
	}
	if len(left) > 0 {
		return fmt.Errorf("cgroups left: %s", strings.Join(left, ", "))
	}
	return nil
}

// removeSharedCgroupParents removes the k8s.io cgroup directories the
// containers were made under, when empty and no other cluster's
// directory exists: every cluster's containerd makes its containers
// there, and one being started could be about to use it (a pod whose
// cgroup loses the race is retried by its kubelet).
func removeSharedCgroupParents(dir string) {
	others, _ := filepath.Glob(filepath.Join(os.TempDir(), namePrefix+"-*-*"))
	for _, o := range others {
		if o != dir {
			return
		}
	}
	parents, _ := filepath.Glob(filepath.Join("/sys/fs/cgroup", "*", "k8s.io"))
	for _, p := range parents {
		_ = unix.Rmdir(p) // EBUSY while another containerd's container is in it
	}
}

func removeCgroupTree(cg string) error {
	entries, err := os.ReadDir(cg)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	for _, e := range entries {
		if e.IsDir() {
			if err := removeCgroupTree(filepath.Join(cg, e.Name())); err != nil {
				return err
			}
		}
	}
	if err := unix.Rmdir(cg); err != nil && !errors.Is(err, unix.ENOENT) {
		return err
	}
	return nil
}

// removeDir removes the cluster's directory. Every mount under it was
// made in the cluster's mount namespace, gone with its processes; one
// still seen here (a mount namespace outliving its processes) would make
// os.RemoveAll delete through it, so it refuses instead.
func removeDir(dir string) error {
	mounts, err := mountinfo.Under(dir)
	if err != nil {
		return err
	}
	if len(mounts) > 0 {
		return fmt.Errorf("not removing %s: still mounted under it: %s", dir, strings.Join(mounts, ", "))
	}
	return os.RemoveAll(dir)
}
