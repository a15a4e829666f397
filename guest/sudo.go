package guest

import (
	"encoding/base64"
	"errors"
	"net/http"
	"os"

	"github.com/cove-sandbox/cove/guest/internal/sudo"
	"github.com/cove-sandbox/cove/guest/internal/wire"
)

// Sudo. A sandbox's processes run with no_new_privs, so a setuid sudo
// cannot work in it; the daemon serves sudo instead (package
// guest/internal/sudo): the runtime binds the daemon's executable over
// /usr/bin/sudo, and run by that name it is sudo's client (SudoMain).
// Which users may use it is the proxy's to say, in SudoHeader: the E2B
// API's proxy names "user" for the sandboxes it made, as E2B's base
// template gives its user sudo; Cove's own API names none.

// SudoSocketPath is where a sandbox's daemon serves sudo.
const SudoSocketPath = sudo.SocketPath

// SudoMain is the sandbox's sudo program: args are its arguments without
// the program's name; it returns the exit code.
func SudoMain(args []string) int {
	return sudo.Main(args, os.Stdout, os.Stderr)
}

// newSudo is the daemon's sudo server, nil without Config.SudoSocket.
func (s *Server) newSudo() *sudo.Server {
	if s.cfg.SudoSocket == "" || s.cfg.Root != "/" {
		return nil
	}
	return sudo.NewServer(sudo.Config{
		Path:   s.cfg.SudoSocket,
		Spawn:  s.procs.Spawn,
		Lookup: s.sudoTarget,
		Logger: s.log,
	})
}

// sudoTarget looks a user up in the sandbox's /etc/passwd.
func (s *Server) sudoTarget(name string) (*sudo.Target, error) {
	h := http.Header{"Authorization": {"Basic " + base64.StdEncoding.EncodeToString([]byte(name+":"))}}
	u, err := s.fs.RequestUser(h)
	if err != nil {
		return nil, err
	}
	if u == nil {
		return nil, errors.New("no user named")
	}
	return &sudo.Target{Name: u.Name, UID: uint32(u.UID), GID: uint32(u.GID), Groups: u.Groups, Home: u.Home}, nil
}

// withSudo gives sudo to the user a request with the access token names
// in SudoHeader.
func (s *Server) withSudo(h http.Handler) http.Handler {
	if s.sudo == nil {
		return h
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if name := r.Header.Get(wire.SudoHeader); name != "" && s.tokenOK(r.Header) {
			if err := s.sudo.Allow(name); err != nil {
				s.log.Warn("giving a user sudo", "user", name, "err", err)
			}
		}
		h.ServeHTTP(w, r)
	})
}
