// Command cove-sandbox is the in-sandbox side of cove alone: the daemon
// (guest) and the local runtime's pid 1 (local-init), which serves the
// daemon. `make build` embeds it in cove, which runs it for those roles,
// so a sandbox starts a small program that initialises only what it needs
// rather than the whole harness (model SDKs, tracing, MCP), which would
// add milliseconds and megabytes to every sandbox. The local runtime's
// supervisor is cmd/cove-shim, so this program does not link the host
// side either (cgroups, nftables, templates). Without the embedded copies
// cove runs these roles itself.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox/local/pid1"
)

func main() {
	if len(os.Args) < 2 {
		fmt.Fprintln(os.Stderr, "cove-sandbox: started by cove for a sandbox's roles (guest, local-init); run cove instead")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	var err error
	switch role := os.Args[1]; role {
	case "guest":
		err = guest.Main(ctx, os.Args[2:], os.Stderr)
	case "local-init":
		err = pid1.Main(ctx, os.Args[2:], os.Stderr)
	default:
		err = fmt.Errorf("unknown role %q", role)
	}
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cove-sandbox:", err)
		os.Exit(1)
	}
}
