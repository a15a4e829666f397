package local

import "log/slog"

// hardenSelf walls in the daemon (and so every command it starts): it is
// wired to sandbox/local/harden once that lands.
func hardenSelf(cfg *initConfig, log *slog.Logger) error { return nil }
