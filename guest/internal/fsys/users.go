package fsys

import (
	"fmt"

	"github.com/cove-sandbox/cove/guest/internal/wire"
	"github.com/cove-sandbox/cove/sandbox"
)

// User is a user of the sandbox's /etc/passwd.
type User struct {
	Name     string
	UID, GID int
	Home     string
	Groups   []uint32
	// Shell is the login shell /etc/passwd names ("" when it names none).
	Shell string
}

// UserByID is the sandbox's /etc/passwd entry of uid, or nil when it
// lists none.
func (s *Service) UserByID(uid int) *User {
	f := s.names.load(s, "/etc/passwd")
	if name, ok := f.byID[uint32(uid)]; ok {
		return f.users[name]
	}
	return nil
}

// Exists reports whether the sandbox path p (absolute; links followed,
// inside the sandbox only) is a directory when dir is set, else a
// regular file.
func (s *Service) Exists(p string, dir bool) bool {
	n, err := s.lookupIn("", p, lookupOpts{follow: true})
	if err != nil {
		return false
	}
	defer n.close()
	if dir {
		return n.isDir()
	}
	return n.isRegular()
}

// RequestUser picks the user a request acts as: the one it names (see
// wire.RequestUserName), else the service's default; nil when neither is
// set. A name the sandbox's /etc/passwd does not know is ErrPermission.
func (s *Service) RequestUser(h interface{ Get(string) string }) (*User, error) {
	name, err := wire.RequestUserName(h)
	if err != nil {
		return nil, err
	}
	if name == "" {
		name = s.cfg.User
	}
	if name == "" {
		return nil, nil
	}
	u, ok := s.names.user(s, name)
	if !ok {
		return nil, fmt.Errorf("user %q does not exist in the sandbox; name a user from its /etc/passwd: %w", name, sandbox.ErrPermission)
	}
	return u, nil
}
