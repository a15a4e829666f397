package web

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
)

// maxHeld caps the output held back while an exec or attach stream
// writes its start event.
const maxHeld = 256 << 10

// maxEventData caps the output bytes in one NDJSON event, so a runtime
// that hands over output in large writes still makes lines of bounded size.
const maxEventData = 64 << 10

// EventStream writes an exec or attach stream: NDJSON api.ExecEvents,
// each flushed as it is written. Output is written to the response as the
// process produces it, while the runtime waits: a client that reads slowly
// slows the process instead of filling the server's memory. Output that
// comes before the start event is written is held (bounded) and follows
// it.
type EventStream struct {
	w     http.ResponseWriter
	rc    *http.ResponseController
	count func(int64)
	// TimedOut marks the exit event as the end of a timeout.
	TimedOut atomic.Bool

	// mu guards the fields below and serialises writes to w.
	mu      sync.Mutex
	live    bool // the start event is out: output goes to w
	closed  bool // the handler is done with w: nothing more is written
	held    []api.ExecEvent
	size    int   // data bytes in held
	dropped int64 // output bytes not held (over maxHeld)
	werr    error // the first write error: the client is gone
	buf     bytes.Buffer
}

// NewEventStream returns a stream on w; count hears of every byte written
// (metering).
func NewEventStream(w http.ResponseWriter, count func(int64)) *EventStream {
	return &EventStream{w: w, rc: http.NewResponseController(w), count: count}
}

// Output is the writer of one stream (stdout or stderr).
func (e *EventStream) Output(kind string) io.Writer { return outputWriter{e, kind} }

type outputWriter struct {
	e    *EventStream
	kind string
}

func (o outputWriter) Write(p []byte) (int, error) {
	e := o.e
	e.mu.Lock()
	defer e.mu.Unlock()
	for rest := p; len(rest) > 0; {
		chunk := rest[:min(len(rest), maxEventData)]
		rest = rest[len(chunk):]
		switch {
		case e.closed || e.werr != nil:
			// Nobody to deliver to; the process is being killed.
		case !e.live:
			if e.size+len(chunk) > maxHeld {
				e.dropped += int64(len(chunk))
				continue
			}
			e.held = append(e.held, api.ExecEvent{Type: o.kind, Data: bytes.Clone(chunk)})
			e.size += len(chunk)
		default:
			e.writeLocked(api.ExecEvent{Type: o.kind, Data: chunk})
			e.flushLocked()
		}
	}
	return len(p), nil
}

// Start writes the headers, the start event and what was held, and from
// then on output goes straight out.
func (e *EventStream) Start(pid int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	h := e.w.Header()
	h.Set("Content-Type", "application/x-ndjson")
	h.Set("Cache-Control", "no-store")
	h.Set("X-Content-Type-Options", "nosniff")
	// A stream lasts as long as its process: no server write timeout.
	e.rc.SetWriteDeadline(time.Time{})
	e.w.WriteHeader(http.StatusOK)
	e.writeLocked(api.ExecEvent{Type: "start", PID: pid})
	e.held = e.heldNoteLocked()
	for _, ev := range e.held {
		e.writeLocked(ev)
	}
	e.held, e.size, e.dropped = nil, 0, 0
	e.live = true
	e.flushLocked()
}

// heldNoteLocked returns held with a note of what did not fit, if any.
func (e *EventStream) heldNoteLocked() []api.ExecEvent {
	if e.dropped == 0 {
		return e.held
	}
	note := fmt.Appendf(nil, "[cove: %d bytes of output were dropped here while the stream started]\n", e.dropped)
	return append(e.held, api.ExecEvent{Type: "stderr", Data: note})
}

// Exit and fail write the stream's last event and leave it unflushed:
// the handler returns next, and net/http sends it with the end of the
// response in one write (one wakeup of the client instead of two).
func (e *EventStream) Exit(st sandbox.ExitStatus) {
	code := st.Code
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writeLocked(api.ExecEvent{Type: "exit", ExitCode: &code, Signal: st.Signal, OOM: st.OOM, Error: st.Error, TimedOut: e.TimedOut.Load()})
}

func (e *EventStream) Fail(code, msg string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.writeLocked(api.ExecEvent{Type: "error", Code: code, Error: msg})
}

// Close ends the stream's use of the response: the handler returns after
// it, and the runtime may still deliver output of a process being killed.
func (e *EventStream) Close() {
	e.mu.Lock()
	e.closed = true
	e.mu.Unlock()
}

func (e *EventStream) writeLocked(ev api.ExecEvent) {
	if e.closed || e.werr != nil {
		return
	}
	e.buf.Reset()
	enc := json.NewEncoder(&e.buf)
	enc.SetEscapeHTML(false)
	enc.Encode(ev) // ends the line
	n, err := e.w.Write(e.buf.Bytes())
	e.count(int64(n))
	if err != nil {
		e.werr = err
	}
}

// flushLocked sends what was written.
func (e *EventStream) flushLocked() {
	if e.closed || e.werr != nil {
		return
	}
	if err := e.rc.Flush(); err != nil {
		e.werr = err
	}
}
