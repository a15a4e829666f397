package procs

import (
	"fmt"

	"github.com/cove-sandbox/cove/guest/internal/fsys"
	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// A daemon that is not root (a Kubernetes pod with runAsNonRoot, a
// container started with --user) cannot start a process as another user:
// setuid needs CAP_SETUID, which such a sandbox never has. A request
// that names another user is refused (ErrInvalid, a 400) saying so,
// rather than run as the daemon's own user while the caller believes it
// runs as the one named (root, say, for a package install). The
// sandbox's default user (Config.User of the daemon), when it is not the
// daemon's own, is not a request's: a request that names no user runs as
// the daemon's user, with that user's HOME and USER.

// runAs is the user a start request whose header is h runs as, for a
// daemon running as euid: the user the request names or the default
// (fsys.Service.RequestUser), checked against what euid can start.
func (m *Manager) runAs(h interface{ Get(string) string }, euid int) (*fsys.User, error) {
	u, err := m.cfg.FS.RequestUser(h)
	if err != nil || u == nil || euid == 0 || u.UID == euid {
		return u, err
	}
	named, err := wire.RequestUserName(h)
	if err != nil {
		return nil, err
	}
	if named == "" {
		return m.cfg.FS.UserByID(euid), nil
	}
	self := fmt.Sprintf("uid %d", euid)
	if own := m.cfg.FS.UserByID(euid); own != nil {
		self = fmt.Sprintf("user %q (uid %d)", own.Name, euid)
	}
	return nil, fmt.Errorf("this sandbox's processes run as %s, not root (a non-root container), so none can start as user %q (uid %d); "+
		"name no user, or that one: %w", self, u.Name, u.UID, sandbox.ErrInvalid)
}
