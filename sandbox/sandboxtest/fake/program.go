package fake

import (
	"context"
	"fmt"
	"io"
	"path"

	"github.com/cove-sandbox/cove/sandbox"
)

// Program is what a scripted command does: it runs in its own goroutine
// and returns the exit code. ctx ends when a signal kills the process
// (which has then ended already: later output is dropped and reads of
// Stdin fail), so a program that blocks should return when it does.
type Program func(ctx context.Context, p *Proc) int

// Proc is what a scripted program sees of its process.
type Proc struct {
	// Args is the command line: the program as the request named it,
	// then its arguments; a shell request is "sh", "-c", the line, then
	// ExecRequest.Args.
	Args []string
	// Dir is the working directory, absolute in the sandbox.
	Dir string
	// Env is the environment: the spec's, the request's, PATH, HOME and
	// PWD.
	Env map[string]string
	// User is who runs it: the request's user, the spec's, or "user".
	User           string
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Session is the sandbox, for a program that reads or writes files.
	Session *Session
}

// Handle makes every sandbox of r run prog for the program name (as in
// ExecRequest.Cmd: "sh" is the one a shell request runs). A path in a
// standard bin directory ("/bin/echo") finds the name ("echo") too. A
// later Handle of the same name replaces the earlier one.
func (r *Runtime) Handle(name string, prog Program) {
	r.progMu.Lock()
	defer r.progMu.Unlock()
	if r.programs == nil {
		r.programs = make(map[string]Program)
	}
	r.programs[name] = prog
}

// Script makes name print stdout and exit with code, whatever its
// arguments: the common case of Handle.
func (r *Runtime) Script(name, stdout string, code int) {
	r.Handle(name, func(_ context.Context, p *Proc) int {
		io.WriteString(p.Stdout, stdout)
		return code
	})
}

// program finds what Handle registered for name.
func (r *Runtime) program(name string) (Program, error) {
	r.progMu.Lock()
	defer r.progMu.Unlock()
	if prog := r.programs[name]; prog != nil {
		return prog, nil
	}
	switch dir, base := path.Split(name); path.Clean(dir) {
	case "/bin", "/usr/bin", "/usr/local/bin", "/sbin", "/usr/sbin":
		if prog := r.programs[base]; prog != nil {
			return prog, nil
		}
	}
	return nil, fmt.Errorf("program %q not found (the fake runs only what a test gave it with Handle or Script): %w", name, sandbox.ErrNotFound)
}
