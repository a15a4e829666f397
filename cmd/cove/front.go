//go:build front

// The cove that make build ships (internal/cli/front): it runs cove
// sandbox and cove version itself and hands every other command to the
// full cove (this package built without the front tag), which it
// carries compressed.
package main

import (
	"context"
	_ "embed"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
	"github.com/cove-sandbox/cove/internal/cli/front"
)

//go:embed cove-full.gz
var fullGzip []byte

//go:embed cove-full.sha256
var fullSum string

func main() {
	args := os.Args[1:]
	if !front.Light(args) {
		err := front.Full{Gzip: fullGzip, Sum: fullSum}.Exec(args)
		fmt.Fprintln(os.Stderr, "cove:", err)
		os.Exit(1)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := front.Run(ctx, args, os.Stdout, os.Stderr)
	stop()
	if err != nil {
		if clibase.Reportable(err) {
			fmt.Fprintln(os.Stderr, "cove:", err)
		}
		os.Exit(clibase.ExitCode(err))
	}
}
