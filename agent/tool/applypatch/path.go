package applypatch

import (
	"fmt"
	"path"
	"strings"
)

// Path limits, as Linux's PATH_MAX and NAME_MAX.
const (
	maxPathLen = 4096
	maxNameLen = 255
)

// CleanPath checks a path from a patch and returns it in the form the FS is
// given: slash-separated, clean, relative to the workspace root. It refuses
// an empty path, an absolute one ("/etc/passwd", "C:\x"), one with a ".."
// element anywhere (even "a/../b", which stays inside: a patch has no need
// of it and refusing it keeps the rule simple to state), a NUL or other
// control character, and one over Linux's length limits. Backslashes are
// taken for slashes, as the Agents SDK does, since a model on a Windows
// habit means directories by them. The error says what was wrong; Apply
// wraps it in an *Error.
//
// It is lexical: the FS must still refuse a symlink that leads out of the
// workspace.
func CleanPath(p string) (string, error) {
	if strings.TrimSpace(p) == "" {
		return "", fmt.Errorf("the path is empty")
	}
	for _, r := range p {
		if r < 0x20 || r == 0x7f {
			return "", fmt.Errorf("path %q contains a control character", clip(p))
		}
	}
	s := strings.ReplaceAll(p, `\`, "/")
	if strings.HasPrefix(s, "/") || (len(s) >= 2 && isLetter(s[0]) && s[1] == ':' && (len(s) == 2 || s[2] == '/')) {
		return "", fmt.Errorf("path %q is absolute; use a path relative to the workspace root", clip(p))
	}
	for _, name := range strings.Split(s, "/") {
		if name == ".." {
			return "", fmt.Errorf("path %q contains \"..\"; use a path relative to the workspace root that stays inside it", clip(p))
		}
		if len(name) > maxNameLen {
			return "", fmt.Errorf("path %q has a name over %d bytes", clip(p), maxNameLen)
		}
	}
	s = path.Clean(s)
	if s == "." {
		return "", fmt.Errorf("path %q names the workspace root, not a file", clip(p))
	}
	if len(s) > maxPathLen {
		return "", fmt.Errorf("path of %d bytes is over the %d-byte limit", len(s), maxPathLen)
	}
	return s, nil
}

func isLetter(c byte) bool { return c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' }
