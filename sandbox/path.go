package sandbox

import (
	"fmt"
	"path"
	"strings"
)

// Path limits, as Linux's PATH_MAX and NAME_MAX.
const (
	MaxPathLen = 4096
	MaxNameLen = 255
)

// ResolvePath turns p, absolute or relative to root, into a clean absolute
// path that lies within root (root itself included). It is lexical: it does
// not look at the filesystem, so callers that touch disk must still refuse
// symlinks that lead out. It returns an error wrapping ErrInvalid, saying
// what was wrong, for a NUL byte, an over-long path or name, or a path that
// escapes root.
func ResolvePath(root, p string) (string, error) {
	if strings.IndexByte(p, 0) >= 0 {
		return "", fmt.Errorf("path %q contains a NUL byte: %w", p, ErrInvalid)
	}
	if len(p) > MaxPathLen {
		return "", fmt.Errorf("path of %d bytes is longer than the %d-byte limit: %w", len(p), MaxPathLen, ErrInvalid)
	}
	for _, name := range strings.Split(p, "/") {
		if len(name) > MaxNameLen {
			return "", fmt.Errorf("path component %.40q... is %d bytes, longer than the %d-byte limit: %w", name, len(name), MaxNameLen, ErrInvalid)
		}
	}
	root = path.Clean("/" + root)
	var abs string
	if path.IsAbs(p) {
		abs = path.Clean(p)
		// A ".." at the top of an absolute path is silently dropped by
		// Clean; refuse it instead so "/../etc" is not taken for "/etc".
		if escapesLexically(p) {
			return "", fmt.Errorf("path %q climbs above / with \"..\": %w", p, ErrInvalid)
		}
	} else {
		abs = path.Join(root, p)
		if !Within(root, abs) {
			return "", fmt.Errorf("path %q escapes %s; use a path inside it: %w", p, root, ErrInvalid)
		}
	}
	if !Within(root, abs) {
		return "", fmt.Errorf("path %q is outside %s; use a path inside it: %w", p, root, ErrInvalid)
	}
	return abs, nil
}

// Within reports whether the clean absolute path p is root or below it.
func Within(root, p string) bool {
	if root == "/" {
		return strings.HasPrefix(p, "/")
	}
	return p == root || strings.HasPrefix(p, root+"/")
}

// escapesLexically reports whether walking the absolute path p component by
// component ever climbs above "/".
func escapesLexically(p string) bool {
	depth := 0
	for _, name := range strings.Split(p, "/") {
		switch name {
		case "", ".":
		case "..":
			depth--
			if depth < 0 {
				return true
			}
		default:
			depth++
		}
	}
	return false
}
