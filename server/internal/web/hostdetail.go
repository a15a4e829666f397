package web

import (
	"net/http"
	"regexp"
	"strings"
	"sync"

	"github.com/cove-sandbox/cove/api"
)

// No error a tenant sees carries a host path, a device name or a host
// log line (ARCHITECTURE.md, walls). Errors from the runtime and the
// daemon's client are written for the operator: a sandbox that fails to
// start says so with the last lines of its host log, a lost daemon names
// its socket, a cgroup write names its file. Such failures reach the
// tenant as what failed and a request id; the detail goes to the log.

// hostMarkers are strings only the host's own paths and log lines hold.
var hostMarkers = []string{
	"/sys/fs/cgroup", "/dev/loop", "/proc/self/", "/var/lib/cove", "/run/cove",
	"guest.sock", "sandbox.log", "cove-git-",
	// slog's text lines, as a sandbox's host log has them.
	"level=DEBUG", "level=INFO", "level=WARN", "level=ERROR",
}

// sandboxDir matches a path into a local sandbox's state directory on
// the host (DIR/sb-ID/disk, .../state.json, ...), wherever the operator
// put the runtime's directory.
var sandboxDir = sync.OnceValue(func() *regexp.Regexp {
	return regexp.MustCompile(`/sb-[0-9a-f]{12}/(disk|rootfs|state\.json|init\.json|lock)\b`)
})

// HostDetail reports whether msg holds something of the host's.
func (e *Errors) HostDetail(msg string) bool {
	if containsPath(msg, e.DataDir) || sandboxDir().MatchString(msg) {
		return true
	}
	for _, m := range hostMarkers {
		if strings.Contains(msg, m) {
			return true
		}
	}
	return false
}

// publicMessage is what a tenant is told of a failure whose detail stays
// in the log, by its status.
func publicMessage(status int, code string) string {
	switch {
	case status == http.StatusServiceUnavailable:
		return "the sandbox could not be started or reached right now; retry, and if it goes on, stop and resume it"
	case code == api.CodeInvalid:
		return "the request could not be carried out with these values on this server"
	}
	return "the request failed on the server's side"
}

// TenantText is text for a tenant (a run's error): itself, or when it
// holds host detail, a generic line with a reference the log keeps.
func (e *Errors) TenantText(text string) string {
	if !e.HostDetail(text) {
		return text
	}
	ref := NewID("ref_")
	e.Log.Warn("a failure's detail kept from the tenant", "ref", ref, "err", text)
	return "the run failed on the server's side; quote reference " + ref + " to the operator"
}

// containsPath reports whether msg names dir or a path below it: dir
// where it starts a path, not inside a longer one (a DataDir of /data
// is not in /workspace/data).
func containsPath(msg, dir string) bool {
	dir = strings.TrimRight(dir, "/")
	if dir == "" {
		return false
	}
	for i := 0; ; {
		j := strings.Index(msg[i:], dir)
		if j < 0 {
			return false
		}
		at, end := i+j, i+j+len(dir)
		before := at == 0 || !isPathByte(msg[at-1])
		after := end == len(msg) || msg[end] == '/' || !isPathByte(msg[end])
		if before && after {
			return true
		}
		i = at + 1
	}
}

func isPathByte(c byte) bool {
	return c == '/' || c == '.' || c == '_' || c == '-' || c >= '0' && c <= '9' || c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z'
}
