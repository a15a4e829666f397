package cli

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"
	"time"
)

// errHelp means -h or --help asked for a command's usage and it has been
// printed on stdout: Run returns nil for it, so `cove X --help` exits 0.
var errHelp = errors.New("help shown")

// isHelpFlag reports whether a is -h, -help or --help.
func isHelpFlag(a string) bool { return a == "-h" || a == "-help" || a == "--help" }

// helpAsked reports whether args ask for help: -h, -help or --help before
// any "--" (after it come a command's own arguments).
func helpAsked(args []string) bool {
	for _, a := range args {
		if a == "--" {
			return false
		}
		if isHelpFlag(a) {
			return true
		}
	}
	return false
}

// showHelp prints text on stdout and returns errHelp.
func showHelp(stdout io.Writer, text string) error {
	fmt.Fprint(stdout, text)
	return errHelp
}

// parseFlags parses args into fs. With -h or --help it prints fs's usage
// on stdout and returns errHelp; a wrong flag prints the error and the
// usage on stderr and returns ErrUsage. fs.Usage must write to
// fs.Output() (setUsage does).
func parseFlags(fs *flag.FlagSet, args []string, stdout, stderr io.Writer) error {
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
		return errHelp
	case err != nil:
		fs.SetOutput(stderr)
		fmt.Fprintf(stderr, "%s(-h shows the flags)\n", buf.Bytes())
		return ErrUsage
	}
	fs.SetOutput(stderr)
	return nil
}

// setUsage makes fs's usage the text given (its synopsis) followed by its
// flags, written to wherever fs's output is at the time.
func setUsage(fs *flag.FlagSet, text string) {
	fs.Usage = func() {
		fmt.Fprint(fs.Output(), text)
		if !strings.HasSuffix(text, "\n") {
			fmt.Fprintln(fs.Output())
		}
		fmt.Fprintln(fs.Output(), "\nFlags:")
		fs.PrintDefaults()
	}
}

// execHelpAsked is helpAsked for `cove sandbox exec`: its flags may come
// before or after the sandbox id, but the first argument after the id
// that is not a flag starts the command, whose own --help is its own.
func execHelpAsked(args []string) bool {
	seenID := false
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "--":
			return false
		case isHelpFlag(a):
			return true
		case a == "-e" || a == "-w" || a == "-u":
			i++ // the flag's value
		case strings.HasPrefix(a, "-"):
		case !seenID:
			seenID = true
		default:
			return false
		}
	}
	return false
}

// sandboxHelp is the usage of `cove sandbox CMD` ("" when CMD has no
// page of its own: the sandbox usage is shown).
var sandboxHelp = map[string]string{
	"ls":     "Usage: cove sandbox ls\n\nLists the sandboxes: id, state, template, age, and the time left before the TTL stops each.\n",
	"list":   "Usage: cove sandbox ls\n\nLists the sandboxes: id, state, template, age, and the time left before the TTL stops each.\n",
	"cp":     "Usage: cove sandbox cp ID:PATH LOCAL\n       cove sandbox cp LOCAL ID:PATH\n\nCopies a file or folder between this machine and a sandbox; into PATH when it is a folder.\n",
	"stop":   "Usage: cove sandbox stop ID...\n\nStops sandboxes; their disk is kept (cove sandbox resume ID).\n",
	"resume": "Usage: cove sandbox resume ID...\n\nStarts stopped sandboxes again, with their disk.\n",
	"fork":   "Usage: cove sandbox fork ID\n\nMakes a new sandbox with a copy of ID's disk; prints its id.\n",
	"drain":  "Usage: cove sandbox drain\n\nDeletes the sandboxes kept ready for COVE_POOL.\n",
}

// ttlFlag is a duration flag that refuses a bare number: is "--ttl 5"
// five seconds, minutes or hours? The user says.
type ttlFlag struct{ d *time.Duration }

func (f ttlFlag) String() string {
	if f.d == nil || *f.d == 0 {
		return ""
	}
	return f.d.String()
}

func (f ttlFlag) Set(s string) error {
	d, err := parseTTL(s)
	if err != nil {
		return err
	}
	*f.d = d
	return nil
}

// parseTTL reads a TTL: a Go duration with its unit (90s, 30m, 1h30m).
// A bare number is refused with the fix, not taken in some unit.
func parseTTL(s string) (time.Duration, error) {
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
