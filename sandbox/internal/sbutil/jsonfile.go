package sbutil

import (
	"encoding/json"
	"os"
	"sync"
	"syscall"
	"time"
)

// WriteJSON replaces path with v as indented JSON, through a temporary
// file and a rename, so a reader sees the old content or the new, never a
// mix.
func WriteJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// JSONFiles reads JSON files written by WriteJSON and keeps what it
// decoded: Cached answers from memory while the file is unchanged (same
// inode, size and modification time), which costs one stat instead of a
// read and a decode. Runtimes check a sandbox's state before every call,
// so this sits on the exec path. Safe for concurrent use.
type JSONFiles[T any] struct {
	// mu guards cache.
	mu    sync.Mutex
	cache map[string]jsonEntry[T]
}

type jsonEntry[T any] struct {
	ino  uint64
	size int64
	mod  time.Time
	v    T
}

// Read decodes path from disk (for a read-modify-write, always fresh).
// Errors are the os and json errors, os.ErrNotExist included.
func (f *JSONFiles[T]) Read(path string) (T, error) {
	var v T
	fi, err := os.Stat(path)
	if err != nil {
		return v, err
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return v, err
	}
	if err := json.Unmarshal(data, &v); err != nil {
		return v, err
	}
	f.mu.Lock()
	if f.cache == nil {
		f.cache = map[string]jsonEntry[T]{}
	}
	f.cache[path] = jsonEntry[T]{ino: inode(fi), size: fi.Size(), mod: fi.ModTime(), v: v}
	f.mu.Unlock()
	return v, nil
}

// Cached returns the last decoded value if the file has not changed
// since, else reads it again. The value is shared: callers must not
// modify what it points to.
func (f *JSONFiles[T]) Cached(path string) (T, error) {
	fi, err := os.Stat(path)
	if err != nil {
		var zero T
		return zero, err
	}
	f.mu.Lock()
	e, ok := f.cache[path]
	f.mu.Unlock()
	if ok && e.ino == inode(fi) && e.size == fi.Size() && e.mod.Equal(fi.ModTime()) {
		return e.v, nil
	}
	return f.Read(path)
}

func inode(fi os.FileInfo) uint64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return st.Ino
	}
	return 0
}
