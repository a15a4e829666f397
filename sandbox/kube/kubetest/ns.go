package kubetest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// The cluster's processes share a private mount namespace, held by a
// sleeping process and entered with nsenter. Mounts made there never
// reach the host (propagation is slave: the host's reach in, not the
// other way), and they all go when its last process exits: the
// kubelet's volume mounts, containerd's rootfs mounts, and tmpfs over
// the host-wide directories containerd 1.6 and the CNI plugins hard-code
// (shim sockets, netns files, CNI caches, the kubelet's
// /var/log/containers links), so two clusters, or a cluster and a
// system containerd, never meet there.
var hostWideDirs = []string{"/run/containerd", "/run/netns", "/var/lib/cni", "/var/log/containers"}

// mountNS is the running namespace holder.
type mountNS struct {
	holder  *proc
	nsenter string
}

// startMountNS starts the holder and makes the namespace's mounts:
// tmpfs over hostWideDirs and over etcdDir (etcd's data, where fsync
// costs nothing), the kubelet's sysctls shadowed, and /bin/false over
// iptables, so the kubelet finds no iptables and adds no rule to the
// host's firewall (it would add a KUBE-FIREWALL chain to the host's
// INPUT and OUTPUT).
func startMountNS(st *stateStore, logDir, id, etcdDir string) (*mountNS, error) {
	unshare, err := lookPath("unshare")
	if err != nil {
		return nil, err
	}
	nsenter, err := lookPath("nsenter")
	if err != nil {
		return nil, err
	}
	sleep, err := lookPath("sleep")
	if err != nil {
		return nil, err
	}
	holder, err := startProc(st, logDir, "mount-namespace", os.Environ(),
		unshare, "--mount", "--propagation", "slave", "--", sleep, "infinity")
	if err != nil {
		return nil, err
	}
	ns := &mountNS{holder: holder, nsenter: nsenter}
	if err := ns.waitUnshared(); err != nil {
		return nil, err
	}
	for _, dir := range append(append([]string(nil), hostWideDirs...), etcdDir) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, err
		}
		if err := ns.run("mount", "-t", "tmpfs", "-o", "mode=0755", id, dir); err != nil {
			return nil, err
		}
	}
	if err := ns.shadowSysctls(filepath.Join(filepath.Dir(etcdDir), "sysctl")); err != nil {
		return nil, err
	}
	hidden := map[string]bool{}
	for _, name := range []string{"iptables", "ip6tables", "iptables-legacy", "ip6tables-legacy", "iptables-nft", "ip6tables-nft"} {
		p, err := lookPath(name)
		if err != nil {
			continue
		}
		if p, err = filepath.EvalSymlinks(p); err != nil || hidden[p] {
			continue
		}
		hidden[p] = true
		if err := ns.run("mount", "--bind", "/bin/false", p); err != nil {
			return nil, err
		}
	}
	return ns, nil
}

// kubeletSysctls are the kernel settings the kubelet sets at start
// (vm.overcommit_memory=1, kernel.panic_on_oops=1, ...; see
// setupKernelTunables in its container manager) unless they already
// hold, and the one the CNI bridge plugin sets for a gateway. The host's
// are not the cluster's to change: in the namespace each is shadowed by
// a file already holding the value, so nothing is written to the kernel.
var kubeletSysctls = map[string]string{
	"vm/overcommit_memory":      "1",
	"vm/panic_on_oom":           "0",
	"kernel/panic":              "10",
	"kernel/panic_on_oops":      "1",
	"kernel/keys/root_maxkeys":  "1000000",
	"kernel/keys/root_maxbytes": "25000000",
	"net/ipv4/ip_forward":       "1",
}

// shadowSysctls binds a file holding each of kubeletSysctls' values over
// its /proc/sys entry, in the namespace.
func (ns *mountNS) shadowSysctls(dir string) error {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	for name, value := range kubeletSysctls {
		file := filepath.Join(dir, strings.ReplaceAll(name, "/", "."))
		if err := os.WriteFile(file, []byte(value+"\n"), 0o644); err != nil {
			return err
		}
		if err := ns.run("mount", "--bind", file, "/proc/sys/"+name); err != nil {
			return err
		}
	}
	return nil
}

// waitUnshared waits for the holder to have left the host's mount
// namespace: entering it before would enter the host's.
func (ns *mountNS) waitUnshared() error {
	self, err := os.Readlink("/proc/self/ns/mnt")
	if err != nil {
		return err
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if done, err := ns.holder.exited(); done {
			return fmt.Errorf("unshare exited: %v%s", err, logTail(ns.holder.log))
		}
		theirs, err := os.Readlink(fmt.Sprintf("/proc/%d/ns/mnt", ns.holder.id.Pid))
		if err == nil && theirs != self {
			return nil
		}
	}
	return fmt.Errorf("unshare made no mount namespace in 10 s")
}

// argv prefixes argv with entering the namespace.
func (ns *mountNS) argv(argv ...string) []string {
	return append([]string{ns.nsenter, "-t", strconv.Itoa(ns.holder.id.Pid), "-m", "--"}, argv...)
}

// run runs argv in the namespace and waits for it.
func (ns *mountNS) run(argv ...string) error {
	full := ns.argv(argv...)
	out, err := exec.Command(full[0], full[1:]...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%v in the cluster's mount namespace: %v: %s", argv, err, out)
	}
	return nil
}
