// Command cove-sandbox is the sandbox side of cove alone: the in-sandbox
// daemon (guest) and the local runtime's supervisor (local-shim) and pid 1
// (local-init). `make build` embeds it in cove, which runs it for those
// roles, so a sandbox starts a small program that initialises only what
// it needs rather than the whole harness (model SDKs, tracing, MCP), which
// would add milliseconds and megabytes to every sandbox. Without the
// embedded copy cove runs these roles itself.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"syscall"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox/local"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "cove-sandbox: started by cove for a sandbox's roles (guest, local-shim, local-init); run cove instead")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	switch role := os.Args[1]; {
	case role == "guest":
		err = guest.Main(ctx, os.Args[2:], os.Stderr)
	case strings.HasPrefix(role, "local-"):
		err = local.Main(ctx, os.Args[1:], os.Stderr)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cove-sandbox:", err)
		os.Exit(1)
	}
}
