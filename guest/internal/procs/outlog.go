package procs

import (
	"context"
	"sync"
)

// Output kinds in an outLog.
const (
	kindStdout byte = iota + 1
	kindStderr
	kindPTY
)

// eventCost is what an event holds beyond its data (its entry in the
// log's slice, with the slice's spare room, and its data's allocation),
// counted against the limit: else a process writing a byte at a time
// with nobody attached would hold some forty times the limit.
const eventCost = 64

type logEvent struct {
	kind byte
	data []byte
}

// outLog holds a process's output for the clients streaming it. It is
// bounded: once limit bytes are retained (data and eventCost per event)
// the oldest events go first. While
// a client is attached and has not yet read the oldest event, the writer
// waits instead (backpressure reaches the process through its pipe), so an
// attached client gets every byte in order; output produced while nobody
// is attached is kept up to the limit for the next client that attaches.
type outLog struct {
	limit int

	// mu guards everything below.
	mu      sync.Mutex
	events  []logEvent
	first   uint64 // sequence number of events[0]
	bytes   int    // data bytes in events, and eventCost each
	sent    uint64 // first sequence number no client has been sent
	dropped int64  // unsent bytes evicted while nobody was attached
	cursors map[*cursor]struct{}
	done    bool
	changed chan struct{} // closed and replaced on every change
}

// cursor is one attached client's position in the log. inflight is the
// position after the event being sent right now.
type cursor struct{ next, inflight uint64 }

func newOutLog(limit int) *outLog {
	if limit < 64<<10 {
		limit = 64 << 10
	}
	return &outLog{limit: limit, cursors: map[*cursor]struct{}{}, changed: make(chan struct{})}
}

func (l *outLog) notifyLocked() {
	close(l.changed)
	l.changed = make(chan struct{})
}

// minCursorLocked is the lowest position of any attached client, or the
// end of the log when none is attached.
func (l *outLog) minCursorLocked() uint64 {
	end := l.first + uint64(len(l.events))
	m := end
	for c := range l.cursors {
		if c.next < m {
			m = c.next
		}
	}
	return m
}

// append adds output, waiting while attached clients lag behind a full
// log. It returns early if ctx ends.
func (l *outLog) append(ctx context.Context, kind byte, data []byte) {
	if len(data) == 0 {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cost := len(data) + eventCost
	for l.bytes+cost > l.limit && len(l.events) > 0 {
		if l.minCursorLocked() <= l.first {
			ch := l.changed
			l.mu.Unlock()
			select {
			case <-ch:
			case <-ctx.Done():
				l.mu.Lock()
				return
			}
			l.mu.Lock()
			continue
		}
		ev := l.events[0]
		l.events[0] = logEvent{}
		l.events = l.events[1:]
		if l.first >= l.sent {
			l.dropped += int64(len(ev.data))
			l.sent = l.first + 1
		}
		l.first++
		l.bytes -= len(ev.data) + eventCost
	}
	l.events = append(l.events, logEvent{kind: kind, data: data})
	l.bytes += cost
	l.notifyLocked()
}

// close marks the log complete: readers drain it and then see done.
func (l *outLog) close() {
	l.mu.Lock()
	l.done = true
	l.notifyLocked()
	l.mu.Unlock()
}

// attach adds a client. fromStart reads from the oldest retained event;
// otherwise the client gets what no client has been sent yet.
func (l *outLog) attach(fromStart bool) *cursor {
	l.mu.Lock()
	defer l.mu.Unlock()
	c := &cursor{next: l.first}
	if !fromStart && l.sent > c.next {
		c.next = l.sent
	}
	l.cursors[c] = struct{}{}
	return c
}

// detach removes a client so it no longer holds back the writer.
func (l *outLog) detach(c *cursor) {
	l.mu.Lock()
	delete(l.cursors, c)
	l.notifyLocked()
	l.mu.Unlock()
}

// read returns the events after c (not yet consumed), whether the log is
// complete and fully read, and a channel that is closed on the next
// change. The caller calls consume after delivering the events.
func (l *outLog) read(c *cursor) (evs []logEvent, done bool, changed <-chan struct{}) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if c.next < l.first {
		c.next = l.first
	}
	i := int(c.next - l.first)
	if i < len(l.events) {
		// Copy the slice header range: the backing events are immutable
		// once appended.
		evs = append([]logEvent(nil), l.events[i:]...)
	}
	return evs, l.done && len(evs) == 0, l.changed
}

// sending records that the events up to c.next+n are being sent to c.
func (l *outLog) sending(c *cursor, n int) {
	l.mu.Lock()
	c.inflight = c.next + uint64(n)
	l.mu.Unlock()
}

// detachDelivered removes a client that detached on purpose: whatever was
// sent to it counts as delivered (it has it, or chose to drop it), so the
// next client starts after that.
func (l *outLog) detachDelivered(c *cursor) {
	l.mu.Lock()
	delete(l.cursors, c)
	if c.inflight > l.sent {
		l.sent = c.inflight
	}
	if c.next > l.sent {
		l.sent = c.next
	}
	l.notifyLocked()
	l.mu.Unlock()
}

// consume advances c past n delivered events.
func (l *outLog) consume(c *cursor, n int) {
	l.mu.Lock()
	c.next += uint64(n)
	if _, attached := l.cursors[c]; !attached {
		// Detached while these were in flight: they may not have reached
		// anyone, so the next client gets them too.
		l.mu.Unlock()
		return
	}
	if c.next > l.sent {
		l.sent = c.next
	}
	l.notifyLocked()
	l.mu.Unlock()
}

// droppedBytes reports how much output nobody received because it was
// evicted while no client was attached.
func (l *outLog) droppedBytes() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.dropped
}

// retained reports the bytes currently held, for tests and metrics.
func (l *outLog) retained() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.bytes
}
