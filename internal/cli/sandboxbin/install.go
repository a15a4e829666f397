package sandboxbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Command returns the argv prefix that runs the sandbox roles: the
// embedded program, written once under a name derived from its content (so
// an upgrade never runs a stale copy, and concurrent writers agree), or nil
// when cove has no embedded copy and runs them itself.
func Command(dir string) ([]string, error) {
	if len(Binary) == 0 {
		return nil, nil
	}
	sum := sha256.Sum256(Binary)
	path := filepath.Join(dir, "cove-sandbox-"+hex.EncodeToString(sum[:8]))
	if fi, err := os.Stat(path); err == nil && fi.Size() == int64(len(Binary)) {
		return []string{path}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("installing the sandbox program: %w", err)
	}
	tmp, err := os.CreateTemp(dir, ".cove-sandbox-*")
	if err != nil {
		return nil, fmt.Errorf("installing the sandbox program: %w", err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(Binary); err == nil {
		err = tmp.Chmod(0o755)
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), path)
	}
	if err == nil {
		dropCache(path)
	}
	if err != nil {
		return nil, fmt.Errorf("installing the sandbox program in %s: %w", dir, err)
	}
	return []string{path}, nil
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
