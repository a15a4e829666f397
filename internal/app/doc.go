// Package app is Cove's wiring: it turns the configuration (flags,
// COVE_HOME, COVE_SERVER, COVE_API_KEY and the other COVE_ variables)
// into the concrete runtime, store, model and server the commands run on.
// It (with internal/app/runtimes, which opens the runtimes) is the one
// place that imports the implementations (sandbox/local,
// sandbox/hostproc, sandbox/remote, store/sqlite, agent/model/openai);
// internal/cli keeps the subcommands, flags and terminal output.
package app
