package app

import (
	"context"
	"io"

	"github.com/cove-sandbox/cove/guest"
	"github.com/cove-sandbox/cove/sandbox/local"
)

// Role runs one of the hidden roles runtimes re-execute cove as: "guest"
// (the in-sandbox daemon), "local-shim" and "local-init" (a local
// sandbox's supervisor and pid 1). ok is false for any other name.
func Role(ctx context.Context, name string, args []string, stderr io.Writer) (ok bool, err error) {
	switch name {
	case "guest":
		return true, guest.Main(ctx, args, stderr)
	case "local-shim":
		return true, local.ShimMain(ctx, args, stderr)
	case "local-init":
		return true, local.InitMain(ctx, args, stderr)
	}
	return false, nil
}
