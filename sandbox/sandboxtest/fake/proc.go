package fake

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/sandbox"
)

// The fake's calls that reach a process by pid or tag, with no handle.

// StartDetached runs a built-in command in the background with its output
// buffered for the first Attach.
func (s *Session) StartDetached(ctx context.Context, req sandbox.ExecRequest) (int, error) {
	if req.Stdout != nil || req.Stderr != nil {
		return 0, fmt.Errorf("starting %q detached: Stdout and Stderr must be nil; Attach reads the output: %w", req.Cmd, sandbox.ErrInvalid)
	}
	// The process may write before start returns: what it writes to the
	// start's attachment until then is caught and buffered first.
	var early earlyOutput
	req.Stdout, req.Stderr = early.writer(1), early.writer(2)
	p, att, err := s.start(ctx, req)
	if err != nil {
		return 0, fmt.Errorf("starting %q: %w", req.Cmd, err)
	}
	o := p.out
	o.mu.Lock()
	o.atts = slices.DeleteFunc(o.atts, func(x *attachment) bool { return x == att })
	if len(o.atts) == 0 {
		// The attachment took everything until now, so the buffer is
		// empty and the early output goes first. (A reader that
		// attached by tag in between misses what came before it: the
		// fake does not replay it.)
		early.mu.Lock()
		for _, c := range early.chunks {
			o.buffer(c.stream, c.data)
		}
		early.mu.Unlock()
	}
	o.mu.Unlock()
	return p.pid, nil
}

// earlyOutput holds what a detached process wrote before it was detached.
type earlyOutput struct {
	mu     sync.Mutex
	chunks []chunk
}

func (e *earlyOutput) writer(stream int) earlyWriter { return earlyWriter{e, stream} }

type earlyWriter struct {
	e      *earlyOutput
	stream int
}

func (w earlyWriter) Write(p []byte) (int, error) {
	w.e.mu.Lock()
	w.e.chunks = append(w.e.chunks, chunk{w.stream, slices.Clone(p)})
	w.e.mu.Unlock()
	return len(p), nil
}

// Signal delivers sig to the process sel names, as Process.Signal does.
func (s *Session) Signal(ctx context.Context, sel sandbox.ProcessSelector, sig sandbox.Signal) error {
	h, err := s.handle(ctx, sel)
	if err != nil {
		return fmt.Errorf("signalling: %w", err)
	}
	return h.Signal(ctx, sig)
}

// WriteStdin writes to the standard input of the process sel names.
func (s *Session) WriteStdin(ctx context.Context, sel sandbox.ProcessSelector, p []byte) error {
	h, err := s.handle(ctx, sel)
	if err != nil {
		return fmt.Errorf("writing to stdin: %w", err)
	}
	return h.Write(ctx, p)
}

// CloseStdin closes the standard input of the process sel names.
func (s *Session) CloseStdin(ctx context.Context, sel sandbox.ProcessSelector) error {
	h, err := s.handle(ctx, sel)
	if err != nil {
		return fmt.Errorf("closing stdin: %w", err)
	}
	return h.CloseStdin(ctx)
}

// handle is a handle on the process sel names that takes no output.
func (s *Session) handle(ctx context.Context, sel sandbox.ProcessSelector) (*fakeHandle, error) {
	if err := s.lock(ctx); err != nil {
		return nil, err
	}
	p := s.findLocked(sel)
	s.mu.Unlock()
	if p == nil {
		if sel.Tag == "" && sel.PID == 0 {
			return nil, fmt.Errorf("no pid or tag given: %w", sandbox.ErrInvalid)
		}
		return nil, fmt.Errorf("%s: %w", selString(sel), sandbox.ErrNotFound)
	}
	return &fakeHandle{p: p}, nil
}

// killAfter delivers SIGKILL to p after d (ExecRequest.Timeout), unless
// it has ended by then; 0 means never.
func (p *fakeProcess) killAfter(d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.AfterFunc(d, func() { p.deliver(sandbox.SIGKILL) })
	go func() {
		<-p.done
		t.Stop()
	}()
}
