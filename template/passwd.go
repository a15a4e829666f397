package template

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/cove-sandbox/cove/sandbox"
)

// The sandbox's unprivileged user, as every template's /etc/passwd names it.
const (
	userName = "user"
	userID   = 1000
	userHome = "/home/user"
)

// ensureUser makes sure the root filesystem has the sandbox user. When
// imageUser (an image config's User) names a user other than root, the
// image brings its own and nothing is done. Otherwise, unless /etc/passwd
// already has an entry for uid 1000 (whatever its name, as the `node` of
// Node.js images), it appends
//
//	user:x:1000:1000::/home/user:/bin/sh   (/bin/bash when the tree has bash)
//
// and, unless gid 1000 exists, "user:x:1000:" to /etc/group, creating the
// files when missing, and creates /home/user (mode 0755, owned by
// 1000:1000 when chown is set). When the name "user" is taken by another
// uid nothing is added. It returns a note for the progress output, or "".
//
// All access goes through root, so a hostile tree's symlinks cannot lead
// the writes out; /etc/passwd and /etc/group must be regular files.
func ensureUser(root *os.Root, imageUser string, chown bool) (string, error) {
	switch imageUser {
	case "", "root", "0", "0:0", "root:root":
	default:
		return fmt.Sprintf("the image runs as %q: not adding the sandbox user %s (uid %d)", imageUser, userName, userID), nil
	}
	passwd, err := readRegular(root, "etc/passwd")
	if err != nil {
		return "", err
	}
	nameTaken := false
	for _, line := range strings.Split(passwd, "\n") {
		f := strings.Split(line, ":")
		if len(f) < 4 {
			continue
		}
		if f[2] == "1000" {
			return "", nil
		}
		if f[0] == userName {
			nameTaken = true
		}
	}
	if nameTaken {
		return fmt.Sprintf("note: /etc/passwd names %q with a uid other than %d; the sandbox user has no passwd entry", userName, userID), nil
	}
	group, err := readRegular(root, "etc/group")
	if err != nil {
		return "", err
	}
	gidTaken := false
	for _, line := range strings.Split(group, "\n") {
		if f := strings.Split(line, ":"); len(f) >= 3 && f[2] == "1000" {
			gidTaken = true
		}
	}
	shell := "/bin/sh"
	for _, p := range []string{"usr/bin/bash", "bin/bash"} {
		if fi, err := root.Lstat(p); err == nil && fi.Mode().IsRegular() {
			shell = "/bin/bash"
			break
		}
	}
	if _, err := root.Lstat("etc"); errors.Is(err, fs.ErrNotExist) {
		if err := mkdirMode(root, "etc", 0o755); err != nil {
			return "", fmt.Errorf("adding the sandbox user: /etc: %w", err)
		}
	}
	if err := appendLine(root, "etc/passwd", passwd, fmt.Sprintf("%s:x:%d:%d::%s:%s", userName, userID, userID, userHome, shell)); err != nil {
		return "", err
	}
	if !gidTaken {
		if err := appendLine(root, "etc/group", group, fmt.Sprintf("%s:x:%d:", userName, userID)); err != nil {
			return "", err
		}
	}
	home := strings.TrimPrefix(userHome, "/")
	if _, err := root.Lstat(home); errors.Is(err, fs.ErrNotExist) {
		if _, err := root.Lstat("home"); errors.Is(err, fs.ErrNotExist) {
			if err := mkdirMode(root, "home", 0o755); err != nil {
				return "", fmt.Errorf("adding the sandbox user: creating /home: %w", err)
			}
		}
		if err := mkdirMode(root, home, 0o755); err != nil {
			return "", fmt.Errorf("adding the sandbox user: creating %s: %w", userHome, err)
		}
		if chown {
			if err := root.Lchown(home, userID, userID); err != nil {
				return "", err
			}
		}
	}
	return fmt.Sprintf("added the sandbox user %s (uid %d) to /etc/passwd", userName, userID), nil
}

// readRegular returns the content of a regular file in root, "" when it
// does not exist.
func readRegular(root *os.Root, name string) (string, error) {
	fi, err := root.Lstat(name)
	if errors.Is(err, fs.ErrNotExist) {
		return "", nil
	}
	if err != nil {
		return "", fmt.Errorf("adding the sandbox user: /%s: %w", name, err)
	}
	if !fi.Mode().IsRegular() {
		return "", fmt.Errorf("adding the sandbox user: /%s is not a regular file (%v); cove needs to add uid %d to it: %w", name, fi.Mode().Type(), userID, sandbox.ErrInvalid)
	}
	b, err := root.ReadFile(name)
	if err != nil {
		return "", fmt.Errorf("adding the sandbox user: /%s: %w", name, err)
	}
	return string(b), nil
}

// appendLine writes old plus line to the file, keeping its mode (0644 for
// a new file).
func appendLine(root *os.Root, name, old, line string) error {
	if old != "" && !strings.HasSuffix(old, "\n") {
		old += "\n"
	}
	mode := fs.FileMode(0o644)
	if fi, err := root.Lstat(name); err == nil {
		mode = fi.Mode().Perm()
	}
	if err := root.WriteFile(name, []byte(old+line+"\n"), mode); err != nil {
		return fmt.Errorf("adding the sandbox user to /%s: %w", name, err)
	}
	return nil
}

// mountPoints are the directories every template has, so that the runtime
// can mount /dev, /proc, /sys and /tmp without changing the template.
var mountPoints = []struct {
	name string
	mode fs.FileMode
}{{"dev", 0o755}, {"proc", 0o555}, {"sys", 0o555}, {"tmp", 0o777 | fs.ModeSticky}}

// ensureMountPoints creates the missing mountPoints. One that exists as
// something else than a directory is an error wrapping sandbox.ErrInvalid.
func ensureMountPoints(root *os.Root) error {
	for _, m := range mountPoints {
		fi, err := root.Lstat(m.name)
		if errors.Is(err, fs.ErrNotExist) {
			if err := mkdirMode(root, m.name, m.mode); err != nil {
				return err
			}
			continue
		}
		if err != nil {
			return err
		}
		if !fi.IsDir() {
			return fmt.Errorf("/%s is a %v, not a directory; the runtime mounts its own /%s there: %w", m.name, fi.Mode().Type(), m.name, sandbox.ErrInvalid)
		}
	}
	return nil
}
