// Package workdir hands the workspace an agent run left over to the
// host: as a patch against the original directory (Diff), or copied into
// a directory without following any link in it (Sync).
package workdir

import (
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
)

// Diff is a unified diff of the changes from orig to final,
// with the files named a/PATH and b/PATH as patch -p1 and git apply take
// them. diff runs on two links named a and b rather than on the real
// paths, so no rewriting of its output can touch the files' content.
//
// diff reads through symbolic links, and final's were made by the
// sandbox: one to a host file (~/.ssh/id_ed25519) would put that file
// in the patch, for the user to apply into the workspace. So the links final does not
// share with orig (new, or with another target, or with a relative
// target that leaves the tree) are taken out of final first (it is the
// run's own copy) and returned instead, each as "PATH -> TARGET"; a link
// both have, the user's own, is read as before.
func Diff(orig, final string) (patch string, links []string, err error) {
	links, err = dropNewLinks(orig, final)
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "cove-diff-")
	if err != nil {
		return "", nil, err
	}
	defer os.RemoveAll(dir)
	if err := os.Symlink(orig, filepath.Join(dir, "a")); err != nil {
		return "", nil, err
	}
	if err := os.Symlink(final, filepath.Join(dir, "b")); err != nil {
		return "", nil, err
	}
	cmd := exec.Command("diff", "-ruN", "--exclude=.git", "a", "b")
	cmd.Dir = dir
	out, err := cmd.Output()
	var ee *exec.ExitError
	if err != nil && !(errors.As(err, &ee) && ee.ExitCode() == 1) {
		return "", nil, fmt.Errorf("diffing the workspace: %v", err)
	}
	return string(out), links, nil
}

// dropNewLinks removes from final each symbolic link that orig does not
// have with the same target, and returns them as "PATH -> TARGET".
func dropNewLinks(orig, final string) ([]string, error) {
	var links []string
	err := filepath.WalkDir(final, func(p string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir // diff leaves it out
		}
		if d.Type()&os.ModeSymlink == 0 {
			return nil
		}
		target, err := os.Readlink(p)
		if err != nil {
			return err
		}
		rel, err := filepath.Rel(final, p)
		if err != nil {
			return err
		}
		// A relative target that leaves the tree is another file from
		// final than from orig.
		same := filepath.IsAbs(target) || filepath.IsLocal(filepath.Join(filepath.Dir(rel), target))
		if old, err := os.Readlink(filepath.Join(orig, rel)); err == nil && old == target && same {
			return nil
		}
		links = append(links, rel+" -> "+target)
		return os.Remove(p)
	})
	return links, err
}

// Sync makes out hold the final workspace: final's files, folders and
// links are copied over (modes and times kept), and what the agent deleted
// from the original workspace orig (if any) is removed. Everything is done
// through an os.Root on out, so nothing the sandbox chose (a name in its
// workspace) is written, made or removed through a link that leads out of
// out, whoever made the link: an entry of out that is in the way (a link
// where the agent left a folder, a folder where it left a file) is
// replaced, not written through.
func Sync(final, out, orig string) error {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	root, err := os.OpenRoot(out)
	if err != nil {
		return err
	}
	defer root.Close()
	err = filepath.WalkDir(final, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == final {
			return err
		}
		rel, err := filepath.Rel(final, p)
		if err != nil {
			return err
		}
		fi, err := d.Info()
		if err != nil {
			return err
		}
		return syncEntry(root, p, rel, fi)
	})
	if err != nil || orig == "" {
		return err
	}
	return filepath.WalkDir(orig, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == orig {
			return err
		}
		rel, _ := filepath.Rel(orig, p)
		if d.IsDir() && d.Name() == ".git" {
			return filepath.SkipDir
		}
		if _, err := os.Lstat(filepath.Join(final, rel)); errors.Is(err, os.ErrNotExist) {
			if err := root.RemoveAll(rel); err != nil {
				return err
			}
			if d.IsDir() {
				return filepath.SkipDir
			}
		}
		return nil
	})
}

// syncEntry puts final's entry src (rel in the workspace, described by
// fi) at rel in root.
func syncEntry(root *os.Root, src, rel string, fi os.FileInfo) error {
	old, err := root.Lstat(rel)
	exists := err == nil
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	// Whatever is there of another kind goes, a link always: the new
	// entry is made in its place, never through it.
	if exists && (old.Mode().Type() != fi.Mode().Type() || old.Mode()&os.ModeSymlink != 0) {
		if err := root.RemoveAll(rel); err != nil {
			return err
		}
		exists = false
	}
	switch {
	case fi.IsDir():
		if !exists {
			if err := root.Mkdir(rel, 0o700); err != nil {
				return err
			}
		}
		return root.Chmod(rel, fi.Mode().Perm())
	case fi.Mode()&os.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			return err
		}
		return root.Symlink(target, rel)
	case fi.Mode().IsRegular():
		in, err := os.Open(src)
		if err != nil {
			return err
		}
		defer in.Close()
		f, err := root.OpenFile(rel, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, fi.Mode().Perm())
		if err != nil {
			return err
		}
		_, err = io.Copy(f, in)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = root.Chmod(rel, fi.Mode().Perm())
		}
		if err == nil {
			err = root.Chtimes(rel, fi.ModTime(), fi.ModTime())
		}
		return err
	}
	return nil // the extraction made nothing else
}
