// Package cli implements cove's subcommands, flags and terminal output.
// What they run on (runtime, store, model, server) comes from
// internal/app, the wiring; everything cli does is reachable from tests
// via Run.
package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"

	"github.com/cove-sandbox/cove/internal/app"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/internal/cli/sandboxcli"
)

const usage = `cove runs AI agents' work in isolated Linux sandboxes.

Usage:
  cove run [flags] "task"         run an agent on a task in a sandbox made from a workspace (cove run -h)
  cove serve [flags]               run the Cove server: the /v1 API for teams' sandboxes (cove serve -h)
  cove key create|ls|revoke        API keys on a Cove server (COVE_SERVER, COVE_API_KEY)
  cove sandbox COMMAND             create, list, exec in, copy to/from, snapshot, stop, resume, fork, rm sandboxes
  cove template build|import|ls|rm  root filesystems for sandboxes (Debian packages, OCI images)
  cove image server --output F     write the Cove server as a container image (for deploy/kubernetes)
  cove demo [-- COMMAND ARGS...]   start a sandbox, run a command in it through its daemon, print the output
  cove bench [-n N]                measure exec round trip and file throughput through the daemon
  cove version                     print the version

Environment:
  COVE_HOME        state directory (default ~/.local/share/cove, or /var/lib/cove as root)
  COVE_SERVER      a Cove server for cove sandbox and cove run to make their sandboxes on (and cove key)
  COVE_API_KEY     the API key for COVE_SERVER
  OPENAI_API_KEY   the model API key for cove run (it stays on the host, never in a sandbox)
  OPENAI_BASE_URL  an OpenAI-compatible server for cove run (Ollama, vLLM, LM Studio)
  COVE_MODEL       the model cove run uses (default gpt-5.1)
  OTEL_EXPORTER_OTLP_ENDPOINT  export OpenTelemetry traces of runs over OTLP/HTTP
`

// Stdin is what commands read answers from (approvals); tests replace it.
var Stdin io.Reader = os.Stdin

// Run runs one cove command line (without the program name).
func Run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if err := dispatch(ctx, args, stdout, stderr); !errors.Is(err, clibase.ErrHelp) {
		return err
	}
	return nil // -h or --help: the usage is on stdout
}

func dispatch(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stderr, usage)
		return clibase.ErrUsage
	}
	switch args[0] {
	case "guest", "local-shim", "local-init":
		// Hidden: the in-sandbox daemon, and a local sandbox's
		// supervisor and pid 1, started by runtimes.
		_, err := app.Role(ctx, args[0], args[1:], stderr)
		return err
	case "sandbox":
		return sandboxcli.Cmd(ctx, args[1:], stdout, stderr)
	case "template":
		return templateCmd(ctx, args[1:], stdout, stderr)
	case "run":
		return runCmd(ctx, args[1:], Stdin, stdout, stderr)
	case "serve":
		return serveCmd(ctx, args[1:], stdout, stderr)
	case "key":
		return keyCmd(ctx, args[1:], stdout, stderr)
	case "image":
		return imageCmd(ctx, args[1:], stdout, stderr)
	case "demo":
		return demo(ctx, args[1:], stdout, stderr)
	case "bench":
		return bench(ctx, args[1:], stdout, stderr)
	case "version":
		fmt.Fprintln(stdout, "cove", clibase.Version)
		return nil
	case "help", "-h", "--help":
		fmt.Fprint(stdout, usage)
		return nil
	}
	fmt.Fprintf(stderr, "cove: unknown command %q\n\n%s", args[0], usage)
	return clibase.ErrUsage
}
