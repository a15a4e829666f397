// Command cove-shim is a local sandbox's supervisor (the local-shim role)
// alone. `make build` embeds it in cove beside cmd/cove-sandbox, and the
// local runtime starts it for every sandbox start: it links only the
// host side (cgroups, disk, veth, nftables), not the daemon it supervises,
// so it reaches main in about half the time. Without the embedded copies
// cove runs this role itself.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/cove-sandbox/cove/sandbox/local/shim"
)

func main() {
	if len(os.Args) < 2 || os.Args[1] != "local-shim" {
		fmt.Fprintln(os.Stderr, "cove-shim: started by cove as a local sandbox's supervisor (local-shim); run cove instead")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := shim.Main(ctx, os.Args[2:], os.Stderr)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "cove-shim:", err)
		os.Exit(1)
	}
}
