package local

import (
	"testing"

	"github.com/cove-sandbox/cove/sandbox"
)

// The attacker tests (escapes, walls, abuse, lifecycle) run on both
// isolation tiers: the gVisor subtest skips only where runsc is absent.

// tiers are the isolation tiers of the local runtime.
var tiers = []string{sandbox.IsolationNative, sandbox.IsolationGVisor}

// onTiers runs fn as one subtest per tier, named for it.
func onTiers(t *testing.T, fn func(t *testing.T, iso string)) {
	t.Helper()
	for _, iso := range tiers {
		t.Run(iso, func(t *testing.T) {
			if iso == sandbox.IsolationGVisor {
				needRunsc(t)
			}
			fn(t, iso)
		})
	}
}

// onGVisor says the subtest runs on the gVisor tier.
func onGVisor(iso string) bool { return iso == sandbox.IsolationGVisor }
