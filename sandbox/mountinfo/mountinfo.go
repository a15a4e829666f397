// Package mountinfo reads the kernel's mount table (/proc/PID/mountinfo):
// what the local runtime and the template store look at before removing
// a directory, so that nothing is deleted through a mount still on it,
// and where the cgroup package finds the v1 hierarchies.
package mountinfo

import (
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Mount is one line of a mountinfo file.
type Mount struct {
	// Point is where it is mounted, unescaped.
	Point string
	// FSType is the filesystem's type ("overlay", "ext4", ...).
	FSType string
	// Super holds the filesystem's own options (for an overlay:
	// lowerdir=...,upperdir=...,workdir=...), each value unescaped.
	Super map[string]string
}

// Read parses a mountinfo file: "/proc/self/mountinfo" for the calling
// process's mount namespace, "/proc/thread-self/mountinfo" for the
// calling thread's (which may have one of its own).
func Read(file string) ([]Mount, error) {
	b, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("reading the mount table: %w", err)
	}
	var out []Mount
	for _, line := range strings.Split(string(b), "\n") {
		// ID PARENT MAJ:MIN ROOT MOUNTPOINT OPTS [OPTIONAL...] - FSTYPE SOURCE SUPEROPTS
		pre, post, ok := strings.Cut(line, " - ")
		if !ok {
			continue
		}
		f, g := strings.Fields(pre), strings.Fields(post)
		if len(f) < 5 || len(g) < 1 {
			continue
		}
		m := Mount{Point: Unescape(f[4]), FSType: g[0], Super: map[string]string{}}
		if len(g) >= 3 {
			for _, opt := range strings.Split(g[2], ",") {
				k, v, _ := strings.Cut(opt, "=")
				m.Super[k] = Unescape(v)
			}
		}
		out = append(out, m)
	}
	return out, nil
}

// Under lists the mount points of the calling process's namespace at or
// below dir (a clean absolute path), in mount order.
func Under(dir string) ([]string, error) {
	mounts, err := Read("/proc/self/mountinfo")
	if err != nil {
		return nil, err
	}
	var out []string
	for _, m := range mounts {
		if Within(dir, m.Point) {
			out = append(out, m.Point)
		}
	}
	return out, nil
}

// Within reports whether p is dir or below it (both clean and absolute).
func Within(dir, p string) bool {
	return p == dir || strings.HasPrefix(p, dir+"/")
}

// Unescape undoes mountinfo's octal escapes (\040 for a space).
func Unescape(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+4 <= len(s) {
			if n, err := strconv.ParseUint(s[i+1:i+4], 8, 8); err == nil {
				b.WriteByte(byte(n))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
