//go:build !front

// Command cove runs AI agents' work in isolated Linux sandboxes. All logic
// lives in internal/cli; main only wires signals and the exit code.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cove-sandbox/cove/internal/cli"
	"github.com/cove-sandbox/cove/internal/cli/clibase"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := cli.Run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if clibase.Reportable(err) {
			fmt.Fprintln(os.Stderr, "cove:", err)
		}
		os.Exit(clibase.ExitCode(err))
	}
}
