package fleet

import (
	"context"
	"slices"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Logs returns team's sandbox id's log, oldest line first: its life as
// the record tells it (created, last started, stopped) and, while it
// runs, its daemon's own log of this run (sandbox.LogReader: the daemon
// started, each process started and ended, bounded by the daemon). A
// stopped sandbox's daemon log is gone with its daemon. Nothing of the
// host is in it: a daemon log that cannot be read is a line saying so,
// the detail in the server's log. Reading the log is not activity.
// ErrNotFound when team has no such sandbox.
func (f *Fleet) Logs(ctx context.Context, team, id string) ([]sandbox.LogEntry, error) {
	rec, err := f.Get(ctx, team, id)
	if err != nil {
		return nil, err
	}
	out := lifeLines(rec)
	if rec.State == store.StateRunning {
		out = append(out, f.daemonLog(ctx, rec)...)
	}
	slices.SortStableFunc(out, func(a, b sandbox.LogEntry) int { return a.Time.Compare(b.Time) })
	return out, nil
}

// lifeLines are a record's lifecycle as log lines.
func lifeLines(rec store.Sandbox) []sandbox.LogEntry {
	created := sandbox.LogEntry{Time: rec.CreatedAt, Level: "info", Message: "sandbox created"}
	if rec.Spec.Template != "" {
		created.Fields = map[string]string{"template": rec.Spec.Template}
	}
	out := []sandbox.LogEntry{created}
	if rec.StartedAt.After(rec.CreatedAt) {
		out = append(out, sandbox.LogEntry{Time: rec.StartedAt, Level: "info", Message: "sandbox started"})
	}
	if rec.State != store.StateRunning && !rec.StoppedAt.IsZero() {
		out = append(out, sandbox.LogEntry{Time: rec.StoppedAt, Level: "info", Message: "sandbox stopped"})
	}
	return out
}

// daemonLog is a running sandbox's daemon log, or a line saying why it
// could not be read.
func (f *Fleet) daemonLog(ctx context.Context, rec store.Sandbox) []sandbox.LogEntry {
	sess, err := f.LiveSession(ctx, rec)
	if err == nil {
		lr, ok := sess.(sandbox.LogReader)
		if !ok {
			return nil
		}
		var entries []sandbox.LogEntry
		if entries, err = lr.Logs(ctx); err == nil {
			return entries
		}
	}
	f.log.Warn("reading a sandbox's daemon log", "sandbox", rec.ID, "err", err)
	return []sandbox.LogEntry{{Time: f.cfg.Now().UTC(), Level: "warn", Message: "the sandbox daemon's log could not be read right now; retry"}}
}
