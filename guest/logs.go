package guest

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"

	"github.com/cove-sandbox/cove/guest/internal/journal"
	"github.com/cove-sandbox/cove/sandbox"
)

// The daemon's journal (package guest/internal/journal) over the wire:
// GET /cove/logs answers its lines, oldest first, as a JSON array of
// sandbox.LogEntry.

// maxLogsBody bounds what a client reads of a daemon's journal: the
// daemon runs inside the sandbox, which may have taken it over.
const maxLogsBody = 4 << 20

func (s *Server) logs(w http.ResponseWriter, r *http.Request) {
	entries := s.journal.Entries()
	if entries == nil {
		entries = []sandbox.LogEntry{}
	}
	w.Header().Set("Content-Type", "application/json")
	json.NewEncoder(w).Encode(entries)
}

// Logs returns the daemon's journal, oldest line first, held to the
// journal's bounds whatever the daemon sent.
func (c *Client) Logs(ctx context.Context) ([]sandbox.LogEntry, error) {
	resp, err := c.do(ctx, http.MethodGet, "/cove/logs", nil, nil, nil)
	if err != nil {
		return nil, fmt.Errorf("reading the sandbox's log: %w", err)
	}
	defer resp.Body.Close()
	var entries []sandbox.LogEntry
	if err := json.NewDecoder(io.LimitReader(resp.Body, maxLogsBody)).Decode(&entries); err != nil {
		return nil, fmt.Errorf("reading the sandbox's log: the daemon's answer is not a log: %w", sandbox.ErrUnavailable)
	}
	if len(entries) > journal.MaxEntries {
		entries = entries[len(entries)-journal.MaxEntries:]
	}
	for i, e := range entries {
		entries[i] = journal.Clean(e)
	}
	return entries, nil
}

var _ sandbox.LogReader = (*Session)(nil)

// Logs implements sandbox.LogReader.
func (s *Session) Logs(ctx context.Context) ([]sandbox.LogEntry, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	return s.c.Logs(ctx)
}
