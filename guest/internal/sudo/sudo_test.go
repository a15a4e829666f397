package sudo

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestParseArgs(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want options
		err  string
	}{
		{[]string{"whoami"}, options{args: []string{"whoami"}}, ""},
		{[]string{"-n", "true"}, options{args: []string{"true"}}, ""},
		{[]string{"-nE", "env"}, options{preserveEnv: true, args: []string{"env"}}, ""},
		{[]string{"-u", "user", "id"}, options{user: "user", args: []string{"id"}}, ""},
		{[]string{"-uuser", "id"}, options{user: "user", args: []string{"id"}}, ""},
		{[]string{"--user=user", "id"}, options{user: "user", args: []string{"id"}}, ""},
		{[]string{"--user", "user", "--", "-x"}, options{user: "user", args: []string{"-x"}}, ""},
		{[]string{"-i"}, options{login: true, args: []string{}}, ""},
		{[]string{"-s", "echo", "a b"}, options{shell: true, args: []string{"echo", "a b"}}, ""},
		{[]string{"-D", "/tmp", "pwd"}, options{dir: "/tmp", args: []string{"pwd"}}, ""},
		{[]string{"-h"}, options{help: true, args: []string{}}, ""},
		{[]string{"-k"}, options{noop: true, args: []string{}}, ""},
		{[]string{"apt-get", "-y", "install"}, options{args: []string{"apt-get", "-y", "install"}}, ""},
		{[]string{"-g", "staff", "id"}, options{}, "-g"},
		{[]string{"-Z"}, options{}, "invalid option"},
		{[]string{"--frobnicate"}, options{}, "unrecognized"},
		{[]string{"-u"}, options{}, "requires an argument"},
	} {
		got, err := parseArgs(tc.args)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("parseArgs(%q): %v, want an error naming %s", tc.args, err, tc.err)
			}
			continue
		}
		if err != nil || !reflect.DeepEqual(*got, tc.want) {
			t.Errorf("parseArgs(%q) = %+v, %v; want %+v", tc.args, got, err, tc.want)
		}
	}
}

func TestShellJoin(t *testing.T) {
	got := shellJoin([]string{"echo", "a b", "$HOME", "x;y"})
	if want := `echo a\ b $HOME x\;y`; got != want {
		t.Errorf("shellJoin = %q, want %q", got, want)
	}
}

// startServer serves sudo on a socket in a temporary directory, with
// root as the only user, and returns the socket's path.
func startServer(t *testing.T) string {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root: the server runs commands as root")
	}
	dir, err := os.MkdirTemp("", "sudo")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	sock := filepath.Join(dir, "s", "sudo.sock")
	s := NewServer(Config{
		Path: sock,
		Spawn: func(cmd *exec.Cmd) (int, func() (syscall.WaitStatus, error), error) {
			if err := cmd.Start(); err != nil {
				return 0, nil, err
			}
			return cmd.Process.Pid, func() (syscall.WaitStatus, error) {
				err := cmd.Wait()
				return cmd.ProcessState.Sys().(syscall.WaitStatus), ignoreExit(err)
			}, nil
		},
		Lookup: func(name string) (*Target, error) {
			if name != "root" {
				return nil, errors.New("no such user")
			}
			return &Target{Name: "root", Home: "/root"}, nil
		},
	})
	if err := s.Allow("root"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	if fi, err := os.Stat(sock); err != nil || fi.Mode().Perm() != 0o666 {
		t.Fatalf("socket %v, %v: want mode 0666", fi, err)
	}
	return sock
}

func ignoreExit(err error) error {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return nil
	}
	return err
}

// runPiped runs req through the server at sock with stdin and captured
// stdout and stderr.
func runPiped(t *testing.T, sock string, req *Request, stdin string) (code int, stdout, stderr string, err error) {
	t.Helper()
	in, inW, _ := os.Pipe()
	outR, out, _ := os.Pipe()
	errR, errW, _ := os.Pipe()
	inW.WriteString(stdin)
	inW.Close()
	code, err = run(sock, req, [3]int{int(in.Fd()), int(out.Fd()), int(errW.Fd())})
	in.Close()
	out.Close()
	errW.Close()
	o, _ := readAll(outR)
	e, _ := readAll(errR)
	return code, o, e, err
}

func readAll(f *os.File) (string, error) {
	defer f.Close()
	b, err := os.ReadFile("/proc/self/fd/" + strconv.Itoa(int(f.Fd())))
	return string(b), err
}

func TestServerRuns(t *testing.T) {
	sock := startServer(t)
	env := []string{"PATH=/nowhere", "TERM=xterm", "SECRET=1", "LC_ALL=C"}
	req := func(args ...string) *Request { return &Request{Args: args, Env: env, Dir: "/tmp"} }

	code, out, _, err := runPiped(t, sock, req("sh", "-c", "id -u; pwd; cat; exit 3"), "from stdin\n")
	if err != nil || code != 3 || out != "0\n/tmp\nfrom stdin\n" {
		t.Errorf("run: code %d, out %q, %v", code, out, err)
	}
	// env_reset: a secure PATH, the kept variables, sudo's own.
	_, out, _, _ = runPiped(t, sock, req("env"), "")
	for _, want := range []string{"PATH=" + securePath, "TERM=xterm", "LC_ALL=C", "HOME=/root", "SUDO_USER=root", "SUDO_COMMAND=env"} {
		if !strings.Contains(out, want+"\n") {
			t.Errorf("env lacks %s:\n%s", want, out)
		}
	}
	if strings.Contains(out, "SECRET") {
		t.Errorf("env kept SECRET without -E:\n%s", out)
	}
	r := req("env")
	r.Env = append(env, "PATH=/usr/bin:/bin")
	r.PreserveEnv = true
	if _, out, _, _ = runPiped(t, sock, r, ""); !strings.Contains(out, "SECRET=1\n") {
		t.Errorf("env lost SECRET with -E:\n%s", out)
	}
	// Errors are the client's.
	if _, _, _, err := runPiped(t, sock, req("no-such-command-xyz"), ""); err == nil || !strings.Contains(err.Error(), "command not found") {
		t.Errorf("a missing command: %v", err)
	}
	r = req("true")
	r.User = "nobody"
	if _, _, _, err := runPiped(t, sock, r, ""); err == nil || !strings.Contains(err.Error(), "unknown user") {
		t.Errorf("an unknown user: %v", err)
	}
	if _, _, _, err := runPiped(t, sock, &Request{Args: []string{"true"}, Dir: "relative"}, ""); err == nil {
		t.Error("a relative working directory was taken")
	}
}

// TestServerKillsOnDisconnect: a client that goes away (killed with its
// process group by a command's timeout) takes the command with it.
func TestServerKillsOnDisconnect(t *testing.T) {
	sock := startServer(t)
	pidFile := filepath.Join(t.TempDir(), "pid")
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	null, _ := os.Open(os.DevNull)
	defer null.Close()
	fd := int(null.Fd())
	if _, _, err := c.WriteMsgUnix([]byte{0}, unix.UnixRights(fd, fd, fd), nil); err != nil {
		t.Fatal(err)
	}
	data, _ := json.Marshal(Request{Args: []string{"sh", "-c", "echo $$ > " + pidFile + "; exec sleep 300"}, Dir: "/"})
	binary.Write(c, binary.BigEndian, uint32(len(data)))
	c.Write(data)
	var pid int
	for end := time.Now().Add(30 * time.Second); pid == 0 && time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
		b, _ := os.ReadFile(pidFile)
		pid, _ = strconv.Atoi(strings.TrimSpace(string(b)))
	}
	if pid == 0 {
		t.Fatal("the command did not start")
	}
	c.Close()
	for end := time.Now().Add(30 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		if unix.Kill(pid, 0) != nil {
			return
		}
		if b, _ := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); strings.Contains(string(b), ") Z ") {
			return // killed, waiting for its reaper
		}
		if time.Now().After(end) {
			t.Fatalf("the command (pid %d) outlived its client", pid)
		}
	}
}

// TestServerRefusesFewFiles: a request must carry the three descriptors.
func TestServerRefusesFewFiles(t *testing.T) {
	sock := startServer(t)
	c, err := net.DialUnix("unix", nil, &net.UnixAddr{Name: sock, Net: "unix"})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.WriteMsgUnix([]byte{0}, unix.UnixRights(0), nil)
	var m message
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if err := json.NewDecoder(c).Decode(&m); err != nil || !strings.Contains(m.Error, "stdin, stdout and stderr") {
		t.Errorf("one descriptor: %+v, %v", m, err)
	}
}

// TestAllowUnknownUser: a user the sandbox lacks gets no socket, and the
// failed lookup is not repeated on every request.
func TestAllowUnknownUser(t *testing.T) {
	sock := filepath.Join(t.TempDir(), "sudo.sock")
	lookups := 0
	s := NewServer(Config{Path: sock, Lookup: func(string) (*Target, error) {
		lookups++
		return nil, errors.New("no such user")
	}})
	defer s.Close()
	if err := s.Allow("user"); err == nil {
		t.Error("an unknown user was allowed")
	}
	if err := s.Allow("user"); err != nil || lookups != 1 {
		t.Errorf("the second Allow: %v after %d lookups, want it remembered", err, lookups)
	}
	if _, err := os.Stat(sock); err == nil {
		t.Error("the socket exists though nobody has sudo")
	}
}
