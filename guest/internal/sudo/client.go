package sudo

import (
	"bufio"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"golang.org/x/sys/unix"
)

// options are sudo's command line, as far as a sandbox needs it.
type options struct {
	user        string
	preserveEnv bool
	login       bool // -i
	shell       bool // -s
	dir         string
	list        bool
	noop        bool // -v, -k or -K without a command
	help        bool
	version     bool
	args        []string
}

// withArg are the short options that take a value.
const withArg = "CDghpRrTtUu"

// parseArgs reads sudo's options (sudo(8)); the first argument that is
// not one, or what follows "--", starts the command.
func parseArgs(args []string) (*options, error) {
	o := &options{}
	for len(args) > 0 {
		a := args[0]
		if a == "--" {
			args = args[1:]
			break
		}
		if !strings.HasPrefix(a, "-") || a == "-" {
			break
		}
		args = args[1:]
		if strings.HasPrefix(a, "--") {
			name, val, hasVal := strings.Cut(a[2:], "=")
			needs := map[string]byte{"user": 'u', "chdir": 'D', "group": 'g', "prompt": 'p', "close-from": 'C', "host": 'h', "other-user": 'U', "command-timeout": 'T', "role": 'r', "type": 't', "chroot": 'R'}
			if c, ok := needs[name]; ok {
				if !hasVal {
					if len(args) == 0 {
						return nil, fmt.Errorf("option '--%s' requires an argument", name)
					}
					val, args = args[0], args[1:]
				}
				if err := o.set(c, val); err != nil {
					return nil, err
				}
				continue
			}
			longs := map[string]byte{"preserve-env": 'E', "login": 'i', "shell": 's', "non-interactive": 'n', "set-home": 'H',
				"stdin": 'S', "help": 'h', "version": 'V', "askpass": 'A', "list": 'l', "validate": 'v', "reset-timestamp": 'k',
				"remove-timestamp": 'K', "preserve-groups": 'P', "background": 'b', "edit": 'e'}
			c, ok := longs[name]
			if !ok {
				return nil, fmt.Errorf("unrecognized option '--%s'", name)
			}
			if err := o.flag(c); err != nil {
				return nil, err
			}
			continue
		}
		for i := 1; i < len(a); i++ {
			c := a[i]
			if c == 'h' && len(a) == 2 && (len(args) == 0 || strings.HasPrefix(args[0], "-")) {
				o.help = true // -h alone is help; -h HOST names a host
				continue
			}
			if strings.IndexByte(withArg, c) >= 0 {
				val := a[i+1:]
				if val == "" {
					if len(args) == 0 {
						return nil, fmt.Errorf("option requires an argument -- '%c'", c)
					}
					val, args = args[0], args[1:]
				}
				if err := o.set(c, val); err != nil {
					return nil, err
				}
				break
			}
			if err := o.flag(c); err != nil {
				return nil, err
			}
		}
	}
	o.args = args
	return o, nil
}

// set applies an option with a value.
func (o *options) set(c byte, val string) error {
	switch c {
	case 'u':
		o.user = val
	case 'D':
		o.dir = val
	case 'g':
		return errors.New("-g (run with another group) is not supported in this sandbox; use -u")
	case 'R':
		return errors.New("-R (chroot) is not supported in this sandbox")
	}
	return nil // -C, -h HOST, -p, -r, -t, -T, -U: nothing to do here
}

// flag applies an option without a value.
func (o *options) flag(c byte) error {
	switch c {
	case 'E':
		o.preserveEnv = true
	case 'i':
		o.login = true
	case 's':
		o.shell = true
	case 'l':
		o.list = true
	case 'v', 'k', 'K':
		o.noop = true
	case 'V':
		o.version = true
	case 'h':
		o.help = true
	case 'b':
		return errors.New("-b (background) is not supported in this sandbox; end the command with & instead")
	case 'e':
		return errors.New("-e (sudoedit) is not supported in this sandbox; run the editor with sudo")
	case 'n', 'H', 'S', 'A', 'P', 'B', 'N':
		// No password is ever asked; HOME is the target's already.
	default:
		return fmt.Errorf("invalid option -- '%c'", c)
	}
	return nil
}

const usage = `usage: sudo [-EHiknsSv] [-u user] [-D directory] [--] command [arg ...]
       sudo -i | -s [command]
       sudo -l | -v | -k | -V | -h
The sandbox's daemon runs the command as root (or -u's user), with no password.
`

// Main is the sudo program of a sandbox (the daemon's executable run by
// the name sudo): args are its arguments, without the program's name. It
// returns the exit code: the command's, or 1 when sudo itself fails.
func Main(args []string, stdout, stderr io.Writer) int {
	o, err := parseArgs(args)
	if err != nil {
		fmt.Fprintf(stderr, "sudo: %v\n%s", err, usage)
		return 1
	}
	switch {
	case o.help:
		fmt.Fprint(stdout, usage)
		return 0
	case o.version:
		fmt.Fprintln(stdout, "Sudo version 1.9 (Cove: the sandbox daemon's sudo, no setuid)")
		return 0
	case o.list:
		fmt.Fprintf(stdout, "User %s may run the following commands in this sandbox:\n    (ALL : ALL) NOPASSWD: ALL\n", currentName())
		return 0
	case o.noop && len(o.args) == 0:
		return 0
	}
	req, err := o.request()
	if err != nil {
		fmt.Fprintf(stderr, "sudo: %v\n", err)
		return 1
	}
	code, err := run(SocketPath, req, [3]int{0, 1, 2})
	if err != nil {
		fmt.Fprintf(stderr, "sudo: %v\n", err)
		return 1
	}
	return code
}

// request turns the options into the daemon's request.
func (o *options) request() (*Request, error) {
	target := o.user
	if strings.HasPrefix(target, "#") {
		name, ok := passwdName(target[1:])
		if !ok {
			return nil, fmt.Errorf("unknown user %s", target)
		}
		target = name
	}
	dir, err := os.Getwd()
	if err != nil {
		dir = "/"
	}
	args := o.args
	if o.login || o.shell {
		sh := os.Getenv("SHELL")
		if o.login || sh == "" {
			sh = passwdShell(target)
		}
		if o.login {
			dir = passwdHome(target)
			args = []string{sh, "-l"}
		} else {
			args = []string{sh}
		}
		if len(o.args) > 0 {
			args = append(args, "-c", shellJoin(o.args))
		}
	}
	if len(args) == 0 {
		return nil, errors.New("no command given\n" + usage)
	}
	if o.dir != "" {
		dir = o.dir
	}
	return &Request{Args: args, Env: os.Environ(), Dir: dir, User: target, PreserveEnv: o.preserveEnv}, nil
}

// shellJoin joins args for a shell's -c as sudo does: every character but
// letters, digits, '_', '-' and '$' escaped with a backslash.
func shellJoin(args []string) string {
	var b strings.Builder
	for i, a := range args {
		if i > 0 {
			b.WriteByte(' ')
		}
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '_' || r == '-' || r == '$') {
				b.WriteByte('\\')
			}
			b.WriteRune(r)
		}
	}
	return b.String()
}

// run hands the request and stdio (this process's 0, 1 and 2) to the
// daemon at sock and relays signals until the command ends.
func run(sock string, req *Request, stdio [3]int) (int, error) {
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		if errors.Is(err, unix.ENOENT) || errors.Is(err, unix.ECONNREFUSED) {
			return 0, errors.New("not available in this sandbox: Cove gives sudo to the user of sandboxes made through the E2B API; elsewhere run the command as root through the API")
		}
		return 0, err
	}
	defer c.Close()
	if err := send(c, req, stdio); err != nil {
		// The daemon may have refused the caller before reading.
		var m message
		if json.NewDecoder(c).Decode(&m) == nil && m.Error != "" {
			return 0, errors.New(m.Error)
		}
		return 0, err
	}
	sigs := make(chan os.Signal, 16)
	signal.Notify(sigs, unix.SIGINT, unix.SIGTERM, unix.SIGHUP, unix.SIGQUIT, unix.SIGUSR1, unix.SIGUSR2, unix.SIGWINCH)
	defer signal.Stop(sigs)
	go func() {
		for s := range sigs {
			if n, ok := s.(syscall.Signal); ok {
				writeMessage(c, message{Signal: int(n)})
			}
		}
	}()
	sc := bufio.NewScanner(c)
	for sc.Scan() {
		var m message
		if err := json.Unmarshal(sc.Bytes(), &m); err != nil {
			return 0, fmt.Errorf("the sandbox's daemon answered %q", sc.Text())
		}
		switch {
		case m.Error != "":
			return 0, errors.New(m.Error)
		case m.Exit != nil:
			return *m.Exit, nil
		}
	}
	return 0, errors.New("the sandbox's daemon went away before the command ended")
}

// send sends stdio and the request.
func send(c *net.UnixConn, req *Request, stdio [3]int) error {
	if _, _, err := c.WriteMsgUnix([]byte{0}, unix.UnixRights(stdio[:]...), nil); err != nil {
		return fmt.Errorf("reaching the sandbox's daemon: %w", err)
	}
	data, err := json.Marshal(req)
	if err != nil {
		return err
	}
	if len(data) > maxRequest {
		return fmt.Errorf("the command and its environment are over %d bytes", maxRequest)
	}
	if err := binary.Write(c, binary.BigEndian, uint32(len(data))); err != nil {
		return fmt.Errorf("reaching the sandbox's daemon: %w", err)
	}
	if _, err := c.Write(data); err != nil {
		return fmt.Errorf("reaching the sandbox's daemon: %w", err)
	}
	return nil
}

// passwdEntry is the /etc/passwd entry of the user name (or of uid, for
// a name of digits); nil when none.
func passwdEntry(name string) []string {
	if name == "" {
		name = "root"
	}
	data, err := os.ReadFile("/etc/passwd")
	if err != nil {
		return nil
	}
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Split(line, ":")
		if len(f) >= 7 && (f[0] == name || f[2] == name) {
			return f
		}
	}
	return nil
}

func passwdName(uid string) (string, bool) {
	if f := passwdEntry(uid); f != nil {
		return f[0], true
	}
	return "", false
}

func passwdShell(name string) string {
	if f := passwdEntry(name); f != nil && f[6] != "" {
		return f[6]
	}
	return "/bin/sh"
}

func passwdHome(name string) string {
	if f := passwdEntry(name); f != nil && f[5] != "" {
		return f[5]
	}
	return "/"
}

// currentName is the name of the user running sudo.
func currentName() string {
	if f := passwdEntry(fmt.Sprint(os.Getuid())); f != nil {
		return f[0]
	}
	return fmt.Sprint(os.Getuid())
}
