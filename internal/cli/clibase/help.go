// Package clibase holds what every cove command shares: its errors and
// exit codes, -h/--help, flag parsing and the TTL flag. It imports no
// runtime, store or model, so the light commands (cove sandbox) start
// without them.
package clibase

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// ErrHelp means -h or --help asked for a command's usage and it has been
// printed on stdout: Run returns nil for it, so `cove X --help` exits 0.
var ErrHelp = errors.New("help shown")

// IsHelpFlag reports whether a is -h, -help or --help.
func IsHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// HelpAsked reports whether args ask for help: -h, -help or --help before
// any "--" (after it come a command's own arguments).
func HelpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if IsHelpFlag(a) {
			return true
		}
	}
	return false
}

// ShowHelp prints text on stdout and returns ErrHelp.
func ShowHelp(stdout io.Writer, text string) error {
	fmt.Fprint(stdout, text)
	return ErrHelp
}

// ParseFlags parses args into fs. With -h or --help it prints fs's usage
// on stdout and returns ErrHelp; a wrong flag prints the error and the
// usage on stderr and returns ErrUsage. fs.Usage must write to
// fs.Output() (SetUsage does).
func ParseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
	// The usage is printed after the parse: in full on stdout for help,
	// not at all under a wrong flag's error, which it would bury.
	usage := fs.Usage
	fs.Usage = func() {}
	var buf bytes.Buffer
	fs.SetOutput(&buf)
	err := fs.Parse(args)
	fs.Usage = usage
	switch {
	case errors.Is(err, flag.ErrHelp):
		fs.SetOutput(stdout)
		fs.Usage()
		fs.SetOutput(stderr)
		return ErrHelp
	case err != nil:
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "%s(-h shows the flags)\n", buf.Bytes())
		return ErrUsage
	}
	fs.SetOutput(stderr)
	return nil
}

// SetUsage makes fs's usage the text given (its synopsis) followed by its
// flags, written to wherever fs's output is at the time.
func SetUsage(fs *flag.FlagSet, text string) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), text)
		if !strings.HasSuffix(text, "\n") {
			fmt.Fprintln(fs.Output())
		}
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
}

// TTLFlag is a duration flag that refuses a bare number: is "--ttl 5"
// five seconds, minutes or hours? The user says.
type TTLFlag struct{ D *time.Duration }

func (f TTLFlag) String() string {
	if f.D == nil || *f.D == 0 {
		return ""
	}
	return f.D.String()
}

func (f TTLFlag) Set(s string) error {
	d, err := ParseTTL(s)
	if err != nil {
		return err
	}
	*f.D = d
	return nil
}

// ParseTTL reads a TTL: a Go duration with its unit (90s, 30m, 1h30m).
// A bare number is refused with the fix, not taken in some unit.
func ParseTTL(s string) (time.Duration, error) {
	s = strings.TrimSpace(s)
	d, err := time.ParseDuration(s)
	switch {
	case err != nil && isNumber(s):
		return 0, fmt.Errorf("%q has no unit: --ttl takes a duration such as %sm or %sh", s, s, s)
	case err != nil:
		return 0, fmt.Errorf("%q is not a duration: --ttl takes one such as 30m, 1h or 1h30m", s)
	case d < 0:
		return 0, fmt.Errorf("%q is negative: --ttl takes a duration such as 30m or 1h", s)
	}
	return d, nil
}

func isNumber(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

// Version is set at build time.
var Version = "dev"

// ErrUsage means the command line was wrong; the usage has been printed.
var ErrUsage = errors.New("usage")

// ExitError carries a command's exit code (cove sandbox exec and cove
// demo forward the sandboxed command's).
type ExitError struct{ Code int }

func (e ExitError) Error() string { return fmt.Sprintf("exit status %d", e.Code) }

// Reportable reports whether main should print err: usage errors have
// printed the usage already, and a sandboxed command's exit status is
// its own business.
func Reportable(err error) bool {
	var ee ExitError
	return err != nil && !errors.Is(err, ErrUsage) && !errors.As(err, &ee)
}

// ExitCode is the process exit code for an error a command returned.
func ExitCode(err error) int {
	var ee ExitError
	switch {
	case err == nil, errors.Is(err, ErrHelp):
		return 0
	case errors.As(err, &ee):
		return ee.Code
	case errors.Is(err, ErrUsage):
		return 2
	}
	return 1
}
