package pid1

import (
	"errors"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/guest"
)

// Run by the name sudo (the executable bound over the sandbox's
// /usr/bin/sudo), the program is the sandbox's sudo, whatever program
// links this package: cove, cmd/cove-sandbox or a test binary that runs
// the roles.
func init() {
	if filepath.Base(os.Args[0]) == "sudo" {
		os.Exit(guest.SudoMain(os.Args[1:]))
	}
}

// sudoPath is where the sandbox's sudo goes: a template's own sudo (or
// the host's, for the host template) is setuid, which no_new_privs
// makes useless, so it is covered.
const sudoPath = "/usr/bin/sudo"

// exeMount is this executable, cloned as a detached mount while the
// host's paths are in view; fd is -1 when it could not be.
type exeMount struct{ hostMount }

func (e exeMount) close() {
	if e.fd >= 0 {
		unix.Close(e.fd)
	}
}

// cloneExe clones this executable for bindSudo, before pivot_root.
func cloneExe(log *slog.Logger) exeMount {
	p, err := os.Readlink("/proc/self/exe")
	if err == nil {
		var fd int
		fd, err = unix.OpenTree(unix.AT_FDCWD, p, unix.OPEN_TREE_CLONE|unix.OPEN_TREE_CLOEXEC)
		if err == nil {
			return exeMount{hostMount{path: p, fd: fd}}
		}
	}
	log.Warn("no sudo in this sandbox: cannot take this executable", "err", err)
	return exeMount{hostMount{fd: -1}}
}

// bindSudo mounts exe, read-only, over the sandbox's /usr/bin/sudo,
// creating the file when /usr/bin is the sandbox's own (a template's
// overlay). It returns false, and logs why, when there is nowhere to
// mount it: the host template over a host without sudo installed.
func bindSudo(exe exeMount, log *slog.Logger) bool {
	if exe.fd < 0 {
		return false
	}
	fi, err := os.Lstat(sudoPath)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		f, err := os.OpenFile(sudoPath, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o755)
		if err != nil {
			log.Info("no sudo in this sandbox: cannot make "+sudoPath+" (the host template gives the host's /usr: install sudo on the host)", "err", err)
			return false
		}
		f.Close()
	case err != nil:
		log.Warn("no sudo in this sandbox", "err", err)
		return false
	case !fi.Mode().IsRegular() && fi.Mode().Type() != fs.ModeSymlink:
		log.Warn("no sudo in this sandbox: " + sudoPath + " is not a file")
		return false
	}
	if err := attach(exe.hostMount, sudoPath, unix.MOUNT_ATTR_RDONLY|unix.MOUNT_ATTR_NOSUID|unix.MOUNT_ATTR_NODEV); err != nil {
		log.Warn("no sudo in this sandbox", "err", err)
		return false
	}
	return true
}
