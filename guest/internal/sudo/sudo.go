// Package sudo gives a sandbox's user sudo without setuid: E2B's base
// template lets its user run anything as root with `sudo` and no
// password, and code written for E2B relies on it (`sudo apt-get install
// ...`). A sandbox's processes run with no_new_privs (see
// sandbox/local/harden), so a setuid-root sudo cannot work there, and
// must not: lifting no_new_privs would hand every setuid program of a
// template its privileges. Instead the daemon, which already starts
// commands as root for its API's callers, starts them for `sudo` too.
//
// The `sudo` program in the sandbox is the daemon's own executable (the
// runtime binds it over /usr/bin/sudo; it acts as the client when its
// name is sudo, see Main). It connects to the daemon's socket
// (SocketPath), hands over its stdin, stdout and stderr with SCM_RIGHTS
// and sends a Request; the daemon checks the caller's uid (SO_PEERCRED)
// against the users the sandbox gives sudo to, starts the command as the
// target user in the caller's working directory with the caller's
// descriptors, forwards the signals the client relays, and answers with
// the command's end. A client that goes away (killed with its process
// group, as a command's timeout does) takes the command's process group
// with it.
//
// What the command gets is what a command started as root through the
// API gets: root inside the sandbox, with the daemon's bounded
// capabilities, no_new_privs, seccomp and Landlock. Nothing more.
package sudo

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
)

// SocketPath is where a sandbox's daemon listens for sudo's requests.
const SocketPath = "/run/cove/sudo.sock"

// maxRequest bounds a request (arguments and environment), as the
// kernel's ARG_MAX does an execve.
const maxRequest = 4 << 20

// Request is what the client asks for. Its descriptors travel beside it.
type Request struct {
	// Args is the command; Args[0] is looked up on the target's PATH.
	Args []string `json:"args"`
	// Env is the client's environment, as NAME=value.
	Env []string `json:"env"`
	// Dir is the client's working directory.
	Dir string `json:"dir"`
	// User is the user to run as; "" is root.
	User string `json:"user,omitempty"`
	// PreserveEnv keeps Env (sudo -E); otherwise the command gets a
	// fresh environment for the target user, as sudo's env_reset.
	PreserveEnv bool `json:"preserveEnv,omitempty"`
}

// message is one line from the daemon to the client or back: an error,
// the command's start, its end, or a signal to forward.
type message struct {
	Error   string `json:"error,omitempty"`
	Started bool   `json:"started,omitempty"`
	Exit    *int   `json:"exit,omitempty"`
	Signal  int    `json:"signal,omitempty"`
}

// writeMessage writes m as one JSON line.
func writeMessage(w io.Writer, m message) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	_, err = w.Write(append(b, '\n'))
	return err
}

// securePath is the PATH a command gets without -E, Debian's sudoers'
// secure_path.
const securePath = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

// keptVars are the variables that pass the environment's reset, as in
// sudo's default env_keep.
var keptVars = []string{"TERM", "COLORTERM", "DISPLAY", "LANG", "LANGUAGE", "TZ", "LS_COLORS", "XAUTHORITY"}

// commandEnv is the command's environment for req, run as target (name,
// home) by the user callerName (uid, gid).
func commandEnv(req *Request, name, home, callerName string, uid, gid uint32) []string {
	env := map[string]string{}
	if req.PreserveEnv {
		for _, kv := range req.Env {
			if k, v, ok := strings.Cut(kv, "="); ok && k != "" {
				env[k] = v
			}
		}
	} else {
		for _, kv := range req.Env {
			k, v, ok := strings.Cut(kv, "=")
			if ok && (strings.HasPrefix(k, "LC_") || contains(keptVars, k)) {
				env[k] = v
			}
		}
		env["PATH"] = securePath
		env["HOME"] = home
		env["SHELL"] = "/bin/sh"
	}
	env["USER"], env["LOGNAME"] = name, name
	env["SUDO_USER"] = callerName
	env["SUDO_UID"], env["SUDO_GID"] = fmt.Sprint(uid), fmt.Sprint(gid)
	env["SUDO_COMMAND"] = strings.Join(req.Args, " ")
	out := make([]string, 0, len(env))
	for k, v := range env {
		out = append(out, k+"="+v)
	}
	return out
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

// errNotAllowed is a caller the sandbox gives no sudo to.
var errNotAllowed = errors.New("not allowed")
