package template

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/cove-sandbox/cove/sandbox"
)

// DefaultPath is the PATH of the templates cove makes (Debian's default).
const DefaultPath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// hostTops are the top-level host directories the host template shares.
// Each is bound read-only when it is a directory and recreated as the
// same symlink when it is one (on Debian 12 /bin, /lib, /lib64 and /sbin
// are symlinks into /usr).
var hostTops = []string{"usr", "bin", "sbin", "lib", "lib64", "lib32", "libx32"}

// hostEtcCopies are the host /etc entries the host template copies, as
// they are (symlinks stay symlinks): they describe the bound /usr (the
// dynamic linker's cache, Debian's alternatives symlinks, CA certificates,
// the time zone, service names) and hold no secrets. Nothing else of the
// host's /etc is visible: no shadow, no ssh keys, no host names.
var hostEtcCopies = []string{
	"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "alternatives",
	"localtime", "timezone", "ssl/certs", "ssl/openssl.cnf",
	"services", "protocols",
}

// Host returns the built-in "host" template: the host's /usr (and /bin,
// /lib*, /sbin) bound read-only at the same paths, listed in Binds, over a
// small root filesystem that holds only mount points (dev, proc, sys,
// tmp, run, home/user, ...), the symlinks of hostTops, and a generated
// /etc: passwd (root, user uid 1000 with home /home/user, nobody), group,
// hosts (localhost), hostname ("sandbox"), nsswitch.conf, resolv.conf
// (the host's non-loopback resolvers, since the host's loopback is not the
// sandbox's), os-release copied from the host when present, and the
// entries of hostEtcCopies.
//
// It is made on first use and kept, content-addressed like any template,
// until the host files it came from change (their inode, size and time
// are checked on every call: a few stat calls), when a new generation is
// made; older generations are deleted by a later Remove once unused. It
// cannot be removed.
func (s *Store) Host() (*Template, error) {
	stamp := hostStamp()
	unlock, err := s.lock(false)
	if err != nil {
		return nil, err
	}
	idx, err := s.readIndex()
	if err == nil && idx.Host != nil && idx.Host.Stamp == stamp {
		if t, err := s.load(HostName, ref{Digest: idx.Host.Digest}); err == nil {
			unlock()
			return t, nil
		}
	}
	unlock()
	if err != nil {
		return nil, err
	}

	tmp, err := s.tempDir("host")
	if err != nil {
		return nil, fmt.Errorf("preparing the host template: %w", err)
	}
	binds, err := makeHostRoot(filepath.Join(tmp, "rootfs"))
	if err != nil {
		removeTree(tmp)
		return nil, fmt.Errorf("preparing the host template: %w", err)
	}
	m := meta{
		Config: Config{Env: map[string]string{"PATH": DefaultPath}},
		Binds:  binds,
		Source: "host " + strings.Join(binds, " ") + " (read-only)",
	}
	return s.commitHost(context.Background(), tmp, m, stamp)
}

// hostStamp summarises the host files the host template is made from.
func hostStamp() string {
	h := sha256.New()
	fmt.Fprintf(h, "host-template v1 euid %d\n", os.Geteuid())
	paths := []string{"/etc/os-release", "/usr/lib/os-release", "/etc/resolv.conf", "/run/systemd/resolve/resolv.conf", "/usr/bin/bash", "/etc/ssl/certs/ca-certificates.crt"}
	for _, t := range hostTops {
		paths = append(paths, "/"+t)
	}
	for _, e := range hostEtcCopies {
		paths = append(paths, "/etc/"+e)
	}
	for _, p := range paths {
		fi, err := os.Lstat(p)
		if err != nil {
			fmt.Fprintf(h, "%s -\n", p)
			continue
		}
		var ino uint64
		if st, ok := fi.Sys().(*syscall.Stat_t); ok {
			ino = st.Ino
		}
		fmt.Fprintf(h, "%s %v %d %d %d", p, fi.Mode(), fi.Size(), fi.ModTime().UnixNano(), ino)
		if fi.Mode()&fs.ModeSymlink != 0 {
			t, _ := os.Readlink(p)
			fmt.Fprintf(h, " -> %s", t)
		}
		fmt.Fprintln(h)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// makeHostRoot writes the host template's tree into dir and returns the
// host directories to bind.
func makeHostRoot(dir string) (binds []string, err error) {
	if err := os.Mkdir(dir, 0o755); err != nil {
		return nil, err
	}
	root, err := os.OpenRoot(dir)
	if err != nil {
		return nil, err
	}
	defer root.Close()
	chown := os.Geteuid() == 0

	dirs := []struct {
		name string
		mode fs.FileMode
	}{
		{"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"run", 0o755},
		{"tmp", 0o777 | fs.ModeSticky}, {"var", 0o755}, {"var/tmp", 0o777 | fs.ModeSticky},
		{"root", 0o700}, {"home", 0o755}, {"home/user", 0o755}, {"etc", 0o755},
		{"mnt", 0o755}, {"opt", 0o755},
	}
	for _, d := range dirs {
		if err := mkdirMode(root, d.name, d.mode); err != nil {
			return nil, err
		}
	}
	if chown {
		if err := root.Lchown("home/user", userID, userID); err != nil {
			return nil, err
		}
	}
	for _, t := range hostTops {
		fi, err := os.Lstat("/" + t)
		switch {
		case errors.Is(err, fs.ErrNotExist):
			continue
		case err != nil:
			return nil, err
		case fi.Mode()&fs.ModeSymlink != 0:
			target, err := os.Readlink("/" + t)
			if err != nil {
				return nil, err
			}
			if err := root.Symlink(target, t); err != nil {
				return nil, err
			}
		case fi.IsDir():
			if err := mkdirMode(root, t, 0o755); err != nil {
				return nil, err
			}
			binds = append(binds, "/"+t)
		}
	}
	if len(binds) == 0 || binds[0] != "/usr" {
		return nil, fmt.Errorf("the host has no /usr directory to share; build or import a template instead: %w", sandbox.ErrUnavailable)
	}

	shell := "/bin/sh"
	if fi, err := os.Stat("/usr/bin/bash"); err == nil && fi.Mode().IsRegular() {
		shell = "/bin/bash"
	}
	files := map[string]string{
		"etc/passwd": "root:x:0:0:root:/root:" + shell + "\n" +
			fmt.Sprintf("%s:x:%d:%d::%s:%s\n", userName, userID, userID, userHome, shell) +
			"nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
		"etc/group": "root:x:0:\ntty:x:5:\n" +
			fmt.Sprintf("%s:x:%d:\n", userName, userID) +
			"nogroup:x:65534:\n",
		"etc/hosts":         hostsFile,
		"etc/hostname":      "sandbox\n",
		"etc/nsswitch.conf": nsswitchConf,
		"etc/resolv.conf":   resolvConf(),
	}
	if b, err := os.ReadFile("/etc/os-release"); err == nil {
		files["etc/os-release"] = string(b)
	} else if b, err := os.ReadFile("/usr/lib/os-release"); err == nil {
		files["etc/os-release"] = string(b)
	}
	for name, content := range files {
		if err := root.WriteFile(name, []byte(content), 0o644); err != nil {
			return nil, err
		}
		if err := root.Chmod(name, 0o644); err != nil {
			return nil, err
		}
	}
	if err := root.Symlink("../proc/self/mounts", "etc/mtab"); err != nil {
		return nil, err
	}
	for _, e := range hostEtcCopies {
		if err := copyHost(root, "/etc/"+e, "etc/"+e); err != nil {
			return nil, fmt.Errorf("copying /etc/%s: %w", e, err)
		}
	}
	return binds, nil
}

// copyHost copies a host entry into root: regular files (up to 16 MiB)
// by content, symlinks as symlinks, directories recursively; anything else
// and missing entries are skipped.
func copyHost(root *os.Root, src, dst string) error {
	fi, err := os.Lstat(src)
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if parent := filepath.Dir(dst); parent != "etc" {
		if _, err := root.Lstat(parent); errors.Is(err, fs.ErrNotExist) {
			if err := mkdirMode(root, parent, 0o755); err != nil { // etc/ssl
				return err
			}
		}
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		t, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return root.Symlink(t, dst)
	case fi.Mode().IsRegular():
		if fi.Size() > 16<<20 {
			return nil
		}
		b, err := os.ReadFile(src)
		if err != nil {
			return err
		}
		if err := root.WriteFile(dst, b, 0o644); err != nil {
			return err
		}
		return root.Chmod(dst, fi.Mode().Perm()&0o755)
	case fi.IsDir():
		if err := mkdirMode(root, dst, 0o755); err != nil {
			return err
		}
		entries, err := os.ReadDir(src)
		if err != nil {
			return err
		}
		for _, e := range entries {
			if err := copyHost(root, src+"/"+e.Name(), dst+"/"+e.Name()); err != nil {
				return err
			}
		}
	}
	return nil
}

const hostsFile = `127.0.0.1	localhost sandbox
::1	localhost ip6-localhost ip6-loopback
`

const nsswitchConf = `passwd:   files
group:    files
shadow:   files
hosts:    files dns
networks: files
protocols: files
services: files
ethers:   files
rpc:      files
`

// Nameservers are the resolvers of resolvConf, which a sandbox with a
// network may reach.
func Nameservers() []netip.Addr {
	var out []netip.Addr
	for _, line := range strings.Split(resolvConf(), "\n") {
		if f := strings.Fields(line); len(f) == 2 && f[0] == "nameserver" {
			if a, err := netip.ParseAddr(f[1]); err == nil && a.Is4() {
				out = append(out, a)
			}
		}
	}
	return out
}

// resolvConf is the resolv.conf cove's templates get: the host's
// resolvers minus those on its loopback (127.0.0.53 of systemd-resolved
// cannot be reached from a sandbox's network namespace; its upstream list
// is used instead). Sandboxes have no network unless their policy grants
// it, and then these are the resolvers they can use.
func resolvConf() string {
	var keep []string
	for _, p := range []string{"/etc/resolv.conf", "/run/systemd/resolve/resolv.conf"} {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		keep = keep[:0]
		servers := 0
		for _, line := range strings.Split(string(b), "\n") {
			f := strings.Fields(line)
			if len(f) < 2 {
				continue
			}
			switch f[0] {
			case "nameserver":
				if a, err := netip.ParseAddr(f[1]); err == nil && !a.IsLoopback() && !a.IsUnspecified() {
					keep = append(keep, "nameserver "+f[1])
					servers++
				}
			case "search", "domain", "options":
				keep = append(keep, strings.Join(f, " "))
			}
		}
		if servers > 0 {
			return "# from the host's " + p + "\n" + strings.Join(keep, "\n") + "\n"
		}
	}
	return "# the host has no resolver a sandbox can reach\n"
}

// mkdirMode makes a directory with exactly this mode, whatever the umask.
func mkdirMode(root *os.Root, name string, mode fs.FileMode) error {
	if err := root.Mkdir(name, 0o700); err != nil {
		return err
	}
	return root.Chmod(name, mode)
}
