package e2b

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/server/internal/web"
)

// Sandbox logs (GET /sandboxes/{id}/logs and /v2/sandboxes/{id}/logs):
// the sandbox's lifecycle and its daemon's log of this run (what
// started, when, how it ended), from fleet.Logs.

// logEntry is E2B's SandboxLogEntry.
type logEntry struct {
	Timestamp time.Time         `json:"timestamp"`
	Level     string            `json:"level"`
	Message   string            `json:"message"`
	Fields    map[string]string `json:"fields"`
}

// logLine is E2B's SandboxLog: one line of text.
type logLine struct {
	Timestamp time.Time `json:"timestamp"`
	Line      string    `json:"line"`
}

// maxLogLimit is the most lines one answer carries (E2B's maximum and
// default).
const maxLogLimit = 1000

// levels orders E2B's log levels.
var levels = map[string]int{"debug": 0, "info": 1, "warn": 2, "error": 3}

func toEntry(e sandbox.LogEntry) logEntry {
	f := e.Fields
	if f == nil {
		f = map[string]string{}
	}
	return logEntry{Timestamp: e.Time, Level: e.Level, Message: e.Message, Fields: f}
}

// toLine is an entry as one JSON line, as E2B's deprecated logs give it.
func toLine(e sandbox.LogEntry) logLine {
	m := map[string]string{}
	for k, v := range e.Fields {
		m[k] = v
	}
	m["level"], m["message"] = e.Level, e.Message
	b, _ := json.Marshal(m)
	return logLine{Timestamp: e.Time, Line: string(b)}
}

// intParam reads an optional non-negative integer query parameter; a
// message says what is wrong.
func intParam(q url.Values, name string, def, max int64) (int64, string) {
	v := q.Get(name)
	if v == "" {
		return def, ""
	}
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil || n < 0 || n > max {
		return 0, fmt.Sprintf("%s: %q is not a whole number from 0 to %d", name, v, max)
	}
	return n, ""
}

// logsV1 serves the deprecated GET /sandboxes/{id}/logs: the lines from
// start (Unix milliseconds) on, oldest first, at most limit.
func (s *API) logsV1(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	start, msg := intParam(q, "start", 0, math.MaxInt64)
	if msg == "" {
		var limit int64
		if limit, msg = intParam(q, "limit", maxLogLimit, math.MaxInt32); msg == "" {
			s.writeLogsV1(w, r, c, start, int(min(limit, maxLogLimit)))
			return
		}
	}
	writeError(w, http.StatusBadRequest, msg)
}

func (s *API) writeLogsV1(w http.ResponseWriter, r *http.Request, c *caller, start int64, limit int) {
	entries, ok := s.logs(w, r, c)
	if !ok {
		return
	}
	out := struct {
		Logs       []logLine  `json:"logs"`
		LogEntries []logEntry `json:"logEntries"`
	}{Logs: []logLine{}, LogEntries: []logEntry{}}
	for _, e := range entries {
		if len(out.Logs) == limit {
			break
		}
		if e.Time.UnixMilli() >= start {
			out.Logs = append(out.Logs, toLine(e))
			out.LogEntries = append(out.LogEntries, toEntry(e))
		}
	}
	web.WriteJSON(w, http.StatusOK, out)
}

// logsQuery is what GET /v2/sandboxes/{id}/logs asks.
type logsQuery struct {
	cursor   time.Time // zero: none
	limit    int
	backward bool
	level    int
	search   string
}

func parseLogsQuery(q url.Values) (logsQuery, string) {
	lq := logsQuery{backward: true}
	ms, msg := intParam(q, "cursor", -1, math.MaxInt64)
	if msg != "" {
		return lq, msg
	}
	if ms >= 0 {
		lq.cursor = time.UnixMilli(ms)
	}
	limit, msg := intParam(q, "limit", maxLogLimit, maxLogLimit)
	if msg != "" {
		return lq, msg
	}
	lq.limit = int(limit)
	switch d := q.Get("direction"); d {
	case "", "backward":
	case "forward":
		lq.backward = false
	default:
		return lq, fmt.Sprintf("direction %q: use forward or backward", d)
	}
	if l := q.Get("level"); l != "" {
		n, ok := levels[l]
		if !ok {
			return lq, fmt.Sprintf("level %q: use debug, info, warn or error", l)
		}
		lq.level = n
	}
	lq.search = q.Get("search")
	if len(lq.search) > 256 {
		return lq, "search: at most 256 bytes"
	}
	return lq, ""
}

// keep reports whether e passes the query's filters.
func (lq logsQuery) keep(e sandbox.LogEntry) bool {
	if levels[e.Level] < lq.level || !strings.Contains(e.Message, lq.search) {
		return false
	}
	switch {
	case lq.cursor.IsZero():
		return true
	case lq.backward:
		return !e.Time.After(lq.cursor)
	}
	return !e.Time.Before(lq.cursor)
}

// logsV2 serves GET /v2/sandboxes/{id}/logs: lines from the cursor (Unix
// milliseconds) forward, oldest first, or back from it (from now when
// none), newest first, as E2B's API pages them; at most limit.
func (s *API) logsV2(w http.ResponseWriter, r *http.Request, c *caller) {
	lq, msg := parseLogsQuery(r.URL.Query())
	if msg != "" {
		writeError(w, http.StatusBadRequest, msg)
		return
	}
	entries, ok := s.logs(w, r, c)
	if !ok {
		return
	}
	if lq.backward {
		slices.Reverse(entries)
	}
	out := []logEntry{}
	for _, e := range entries {
		if len(out) == lq.limit {
			break
		}
		if lq.keep(e) {
			out = append(out, toEntry(e))
		}
	}
	web.WriteJSON(w, http.StatusOK, struct {
		Logs []logEntry `json:"logs"`
	}{out})
}

// logs loads the log of the caller's sandbox named in the path,
// answering 404 or the failure itself when it cannot.
func (s *API) logs(w http.ResponseWriter, r *http.Request, c *caller) ([]sandbox.LogEntry, bool) {
	rec, ok := s.record(w, r, c)
	if !ok {
		return nil, false
	}
	entries, err := s.fleet.Logs(r.Context(), c.team, rec.ID)
	if err != nil {
		s.fail(w, r, err)
		return nil, false
	}
	return entries, true
}
