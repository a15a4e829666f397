package local

import (
	"encoding/json"
	"os"
	"path/filepath"
)

// WriteFloorBundle writes a minimal OCI bundle into dir: root read-only,
// binds bound read-only at the same paths, /proc, /dev and /tmp, and
// `echo hi` as its process: a bare `runsc run` of it is the floor the
// gVisor tier's create is measured against (cove bench, go test -bench).
func WriteFloorBundle(dir, root string, binds []string) error {
	type mount struct {
		Destination string   `json:"destination"`
		Type        string   `json:"type"`
		Source      string   `json:"source"`
		Options     []string `json:"options,omitempty"`
	}
	mounts := []mount{
		{"/proc", "proc", "proc", nil},
		{"/dev", "tmpfs", "tmpfs", []string{"nosuid", "mode=755"}},
		{"/tmp", "tmpfs", "tmpfs", []string{"nosuid", "nodev", "mode=1777"}},
	}
	for _, d := range binds {
		mounts = append(mounts, mount{d, "bind", d, []string{"rbind", "ro"}})
	}
	spec := map[string]any{
		"ociVersion": "1.0.2",
		"process": map[string]any{
			"args": []string{"echo", "hi"}, "cwd": "/",
			"env":  []string{"PATH=/usr/local/bin:/usr/bin:/bin"},
			"user": map[string]int{"uid": 0, "gid": 0},
		},
		"root":   map[string]any{"path": root, "readonly": true},
		"mounts": mounts,
		"linux": map[string]any{"namespaces": []map[string]string{
			{"type": "pid"}, {"type": "ipc"}, {"type": "uts"}, {"type": "mount"}, {"type": "network"},
		}},
	}
	data, err := json.Marshal(spec)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "config.json"), data, 0o600)
}
