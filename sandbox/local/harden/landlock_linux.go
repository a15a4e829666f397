package harden

import (
	"errors"
	"fmt"
	"os"

	"github.com/landlock-lsm/go-landlock/landlock"
	ll "github.com/landlock-lsm/go-landlock/landlock/syscall"
)

// Landlock access rights, as sets. Rights are added up along a path, so a
// file beneath a writable directory gets llRead from the rule on "/" and
// the write rights from the rule on its directory.
const (
	// llRead is granted on "/": read and execute anything, and connect to
	// any pathname unix socket (ABI 9 and later handle that right; it is
	// granted so that they change nothing).
	llRead = ll.AccessFSExecute | ll.AccessFSReadFile | ll.AccessFSReadDir | ll.AccessFSResolveUnix

	// llWriteDir is granted beneath writable directories: everything
	// that writes, except making device nodes (which also needs the
	// dropped CAP_MKNOD). Refer allows rename and link between
	// directories; IoctlDev lets terminals under /dev/pts be driven.
	llWriteDir = ll.AccessFSWriteFile | ll.AccessFSRemoveDir | ll.AccessFSRemoveFile |
		ll.AccessFSMakeDir | ll.AccessFSMakeReg | ll.AccessFSMakeSock | ll.AccessFSMakeFifo |
		ll.AccessFSMakeSym | ll.AccessFSRefer | ll.AccessFSTruncate | ll.AccessFSIoctlDev

	// llWriteFile is the part of llWriteDir that applies to a single
	// file (such as /dev/null); Landlock refuses directory rights on one.
	llWriteFile = ll.AccessFSWriteFile | ll.AccessFSTruncate | ll.AccessFSIoctlDev
)

// restrictPaths puts a Landlock ruleset on every thread: read and execute
// everywhere, write beneath writable. It returns the kernel's ABI version
// (0 when nothing was enforced) and, for the Report, why it did less than
// asked.
func restrictPaths(writable []string) (abi int, skipped []string, err error) {
	abi, err = ll.LandlockGetABIVersion()
	if err != nil || abi < 1 {
		return 0, []string{"landlock: not supported by the kernel or not enabled at boot"}, nil
	}
	if abi < 2 {
		// ABI 1 refuses every rename or link between directories, which
		// breaks mv, git and package managers; go-landlock's best-effort
		// mode would enforce nothing for the same reason.
		return 0, []string{"landlock: ABI 1 cannot allow renames between directories; not applied"}, nil
	}

	var dirs, files []string
	for _, p := range writable {
		fi, err := os.Stat(p)
		if errors.Is(err, os.ErrNotExist) {
			skipped = append(skipped, fmt.Sprintf("landlock: writable path %s does not exist", p))
			continue
		}
		if err != nil {
			return 0, skipped, fmt.Errorf("checking writable path %s: %w", p, err)
		}
		if fi.IsDir() {
			dirs = append(dirs, p)
		} else {
			files = append(files, p)
		}
	}
	ruleset := []landlock.Rule{landlock.PathAccess(llRead, "/")}
	if len(dirs) > 0 {
		// IgnoreIfMissing covers a path removed since the Stat above.
		ruleset = append(ruleset, landlock.PathAccess(llWriteDir, dirs...).IgnoreIfMissing())
	}
	if len(files) > 0 {
		ruleset = append(ruleset, landlock.PathAccess(llWriteFile, files...).IgnoreIfMissing())
	}

	// Every filesystem right go-landlock knows is handled; best effort
	// trims the set to the kernel's ABI. Network rights are not handled:
	// the network namespace decides what is reachable.
	cfg := landlock.Config{HandledAccessFS: landlock.V11.HandledAccessFS}
	if abi >= 8 {
		// landlock_restrict_self's TSYNC flag puts every thread in one
		// domain, so signals and abstract unix sockets can be scoped to
		// it: a second wall behind the PID and network namespaces.
		cfg.Scoped = landlock.V11.Scoped
	} else {
		// Without TSYNC, go-landlock restricts each thread with its own
		// call, and each call makes a new, sibling domain. A process
		// belongs to the domain of the daemon thread that forked it, and
		// Landlock refuses ptrace (and with scoping, signals) from one
		// sibling domain into another. Scoping would stop the daemon from
		// signalling the commands it started from another thread.
		skipped = append(skipped, noTSyncNote(abi))
	}
	cfg = cfg.BestEffort()
	if err := cfg.Restrict(ruleset...); err != nil {
		return 0, skipped, fmt.Errorf("enforcing the Landlock ruleset: %w", err)
	}
	return abi, skipped, nil
}

// noTSyncNote is the Report's note for a kernel whose Landlock has no
// TSYNC (ABI 2 to 7).
func noTSyncNote(abi int) string {
	return fmt.Sprintf("landlock: ABI %d has no TSYNC, so each daemon thread has its own domain: "+
		"signals and abstract unix sockets are not scoped, and ptrace (gdb -p, strace -p) "+
		"from one command's processes into another's may be refused", abi)
}
