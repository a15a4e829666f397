package sandboxtest

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/cove-sandbox/cove/sandbox"
)

// The escape tests' roles: a test binary copied into a sandbox (see
// NewAttacker) runs them there, and Main answers them:
//
//	attack-setup     as root: AttackOutside, a tree the sandbox's user can
//	                 neither read nor change, holding AttackCanary
//	attack-prepare   as the user: make /workspace/d and, beside it, a
//	                 symlink to AttackOutside
//	attack-flip SEC  as the user: swap the two for SEC seconds, as fast
//	                 as it can; print the swap count
//	attack-snapshot  as root: every entry of AttackOutside with its mode
//	                 and content hash
//	attack-vsock     try AF_VSOCK stream, dgram and seqpacket sockets;
//	                 print "ok" or the errno's name for each
const (
	AttackOutside = "/etc/cove-attack"
	AttackCanary  = "CANARY-root-only"
)

// attackRole runs role; false when it is not one of the roles above.
func attackRole(role string, args []string) (bool, error) {
	d, swap := "/workspace/d", "/workspace/.d-swap"
	switch role {
	case "attack-setup":
		if err := attackTree(AttackOutside, AttackCanary, 0o640); err != nil {
			return true, err
		}
		if err := os.Chmod(AttackOutside, 0o750); err != nil {
			return true, err
		}
		return true, os.WriteFile(filepath.Join(AttackOutside, "outside-only.txt"), []byte(AttackCanary), 0o640)
	case "attack-prepare":
		if err := attackTree(d, "inside", 0o666); err != nil {
			return true, err
		}
		return true, os.Symlink(AttackOutside, swap)
	case "attack-flip":
		if len(args) != 1 {
			return true, errors.New("usage: attack-flip SECONDS")
		}
		secs, _ := strconv.Atoi(args[0])
		n := 0
		for end := time.Now().Add(time.Duration(secs) * time.Second); time.Now().Before(end); {
			for range 100 {
				if unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE) == nil {
					n++
				}
			}
		}
		if fi, err := os.Lstat(d); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			unix.Renameat2(unix.AT_FDCWD, d, unix.AT_FDCWD, swap, unix.RENAME_EXCHANGE)
		}
		fmt.Println(n)
		return true, nil
	case "attack-snapshot":
		return true, filepath.WalkDir(AttackOutside, func(p string, de fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			fi, err := de.Info()
			if err != nil {
				return err
			}
			line := p + " " + fi.Mode().String()
			if fi.Mode().IsRegular() {
				data, err := os.ReadFile(p)
				if err != nil {
					return err
				}
				line += fmt.Sprintf(" %x", sha256.Sum256(data))
			}
			fmt.Println(line)
			return nil
		})
	case "attack-vsock":
		for _, typ := range []int{unix.SOCK_STREAM, unix.SOCK_DGRAM, unix.SOCK_SEQPACKET} {
			fd, err := unix.Socket(unix.AF_VSOCK, typ, 0)
			var errno syscall.Errno
			switch {
			case err == nil:
				unix.Close(fd)
				fmt.Println("ok")
			case errors.As(err, &errno):
				fmt.Println(unix.ErrnoName(errno))
			default:
				return true, err
			}
		}
		return true, nil
	}
	return false, nil
}

// attackTree makes the files AttackOutside and the swapped directory both
// hold.
func attackTree(dir, content string, mode fs.FileMode) error {
	if err := os.MkdirAll(filepath.Join(dir, "sub"), 0o750); err != nil {
		return err
	}
	for _, f := range []string{"secret.txt", "victim", "sub/secret.txt"} {
		if err := os.WriteFile(filepath.Join(dir, f), []byte(content), mode); err != nil {
			return err
		}
	}
	return nil
}

// Attacker is the running test binary copied into a sandbox, to run the
// attack roles there.
type Attacker struct {
	s sandbox.Session
	// Path is the binary's path in the sandbox.
	Path string
}

// NewAttacker copies the running test binary into s's workspace as
// .attack. The test binary's TestMain must be Main.
func NewAttacker(t testing.TB, s sandbox.Session) *Attacker {
	t.Helper()
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	f, err := os.Open(exe)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if err := s.WriteFile(context.Background(), ".attack", f, 0o755); err != nil {
		t.Fatal(err)
	}
	return &Attacker{s: s, Path: "/workspace/.attack"}
}

// Run runs a role as user ("" for the sandbox's) to its end and returns
// what it printed; a role that fails fails the test.
func (a *Attacker) Run(t testing.TB, user string, args ...string) string {
	t.Helper()
	var out, errOut strings.Builder
	st, err := a.s.Exec(context.Background(), sandbox.ExecRequest{Cmd: a.Path, Args: args, User: user, Stdout: &out, Stderr: &errOut})
	if err != nil || st.Code != 0 {
		t.Fatalf("%v as %q: %v, exit %+v: %s", args, user, err, st, errOut.String())
	}
	return out.String()
}
