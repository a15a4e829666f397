package local

import (
	"fmt"
	"log/slog"
	"time"

	"github.com/cove-sandbox/cove/sandbox/local/harden"
)

// hardenSelf walls in pid 1 (and so every command it starts): capabilities
// cut to what the daemon needs, no_new_privs, the seccomp filter and a
// Landlock ruleset where the kernel has one. It runs after the mounts and
// before the daemon serves.
func hardenSelf(cfg *initConfig, log *slog.Logger) error {
	t0 := time.Now()
	rep, err := harden.Apply(harden.Options{})
	if err != nil {
		return fmt.Errorf("applying seccomp, capabilities and no_new_privs: %w", err)
	}
	log.Info("sandbox hardened", "seccomp", rep.Seccomp, "no_new_privs", rep.NoNewPrivs,
		"landlock_abi", rep.Landlock, "caps_kept", rep.CapsKept, "skipped", rep.Skipped, "took", time.Since(t0))
	return nil
}
