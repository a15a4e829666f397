package sandboxbin

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"golang.org/x/sys/unix"
)

// Command returns the argv prefix that runs the in-sandbox roles (guest,
// local-init): the embedded cmd/cove-sandbox, installed in dir (see
// install), or nil when cove has no embedded copy and runs them itself.
func Command(dir string) ([]string, error) {
	return install(dir, "cove-sandbox", Binary, BinarySum)
}

// LocalCommands returns the local runtime's local.Config Command and
// InitCommand: the embedded cmd/cove-shim for the supervisor and
// cmd/cove-sandbox for pid 1, installed in dir, or nil for both when cove
// has no embedded copies and runs the roles itself.
func LocalCommands(dir string) (shimCmd, initCmd []string, err error) {
	if len(Binary) == 0 || len(Shim) == 0 {
		return nil, nil, nil
	}
	if shimCmd, err = install(dir, "cove-shim", Shim, ShimSum); err != nil {
		return nil, nil, err
	}
	if initCmd, err = install(dir, "cove-sandbox", Binary, BinarySum); err != nil {
		return nil, nil, err
	}
	return shimCmd, initCmd, nil
}

// install makes sure dir holds the program bin, whose SHA-256 is sum (hex,
// computed when cove was built, so no start of cove hashes the 25 MB it
// embeds), under a name derived from sum (so an upgrade never runs a stale
// copy, and concurrent writers agree), and returns the argv prefix that
// runs it; nil for an empty bin.
//
// The copy on disk runs as every sandbox's supervisor and pid 1, so it is
// used only when it is known to be bin: hashed in full when written or
// first met, then remembered by a stamp beside it holding the file's
// identity (device, inode, size, mode, owner, mtime and ctime). Any write,
// chmod or replacement of the file changes its ctime, which no caller
// can set back, so a later start that finds the same identity trusts the
// copy after one stat and one small read; any other finding hashes the
// file again and replaces it if it is not bin. Stamps are trusted only in
// a directory and for a file that no one but their owner (this user or
// root) can write.
func install(dir, name string, bin []byte, sum string) ([]string, error) {
	if len(bin) == 0 {
		return nil, nil
	}
	path, err := Install(dir, name, func() ([]byte, error) { return bin, nil }, sum)
	if err != nil {
		return nil, err
	}
	return []string{path}, nil
}

// Install is install for any program cove carries, given by load, which
// is called only when the copy must be written (the full cove that the
// front carries is compressed): it returns the installed copy's path.
func Install(dir, name string, load func() ([]byte, error), sum string) (string, error) {
	sum = strings.TrimSpace(sum)
	if len(sum) != sha256.Size*2 {
		return "", fmt.Errorf("installing the program %s: cove was built without its checksum: rebuild cove with make build", name)
	}
	path := filepath.Join(dir, name+"-"+sum[:16])
	stamp := path + ".verified"
	id, ctime, err := identity(path)
	if err == nil && trustedDir(dir) && readStamp(stamp) == id {
		return path, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return "", fmt.Errorf("installing the program %s: %w", name, err)
	}
	if !trustedDir(dir) {
		return "", fmt.Errorf("installing the program %s: %s can be written by other users, who could swap the programs cove runs: make it writable only by its owner (chmod go-w %s)", name, dir, dir)
	}
	if err == nil && fileSum(path) == sum {
		writeStamp(dir, stamp, id, ctime)
		return path, nil
	}
	// Missing, tampered with, or writable by others: write it anew.
	bin, err := load()
	if err != nil {
		return "", fmt.Errorf("installing the program %s: %w", name, err)
	}
	if err := write(dir, name, path, bin, sum); err != nil {
		return "", err
	}
	if id, ctime, err := identity(path); err == nil {
		writeStamp(dir, stamp, id, ctime)
	}
	return path, nil
}

// write replaces path with bin, after checking that bin is what sum says
// (a build that embedded a program without updating its checksum must
// fail here rather than keep rewriting the copy).
func write(dir, name, path string, bin []byte, sum string) error {
	if got := sha256.Sum256(bin); hex.EncodeToString(got[:]) != sum {
		return fmt.Errorf("installing the program %s: the embedded program does not match its build-time checksum: rebuild cove with make build", name)
	}
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return fmt.Errorf("installing the program %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err = tmp.Write(bin); err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err != nil {
		return fmt.Errorf("installing the program %s in %s: %w", name, dir, err)
	}
	dropCache(path)
	return nil
}

// identity describes the file at path as a stamp holds it, and returns
// its ctime, or fails when it is not a regular file that only its owner,
// this user or root, can write.
func identity(path string) (string, time.Time, error) {
	var st unix.Stat_t
	if err := unix.Lstat(path, &st); err != nil {
		return "", time.Time{}, err
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG || !ownedSafely(st.Uid, st.Mode) {
		return "", time.Time{}, errors.New("not a regular file only its owner can write")
	}
	id := fmt.Sprintf("v1 %d %d %d %o %d %d.%09d %d.%09d", st.Dev, st.Ino, st.Size, st.Mode, st.Uid,
		st.Mtim.Sec, st.Mtim.Nsec, st.Ctim.Sec, st.Ctim.Nsec)
	return id, time.Unix(st.Ctim.Sec, st.Ctim.Nsec), nil
}

// ownedSafely reports whether a file of owner uid and mode can be written
// only by this user or root.
func ownedSafely(uid, mode uint32) bool {
	return (uid == 0 || int(uid) == os.Geteuid()) && mode&0o022 == 0
}

// trustedDir reports whether dir, where the stamps are, can be written
// only by this user or root: anyone else could swap a program and its
// stamp together.
func trustedDir(dir string) bool {
	var st syscall.Stat_t
	if err := syscall.Lstat(dir, &st); err != nil {
		return false
	}
	return st.Mode&syscall.S_IFMT == syscall.S_IFDIR && ownedSafely(st.Uid, st.Mode)
}

// fileSum is the hex SHA-256 of the file at path, "" when it cannot be read.
func fileSum(path string) string {
	f, err := os.Open(path)
	if err != nil {
		return ""
	}
	defer f.Close()
	h := sha256.New()
	_, err = io.Copy(h, f)
	// As dropCache: read in one go, it would stay cached in large folios.
	_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	if err != nil {
		return ""
	}
	return hex.EncodeToString(h.Sum(nil))
}

func readStamp(path string) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(data))
}

// clockTick bounds the granularity of the kernel's file timestamps (a
// scheduler tick: 1 to 10 ms).
const clockTick = 20 * time.Millisecond

// writeStamp records id, of a file whose ctime is ctime, for the next
// start; a stamp that cannot be written only costs that start a hash, so
// errors are ignored. File times come from a coarse clock: a write within
// the same tick as ctime could leave ctime as it was, so the stamp is
// written only once that tick is surely past, and any later change of the
// file shows as a later ctime.
func writeStamp(dir, path, id string, ctime time.Time) {
	if wait := clockTick - time.Since(ctime); wait > 0 {
		time.Sleep(wait)
	}
	tmp, err := os.CreateTemp(dir, ".stamp-*")
	if err != nil {
		return
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.WriteString(id + "\n")
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		_ = os.Rename(tmp.Name(), path)
	}
}

// dropCache evicts the file just written from the page cache. Written in
// one go, it is cached in large folios, which the kernel maps 2 MB at a
// time: every idle sandbox process would keep megabytes of the program
// resident. Read back by exec's page faults it is cached in small pages,
// and an idle process keeps only what it touches.
func dropCache(path string) {
	f, err := os.Open(path)
	if err != nil {
		return
	}
	defer f.Close()
	if f.Sync() == nil {
		_ = unix.Fadvise(int(f.Fd()), 0, 0, unix.FADV_DONTNEED)
	}
}
