package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/template"
)

const templateUsage = `Usage:
  cove template ls                                   list the templates
  cove template build NAME [--packages P1,P2,...]    build one from Debian packages (minbase + packages)
        [--suite bookworm] [--mirror URL] [--tool mmdebstrap|debootstrap]
  cove template import NAME FILE.tar                 import a docker save or OCI image tarball ("-" reads stdin)
  cove template rm NAME...                           remove templates no sandbox uses
  cove template push NAME --output FILE.tar          write it as a container image for the kube runtime
        [--tag REF] [--sandbox-bin PATH]              (default tag cove/NAME:latest; import the file into
                                                     the nodes' containerd, or push it to a registry)

Every subcommand takes --state-dir DIR (default $COVE_HOME: ~/.cove, or
/var/lib/cove as root); templates live in DIR/templates. The "host"
template (the host's /usr, read-only) is built in.
`

// templateInUse returns the function that tells whether a sandbox under
// stateDir, running or stopped, uses the template with a given digest
// (tests replace it).
var templateInUse = runtimes.TemplatesInUse

// templateCmd implements `cove template build|import|ls|rm`.
func templateCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, templateUsage)
		return clibase.ErrUsage
	}
	sub, args := args[0], args[1:]
	if clibase.HelpAsked(args) {
		return clibase.ShowHelp(stdout, templateUsage)
	}
	fs := flag.NewFlagSet("template "+sub, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() { fmt.Fprint(stderr, templateUsage) }
	stateDir := fs.String("state-dir", "", "cove's state directory (templates are in DIR/templates)")
	var packages, suite, mirror, tool *string
	var output, tag, sandboxBin *string
	switch sub {
	case "build":
		packages = fs.String("packages", "", "comma-separated Debian packages to install on top of minbase")
		suite = fs.String("suite", template.DefaultSuite, "Debian release")
		mirror = fs.String("mirror", template.DefaultMirror, "Debian mirror URL")
		tool = fs.String("tool", "", "bootstrapper: mmdebstrap or debootstrap (default: mmdebstrap when installed)")
	case "push":
		output = fs.String("output", "", "the image tarball to write (OCI layout and docker save in one; - for stdout)")
		tag = fs.String("tag", "", "the image's reference (default cove/NAME:latest, what the kube runtime's default --kube-image-prefix finds)")
		sandboxBin = fs.String("sandbox-bin", "", "a statically linked cove-sandbox to put in the image (default: the one built into cove)")
	case "ls", "list", "import", "rm", "remove":
	case "help", "-h", "--help":
		fmt.Fprint(stdout, templateUsage)
		return nil
	default:
		fmt.Fprintf(stderr, "cove template: unknown subcommand %q\n\n%s", sub, templateUsage)
		return clibase.ErrUsage
	}
	pos, err := templateArgs(fs, args)
	if err != nil {
		return clibase.ErrUsage
	}
	switch n := len(pos); {
	case (sub == "ls" || sub == "list") && n != 0:
		return templateUsageError(stderr, "cove template ls takes no arguments")
	case sub == "build" && n != 1:
		return templateUsageError(stderr, "cove template build takes one NAME")
	case sub == "import" && n != 2:
		return templateUsageError(stderr, "cove template import takes NAME and FILE.tar (- for stdin)")
	case sub == "push" && (n != 1 || *output == ""):
		return templateUsageError(stderr, "cove template push takes one NAME and --output FILE.tar")
	case (sub == "rm" || sub == "remove") && n == 0:
		return templateUsageError(stderr, "cove template rm takes one or more NAMEs")
	}
	dir := runtimes.DataDir(*stateDir)
	st, err := runtimes.Templates(dir)
	if err != nil {
		return err
	}
	progress := func(line string) { fmt.Fprintln(stderr, "  "+line) }

	switch sub {
	case "ls", "list":
		return templateList(st, stdout)

	case "build":
		var pkgs []string
		for _, p := range strings.Split(*packages, ",") {
			if p = strings.TrimSpace(p); p != "" {
				pkgs = append(pkgs, p)
			}
		}
		fmt.Fprintf(stderr, "→ building template %s\n", pos[0])
		t, err := st.Build(ctx, pos[0], template.BuildOptions{
			Packages: pkgs, Suite: *suite, Mirror: *mirror, Tool: *tool, Progress: progress,
		})
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\t%s\t%s\n", t.Name, t.Digest, template.HumanSize(t.Size))
		return nil

	case "import":
		return templateImport(ctx, st, pos[0], pos[1], progress, stdout, stderr)

	case "push":
		return templatePush(st, dir, pos[0], pushOptions{output: *output, tag: *tag, sandboxBin: *sandboxBin}, stdout, stderr)

	default: // rm
		inUse, err := templateInUse(ctx, dir)
		if err != nil {
			return err
		}
		for _, name := range pos {
			if err := st.Remove(name, inUse); err != nil {
				return err
			}
			fmt.Fprintf(stderr, "removed template %s\n", name)
		}
		return nil
	}
}

// templateList prints the templates of st as a table.
func templateList(st *template.Store, stdout io.Writer) error {
	ts, err := st.List()
	if err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "NAME\tDIGEST\tSIZE\tCREATED\tSOURCE")
	for _, t := range ts {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", t.Name, templateDigest(t.Digest), template.HumanSize(t.Size), t.Created.Local().Format(time.DateTime), t.Source)
	}
	return tw.Flush()
}

// templateImport imports template name from the image tarball file ("-"
// is stdin).
func templateImport(ctx context.Context, st *template.Store, name, file string, progress func(string), stdout, stderr io.Writer) error {
	var r io.Reader = os.Stdin
	if file != "-" {
		f, err := os.Open(file)
		if err != nil {
			return fmt.Errorf("importing template %q: %w", name, err)
		}
		defer f.Close()
		r = f
	}
	fmt.Fprintf(stderr, "→ importing template %s from %s\n", name, file)
	t, err := st.Import(ctx, name, r, progress)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\t%s\t%s\n", t.Name, t.Digest, template.HumanSize(t.Size))
	return nil
}

// templateArgs parses flags that may come before, between or after
// the positional arguments ("build NAME --packages x"); "--" ends flags.
func templateArgs(fs *flag.FlagSet, args []string) ([]string, error) {
	var pos []string
	for {
		if err := fs.Parse(args); err != nil {
			return nil, err
		}
		rest := fs.Args()
		if len(rest) == 0 {
			return pos, nil
		}
		if len(args) > len(rest) && args[len(args)-len(rest)-1] == "--" {
			return append(pos, rest...), nil
		}
		pos = append(pos, rest[0])
		args = rest[1:]
	}
}

func templateUsageError(stderr io.Writer, msg string) error {
	fmt.Fprintf(stderr, "%s\n\n%s", msg, templateUsage)
	return clibase.ErrUsage
}

// templateDigest is a digest's first 12 hex digits.
func templateDigest(d string) string {
	d = strings.TrimPrefix(d, "sha256:")
	if len(d) > 12 {
		d = d[:12]
	}
	return d
}
