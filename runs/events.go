package runs

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Feed reads a run's log in order, from memory for what is not in the
// store yet and from the store for what came before (a replay, or a
// flush since the last read). Make one with Events; Close it when done.
// A Feed is for one goroutine.
type Feed struct {
	s     *Service
	lr    *liveRun
	after int64
}

// Batch is what Feed.Next read.
type Batch struct {
	// Events are the next events of the log, in order; none when there
	// are none yet.
	Events []store.RunEvent
	// Working is whether the run has a segment going: more events will
	// come without a call. A feed that is not following stops at the
	// first empty batch of a run not working.
	Working bool
	// Changed is closed when an event comes or the run's state changes.
	Changed <-chan struct{}
	// Deleted is set when the run was deleted: nothing more will come.
	Deleted bool
}

// Events opens the log of team's run id after the event numbered after
// (0 for all): ErrNotFound if the team has no such run.
func (s *Service) Events(ctx context.Context, team, id string, after int64) (*Feed, error) {
	lr, err := s.acquire(ctx, team, id)
	if err != nil {
		return nil, err
	}
	return &Feed{s: s, lr: lr, after: after}, nil
}

// Close releases the run.
func (f *Feed) Close() {
	if f.lr != nil {
		f.s.release(f.lr)
		f.lr = nil
	}
}

// Next returns the events after the last ones it returned: a batch from
// the store or from memory, or, when none is there yet, an empty batch
// saying whether the run works and when to look again.
func (f *Feed) Next(ctx context.Context) (Batch, error) {
	lr := f.lr
	for {
		// pending holds the events after those in the store, in order: a
		// feed caught up reads them from memory, and the store only for
		// what came before.
		lr.mu.Lock()
		first := lr.rec.LastEventID + 1
		if len(lr.pending) > 0 {
			first = lr.pending[0].Seq
		}
		var mem []store.RunEvent
		if i := f.after + 1 - first; i >= 0 && i < int64(len(lr.pending)) {
			mem = slices.Clone(lr.pending[i:])
		}
		b := Batch{Changed: lr.changed, Working: lr.running, Deleted: lr.deleted}
		lr.mu.Unlock()
		if f.s.cfg.Lease != nil && !b.Working && !b.Deleted {
			// A peer may work on it: read it afresh, and again soon.
			if err := f.s.refresh(ctx, lr); err != nil {
				if errors.Is(err, sandbox.ErrNotFound) {
					return Batch{Deleted: true}, nil
				}
				return Batch{}, err
			}
			if lr.remote() {
				b.Working, b.Changed = true, pollChanged(remotePoll, nil)
			} else {
				// A peer may start a segment of it: a follower looks
				// again every idlePoll, or at once when it starts here.
				b.Changed = pollChanged(idlePoll, b.Changed)
			}
			lr.mu.Lock()
			first = lr.rec.LastEventID + 1
			if len(lr.pending) > 0 {
				first = lr.pending[0].Seq
			}
			lr.mu.Unlock()
		}
		if b.Deleted {
			return b, nil
		}
		if f.after+1 < first {
			evs, err := f.s.cfg.Store.RunEvents(ctx, lr.id, f.after, 500)
			if err != nil {
				return Batch{}, fmt.Errorf("reading the events of run %s: %w", lr.id, err)
			}
			if len(evs) == 0 {
				// None: the record counts events a crash lost before
				// they were flushed; memory goes on after them.
				f.after = first - 1
				continue
			}
			mem = evs
		}
		if len(mem) > 0 {
			f.after = mem[len(mem)-1].Seq
			b.Events = mem
		}
		return b, nil
	}
}
