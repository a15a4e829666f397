package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/internal/app"
	"github.com/cove-sandbox/cove/internal/app/runtimes"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
)

const keyUsage = `Usage:
  cove key create NAME [--team T | --new-team T] [--admin] [--e2b]
                                                              make a key (its secret is shown once;
                                                              --e2b: in E2B's e2b_... form, for E2B_API_KEY)
  cove key ls [--all]                                         list keys (of your team; --all: every team, admin)
  cove key revoke ID                                          revoke a key
  cove key create [NAME] --admin --data DIR                   lost the admin key: make a new one straight
                                                              in the store of cove serve --data DIR (root
                                                              or the owner of DIR, on the server's machine)
  cove key create [NAME] --admin --store postgres://...       the same for a server on PostgreSQL

They talk to the server in COVE_SERVER with the key in COVE_API_KEY,
except create --data or --store, which needs neither.
`

// keyCmd is `cove key`: API keys on a Cove server.
func keyCmd(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, keyUsage)
		return clibase.ErrUsage
	}
	if clibase.HelpAsked(args) || args[0] == "help" {
		return clibase.ShowHelp(stdout, keyUsage)
	}
	if args[0] == "create" {
		return keyCreate(ctx, args[1:], stdout, stderr)
	}
	c, err := runtimes.APIClient()
	if err != nil {
		return err
	}
	switch args[0] {
	case "ls", "list":
		keys, err := c.Keys(ctx, len(args) > 1 && args[1] == "--all")
		if err != nil {
			return err
		}
		return printKeys(stdout, keys)
	case "revoke":
		if len(args) != 2 {
			fmt.Fprint(stderr, "cove key revoke: give one key id\n\n"+keyUsage)
			return clibase.ErrUsage
		}
		if err := c.RevokeKey(ctx, args[1]); err != nil {
			return err
		}
		fmt.Fprintf(stdout, "revoked %s\n", args[1])
		return nil
	}
	fmt.Fprintf(stderr, "cove key: unknown command %q\n\n%s", args[0], keyUsage)
	return clibase.ErrUsage
}

// keyCreate is `cove key create`: through the server, or with --data
// straight in a server's store.
func keyCreate(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	req, data, storeURL, err := keyCreateFlags(args, stderr)
	if err != nil {
		return err
	}
	if data != "" || storeURL != "" {
		secret, id, err := app.MintAdminKey(ctx, data, storeURL, req.Name)
		if err != nil {
			return err
		}
		fmt.Fprintf(stdout, "%s\n", secret)
		fmt.Fprintf(stderr, "admin key %s (shown once; keep it). To retire the lost one: cove key ls --all, then cove key revoke ID\n", id)
		return nil
	}
	c, err := runtimes.APIClient()
	if err != nil {
		return err
	}
	k, err := c.CreateKey(ctx, req)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "%s\n", k.Secret)
	fmt.Fprintf(stderr, "key %s of team %s (shown once; keep it)\n", k.ID, k.Team)
	return nil
}

// keyCreateFlags is the request of `cove key create NAME [flags]`, and
// --data's directory when given.
func keyCreateFlags(args []string, stderr io.Writer) (api.CreateKey, string, string, error) {
	fs := flag.NewFlagSet("key create", flag.ContinueOnError)
	fs.SetOutput(stderr)
	team := fs.String("team", "", "team of the key (admin)")
	newTeam := fs.String("new-team", "", "make this team and a key for it (admin)")
	admin := fs.Bool("admin", false, "an admin key (admin)")
	e2b := fs.Bool("e2b", false, "a key in E2B's form (e2b_...), for E2B SDKs' E2B_API_KEY")
	data := fs.String("data", "", "make an admin key straight in the store of cove serve --data DIR (root; no server needed)")
	storeURL := fs.String("store", "", "with --admin: make the admin key straight in the PostgreSQL store of cove serve --store postgres://... (no server needed)")
	name, rest := "", args
	if len(rest) > 0 && !strings.HasPrefix(rest[0], "-") {
		name, rest = rest[0], rest[1:]
	}
	if err := fs.Parse(rest); err != nil {
		return api.CreateKey{}, "", "", clibase.ErrUsage
	}
	if name == "" && fs.NArg() > 0 {
		name = fs.Arg(0)
	}
	if *storeURL == "sqlite" {
		*storeURL = "" // the store of --data
	}
	if *data != "" || *storeURL != "" {
		if !*admin || *team != "" || *newTeam != "" || *e2b {
			fmt.Fprint(stderr, "cove key create --data makes admin keys only: add --admin (and no --team, --new-team or --e2b); make other keys through the server with it\n")
			return api.CreateKey{}, "", "", clibase.ErrUsage
		}
		if name == "" {
			name = "admin-recovered"
		}
	}
	if name == "" {
		fmt.Fprint(stderr, "cove key create: name the key\n\n"+keyUsage)
		return api.CreateKey{}, "", "", clibase.ErrUsage
	}
	req := api.CreateKey{Name: name, Team: *team, NewTeam: *newTeam, Admin: *admin}
	if *e2b {
		req.Format = "e2b"
	}
	return req, *data, *storeURL, nil
}

// printKeys prints keys as a table.
func printKeys(stdout io.Writer, keys []api.Key) error {
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tNAME\tTEAM\tPREFIX\tADMIN\tCREATED\tREVOKED")
	for _, k := range keys {
		rev := ""
		if k.RevokedAt != nil {
			rev = k.RevokedAt.Format(time.RFC3339)
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s…\t%v\t%s\t%s\n", k.ID, k.Name, k.Team, k.Prefix, k.Admin, k.CreatedAt.Format(time.RFC3339), rev)
	}
	return tw.Flush()
}
