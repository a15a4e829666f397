package runsc

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
)

// Bundle is what a gVisor sandbox runs from, written as an OCI bundle's
// config.json (the fields of the runtime spec runsc reads).
type Bundle struct {
	// Root is the host directory runsc serves as the sandbox's root: the
	// overlay of template and disk, mounted by the supervisor.
	Root string
	// Binds are host directories bound read-only at the same path (a
	// template's /usr and friends).
	Binds []string
	// Init is the host path of the daemon's program and Args what it
	// runs with (after InitPath).
	Init string
	Args []string
	// Env is the daemon's environment.
	Env []string
	// SocketDir is the host directory bound at SocketDir.
	SocketDir string
	// Sudo binds Init over /usr/bin/sudo too.
	Sudo     bool
	Hostname string
	// Netns is the network namespace to join ("": a new one).
	Netns string
	// TmpSize is /tmp's size ("512m").
	TmpSize string
}

type ociMount struct {
	Destination string   `json:"destination"`
	Type        string   `json:"type"`
	Source      string   `json:"source"`
	Options     []string `json:"options,omitempty"`
}

type ociNamespace struct {
	Type string `json:"type"`
	Path string `json:"path,omitempty"`
}

// caps are the capabilities of the daemon (root in the sandbox): those
// the native tier's daemon keeps (package harden), no more, while it
// serves. It becomes the sandbox's user, chowns and writes its files,
// signals its processes and lets a server started as root bind a low
// port; root's commands (sudo) have the same. Raw sockets and interface
// changes (NET_RAW, NET_ADMIN) stay out, as on the native tier: the
// host's rules trust a sandbox's source address. CAP_SYS_ADMIN (to mount
// gVisor's cgroup filesystem for the commands' pids group) and
// CAP_SETPCAP (to drop capabilities) are for the daemon's setup only:
// it drops both, with package harden, before it serves.
var caps = []string{
	"CAP_CHOWN", "CAP_DAC_OVERRIDE", "CAP_FOWNER", "CAP_FSETID", "CAP_KILL",
	"CAP_SETGID", "CAP_SETUID", "CAP_NET_BIND_SERVICE",
	"CAP_SYS_ADMIN", "CAP_SETPCAP",
}

// Write writes b's config.json into dir.
func (b Bundle) Write(dir string) error {
	mounts := []ociMount{
		{Destination: "/proc", Type: "proc", Source: "proc"},
		{Destination: "/dev", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "strictatime", "mode=755", "size=65536k"}},
		{Destination: "/dev/pts", Type: "devpts", Source: "devpts", Options: []string{"nosuid", "noexec", "newinstance", "ptmxmode=0666", "mode=0620", "gid=5"}},
		{Destination: "/dev/shm", Type: "tmpfs", Source: "shm", Options: []string{"nosuid", "noexec", "nodev", "mode=1777", "size=65536k"}},
		{Destination: "/sys", Type: "sysfs", Source: "sysfs", Options: []string{"nosuid", "noexec", "nodev", "ro"}},
		{Destination: "/tmp", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=1777", "size=" + b.TmpSize}},
		{Destination: "/run", Type: "tmpfs", Source: "tmpfs", Options: []string{"nosuid", "nodev", "mode=755", "size=16m"}},
	}
	for _, d := range b.Binds {
		if fi, err := os.Lstat(d); err != nil || !fi.IsDir() {
			continue // as the native tier: what the host lacks, or has as a link, is left out
		}
		mounts = append(mounts, ociMount{Destination: d, Type: "bind", Source: d, Options: []string{"rbind", "ro", "nosuid", "nodev"}})
	}
	mounts = append(mounts,
		ociMount{Destination: InitPath, Type: "bind", Source: b.Init, Options: []string{"bind", "ro", "nosuid", "nodev"}},
		ociMount{Destination: SocketDir, Type: "bind", Source: b.SocketDir, Options: []string{"bind", "rw", "nosuid", "nodev", "noexec"}},
	)
	if b.Sudo {
		mounts = append(mounts, ociMount{Destination: "/usr/bin/sudo", Type: "bind", Source: b.Init, Options: []string{"bind", "ro", "nosuid", "nodev"}})
	}
	netns := ociNamespace{Type: "network", Path: b.Netns}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"args": append([]string{InitPath}, b.Args...),
			"env":  b.Env,
			"cwd":  "/",
			"user": map[string]int{"uid": 0, "gid": 0},
			"capabilities": map[string][]string{
				"bounding": caps, "effective": caps, "permitted": caps,
			},
			"rlimits": []map[string]any{{"type": "RLIMIT_NOFILE", "hard": 20000, "soft": 20000}},
		},
		"root":     map[string]any{"path": b.Root, "readonly": false},
		"hostname": b.Hostname,
		"mounts":   mounts,
		"linux": map[string]any{
			"namespaces": []ociNamespace{{Type: "pid"}, {Type: "ipc"}, {Type: "uts"}, {Type: "mount"}, netns},
		},
	}
	data, err := json.MarshalIndent(spec, "", "\t")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600); err != nil {
		return fmt.Errorf("writing the sandbox's gVisor bundle: %w", err)
	}
	return nil
}
