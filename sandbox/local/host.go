package local

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sync"

	"github.com/cove-sandbox/cove/sandbox"
)

// HostTemplates provides only the "host" template: the host's /usr, /bin,
// /lib* and /sbin read-only, over a small generated /etc. It is the
// zero-setup default until a template store is wired in.
type HostTemplates struct {
	// Dir holds the generated lower layer.
	Dir string
}

// Resolve implements Templates.
func (h HostTemplates) Resolve(ctx context.Context, name string) (Rootfs, error) {
	if name != "host" {
		return Rootfs{}, fmt.Errorf("no template %q here (only \"host\"): %w", name, sandbox.ErrNotFound)
	}
	if err := writeHostLower(h.Dir); err != nil {
		return Rootfs{}, fmt.Errorf("preparing the host template: %w", err)
	}
	return Rootfs{
		Digest: "host", Lower: h.Dir,
		Binds: []string{"/usr", "/bin", "/lib", "/lib32", "/lib64", "/libx32", "/sbin"},
		User:  "user",
	}, nil
}

// hostLowerMu serializes preparing the host layer within this process.
var hostLowerMu sync.Mutex

// writeHostLower makes the host template's lower layer once: mount points
// and an /etc that names the sandbox's users and nothing of the host's.
func writeHostLower(dir string) error {
	hostLowerMu.Lock()
	defer hostLowerMu.Unlock()
	if _, err := os.Stat(dir + ".complete"); err == nil {
		return nil
	}
	tmp := dir + ".tmp"
	os.RemoveAll(tmp)
	files := map[string]string{
		"etc/passwd":        "root:x:0:0:root:/root:/bin/sh\nuser:x:1000:1000:sandbox user:/home/user:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group":         "root:x:0:\ntty:x:5:\nuser:x:1000:\nnogroup:x:65534:\n",
		"etc/hosts":         "127.0.0.1\tlocalhost\n::1\tlocalhost ip6-localhost ip6-loopback\n",
		"etc/resolv.conf":   "# no network by default\n",
		"etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files dns\n",
		"etc/hostname":      "sandbox\n",
	}
	for name, content := range files {
		p := filepath.Join(tmp, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			return err
		}
		if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
			return err
		}
	}
	// Configuration programs need that holds no secrets: the alternatives
	// symlinks (awk, editor...), the dynamic linker's cache, CA
	// certificates, time zone, shell start-up files.
	for _, name := range hostEtc {
		if err := copyTree(filepath.Join("/etc", name), filepath.Join(tmp, "etc", name)); err != nil && !os.IsNotExist(err) {
			return fmt.Errorf("copying /etc/%s: %w", name, err)
		}
	}
	for _, d := range []string{"usr", "proc", "dev", "tmp", "sys", "run", "root", "home/user", "var/tmp"} {
		if err := os.MkdirAll(filepath.Join(tmp, d), 0o755); err != nil {
			return err
		}
	}
	os.Chmod(filepath.Join(tmp, "tmp"), 0o1777)
	os.Chmod(filepath.Join(tmp, "var/tmp"), 0o1777)
	os.Chown(filepath.Join(tmp, "home/user"), 1000, 1000)
	// Debian 12 has merged /usr: /bin, /lib, /sbin are symlinks into it.
	for _, l := range []string{"bin", "lib", "lib32", "lib64", "libx32", "sbin"} {
		if target, err := os.Readlink("/" + l); err == nil {
			os.Symlink(target, filepath.Join(tmp, l))
		} else if fi, err := os.Stat("/" + l); err == nil && fi.IsDir() {
			os.MkdirAll(filepath.Join(tmp, l), 0o755)
		}
	}
	os.RemoveAll(dir)
	if err := os.Rename(tmp, dir); err != nil {
		return err
	}
	// The marker sits beside the layer, not in it: sandboxes see the
	// layer as their /.
	return os.WriteFile(dir+".complete", nil, 0o644)
}

// hostEtc lists what of the host's /etc the host template copies.
var hostEtc = []string{
	"os-release", "alternatives", "ld.so.cache", "ld.so.conf", "ld.so.conf.d", "ssl", "ca-certificates",
	"ca-certificates.conf", "localtime", "timezone", "protocols", "services", "shells", "profile",
	"profile.d", "bash.bashrc", "inputrc", "mime.types", "debian_version", "issue", "magic",
	"python3", "python3.11", "gitconfig", "locale.alias", "locale.gen", "environment",
}

// copyTree copies a file, symlink or directory tree (symlinks as links).
func copyTree(src, dst string) error {
	fi, err := os.Lstat(src)
	if err != nil {
		return err
	}
	switch {
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return os.Symlink(target, dst)
	case fi.IsDir():
		if err := os.MkdirAll(dst, fi.Mode().Perm()); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyTree(filepath.Join(src, e.Name()), filepath.Join(dst, e.Name())); err != nil {
				return err
			}
		}
		return nil
	case fi.Mode().IsRegular():
		data, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		return os.WriteFile(dst, data, fi.Mode().Perm())
	}
	return nil // sockets, devices: not configuration
}

// writeInit saves the pid-1 config next to the state.
func writeInit(dir string, cfg *initConfig) error {
	data, err := json.Marshal(cfg)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, "init.json"), data, 0o600)
}
