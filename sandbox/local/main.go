package local

import (
	"context"
	"fmt"
	"io"
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
