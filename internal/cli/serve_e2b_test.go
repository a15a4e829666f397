package cli

import (
	"errors"
	"strings"
	"testing"

	"github.com/cove-sandbox/cove/internal/cli/clibase"
)

// TestServeE2BNetworkFlag: --e2b-network takes internet or none, and
// anything else is a usage error that names the flag (before any
// server starts).
func TestServeE2BNetworkFlag(t *testing.T) {
	_, errOut, err := run(t, "serve", "--e2b-network", "sometimes")
	if !errors.Is(err, clibase.ErrUsage) || !strings.Contains(errOut, "--e2b-network") || !strings.Contains(errOut, "internet or none") {
		t.Errorf("--e2b-network sometimes: err %v, stderr %q; want a usage error naming the flag", err, errOut)
	}
}
