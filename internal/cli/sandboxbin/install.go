package sandboxbin

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

// Command returns the argv prefix that runs the in-sandbox roles (guest,
// local-init): the embedded cmd/cove-sandbox, installed in dir (see
// install), or nil when cove has no embedded copy and runs them itself.
func Command(dir string) ([]string, error) {
	return install(dir, "cove-sandbox", Binary)
}

// LocalCommands returns the local runtime's local.Config Command and
// InitCommand: the embedded cmd/cove-shim for the supervisor and
// cmd/cove-sandbox for pid 1, installed in dir, or nil for both when cove
// has no embedded copies and runs the roles itself.
func LocalCommands(dir string) (shimCmd, initCmd []string, err error) {
	if len(Binary) == 0 || len(Shim) == 0 {
		return nil, nil, nil
	}
	if shimCmd, err = install(dir, "cove-shim", Shim); err != nil {
		return nil, nil, err
	}
	if initCmd, err = install(dir, "cove-sandbox", Binary); err != nil {
		return nil, nil, err
	}
	return shimCmd, initCmd, nil
}

// install writes the program bin once, under a name derived from its
// content (so an upgrade never runs a stale copy, and concurrent writers
// agree), and returns the argv prefix that runs it; nil for an empty bin.
func install(dir, name string, bin []byte) ([]string, error) {
	if len(bin) == 0 {
		return nil, nil
	}
	sum := sha256.Sum256(bin)
	path := filepath.Join(dir, name+"-"+hex.EncodeToString(sum[:8]))
	if fi, err := os.Stat(path); err == nil && fi.Size() == int64(len(bin)) {
		return []string{path}, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("installing the sandbox program %s: %w", name, err)
	}
	tmp, err := os.CreateTemp(dir, "."+name+"-*")
	if err != nil {
		return nil, fmt.Errorf("installing the sandbox program %s: %w", name, err)
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.Write(bin); err == nil {
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
		return nil, fmt.Errorf("installing the sandbox program %s in %s: %w", name, dir, err)
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
