package template

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"syscall"
)

// digestTree returns the digest of the tree under dir with its config and
// binds (see Template.Digest) and the total size of its regular files,
// each inode counted once.
//
// The canonical manifest has one line per entry below dir, in byte order
// of their slash-separated paths (a directory's entries right after it):
//
//	"usr/bin/env" f 0755 0 0 <hex sha256 of the content>
//	"bin" l 0777 0 0 "usr/bin"
//	"tmp" d 1777 0 0 -
//
// followed by "config " and the JSON of Config and Binds. Times are left
// out so that the same files always give the same digest. Symlinks are
// never followed.
func digestTree(ctx context.Context, dir string, cfg Config, binds []string) (string, int64, error) {
	h := sha256.New()
	w := bufio.NewWriterSize(h, 64<<10)
	d := &digester{ctx: ctx, w: w, seen: map[[2]uint64]bool{}, buf: make([]byte, 256<<10)}
	if err := d.dir(dir, ""); err != nil {
		return "", 0, err
	}
	tail, err := json.Marshal(struct {
		Config Config   `json:"config"`
		Binds  []string `json:"binds"`
	}{cfg, binds})
	if err != nil {
		return "", 0, err
	}
	fmt.Fprintf(w, "config %s\n", tail)
	if err := w.Flush(); err != nil {
		return "", 0, err
	}
	return "sha256:" + hex.EncodeToString(h.Sum(nil)), d.size, nil
}

type digester struct {
	ctx  context.Context
	w    io.Writer
	size int64
	seen map[[2]uint64]bool // dev, ino of hard-linked files already counted
	buf  []byte
}

func (d *digester) dir(host, rel string) error {
	entries, err := os.ReadDir(host) // sorted by name
	if errors.Is(err, fs.ErrPermission) {
		// Without root, a tree we extracted is ours but may hold a
		// directory without read or search permission: lend it for the
		// walk.
		if restore, ok := lendPermission(host, 0o500); ok {
			defer restore()
			entries, err = os.ReadDir(host)
		}
	}
	if err != nil {
		return err
	}
	for _, e := range entries {
		if err := d.ctx.Err(); err != nil {
			return err
		}
		name := e.Name()
		if rel != "" {
			name = rel + "/" + name
		}
		p := filepath.Join(host, e.Name())
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, _ := fi.Sys().(*syscall.Stat_t)
		var mode, uid, gid uint32
		if st != nil {
			mode, uid, gid = st.Mode&0o7777, st.Uid, st.Gid
		}
		line := func(typ byte, detail string) {
			fmt.Fprintf(d.w, "%s %c %04o %d %d %s\n", strconv.Quote(name), typ, mode, uid, gid, detail)
		}
		switch fi.Mode().Type() {
		case fs.ModeDir:
			line('d', "-")
			if err := d.dir(p, name); err != nil {
				return err
			}
		case fs.ModeSymlink:
			target, err := os.Readlink(p)
			if err != nil {
				return err
			}
			line('l', strconv.Quote(target))
		case 0:
			sum, err := d.file(p, st)
			if err != nil {
				return fmt.Errorf("%s: %w", name, err)
			}
			line('f', sum)
		default:
			// Imports and builds leave none; hash what it is so that
			// different trees cannot share a digest.
			var rdev uint64
			if st != nil {
				rdev = st.Rdev
			}
			line('o', fmt.Sprintf("%v:%d", fi.Mode().Type(), rdev))
		}
	}
	return nil
}

func (d *digester) file(p string, st *syscall.Stat_t) (string, error) {
	f, err := os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
	if errors.Is(err, fs.ErrPermission) { // /etc/shadow is 0000 on some distributions
		if restore, ok := lendPermission(p, 0o400); ok {
			f, err = os.OpenFile(p, os.O_RDONLY|syscall.O_NOFOLLOW, 0)
			restore()
		}
	}
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	n, err := io.CopyBuffer(h, f, d.buf)
	if err != nil {
		return "", err
	}
	if st == nil || st.Nlink <= 1 {
		d.size += n
	} else if k := [2]uint64{st.Dev, st.Ino}; !d.seen[k] {
		d.seen[k] = true
		d.size += n
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

// lendPermission adds the owner permission bits to p (which the caller
// owns and has checked is not a symlink) and returns how to restore the
// mode.
func lendPermission(p string, bits fs.FileMode) (restore func(), ok bool) {
	fi, err := os.Lstat(p)
	if err != nil || fi.Mode()&fs.ModeSymlink != 0 {
		return nil, false
	}
	mode := fi.Mode() & (fs.ModePerm | fs.ModeSetuid | fs.ModeSetgid | fs.ModeSticky)
	if os.Chmod(p, mode|bits) != nil {
		return nil, false
	}
	return func() { os.Chmod(p, mode) }, true
}
