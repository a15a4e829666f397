// Package sbutil holds the small helpers the sandbox runtimes share:
// sandbox ids, process liveness and log excerpts. Runtimes do not import
// each other; they share this instead.
package sbutil

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"os"
	"sort"
	"strings"
	"syscall"

	"github.com/cove-sandbox/cove/sandbox"
)

// NewID returns a fresh sandbox id ("sb-" and 12 hex digits).
func NewID() string {
	var b [6]byte
	rand.Read(b[:])
	return "sb-" + hex.EncodeToString(b[:])
}

// NewToken returns a random access token for a sandbox's daemon.
func NewToken() string {
	var b [16]byte
	rand.Read(b[:])
	return hex.EncodeToString(b[:])
}

// ValidID reports whether id can name a sandbox directory: 1 to 64 of
// [a-z0-9-], not starting with a dot (so it is never a path trick).
func ValidID(id string) bool {
	if id == "" || len(id) > 64 {
		return false
	}
	for _, c := range id {
		if !(c >= 'a' && c <= 'z' || c >= '0' && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// Alive reports whether pid runs and is not a zombie.
func Alive(pid int) bool {
	if pid <= 0 || syscall.Kill(pid, 0) != nil {
		return false
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	s := string(data)
	if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) {
		return s[i+2] != 'Z'
	}
	return true
}

// LastLines returns the last n lines of s joined with " | ", for errors
// that quote a log.
func LastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, " | ")
}

// ListSandboxes reads every sandbox directory under dir (names that pass
// ValidID) through info, which reports false to leave one out, and
// returns them in creation order.
func ListSandboxes(dir string, info func(id string) (sandbox.Info, bool)) ([]sandbox.Info, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, fmt.Errorf("listing sandboxes: %w", err)
	}
	var out []sandbox.Info
	for _, e := range entries {
		if !e.IsDir() || !ValidID(e.Name()) {
			continue
		}
		if in, ok := info(e.Name()); ok {
			out = append(out, in)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].CreatedAt.Before(out[j].CreatedAt) })
	return out, nil
}
