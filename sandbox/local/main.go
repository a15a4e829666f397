package local

import (
	"context"
	"fmt"
	"io"

	"github.com/cove-sandbox/cove/sandbox/local/pid1"
	"github.com/cove-sandbox/cove/sandbox/local/shim"
)

// Main runs the hidden role the runtime re-executes the program as:
// args[0] is "local-shim" (a sandbox's supervisor) or "local-init" (its
// pid 1). A program that embeds the local runtime calls it first thing in
// main when os.Args[1] starts with "local-", as cove does.
func Main(ctx context.Context, args []string, stderr io.Writer) error {
	if len(args) == 0 {
		return fmt.Errorf("local.Main: no role")
	}
	switch args[0] {
	case "local-shim":
		return ShimMain(ctx, args[1:], stderr)
	case "local-init":
		return InitMain(ctx, args[1:], stderr)
	}
	return fmt.Errorf("local.Main: unknown role %q", args[0])
}

// ShimMain is `cove local-shim`: a sandbox's supervisor. Detached from
// whoever created the sandbox (its own session), it opens the daemon's
// socket, starts pid 1 in new namespaces, enforces the TTL, and when pid 1
// ends (stop, TTL, crash) releases what the sandbox held and records that
// it stopped. One supervisor runs per running sandbox. (Package shim;
// cove runs it from its own small program, cmd/cove-shim.)
func ShimMain(ctx context.Context, args []string, stderr io.Writer) error {
	return shim.Main(ctx, args, stderr)
}

// InitMain is `cove local-init`: the sandbox's pid 1. In fresh mount, pid,
// ipc, uts and network namespaces it builds the root filesystem, pivots
// into it, brings up loopback, hardens itself and then serves as the
// sandbox's daemon on the socket the supervisor opened. (Package pid1;
// cove runs it from cmd/cove-sandbox.)
func InitMain(ctx context.Context, args []string, stderr io.Writer) error {
	return pid1.Main(ctx, args, stderr)
}
