package guest

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	pb "github.com/cove-sandbox/cove/guest/gen/process"
	"github.com/cove-sandbox/cove/sandbox"
)

// The calls of sandbox.Session that reach a process by pid or tag, with no
// handle: the daemon keeps every process's state and output, so any
// client of it (a server that restarted, another session) can drive a
// process another one started.

// StartDetached implements sandbox.Session: the daemon ends the Start
// stream after the start event (DetachedHeader), so no output is read
// here and all of it waits for the first Attach.
func (s *Session) StartDetached(ctx context.Context, r sandbox.ExecRequest) (int, error) {
	if r.Stdout != nil || r.Stderr != nil {
		return 0, fmt.Errorf("a detached start takes no Stdout or Stderr: Attach to the process to read its output: %w", sandbox.ErrInvalid)
	}
	sctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	stream, err := s.startStream(ctx, sctx, r, http.Header{DetachedHeader: {"1"}})
	if err != nil {
		return 0, err
	}
	pid, err := readStart(ctx, stream, cancel)
	if err != nil {
		return 0, err
	}
	// The end of the stream follows the start event at once: reading it
	// lets the connection serve the next request. A daemon too old to know
	// DetachedHeader streams the output instead; the bound keeps this call
	// from waiting on it.
	stop := time.AfterFunc(2*time.Second, cancel)
	for stream.Receive() {
	}
	stop.Stop()
	stream.Close()
	if r.Stdin != nil {
		go s.feed(&pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: uint32(pid)}}, r.Stdin, r.PTY != nil)
	}
	return pid, nil
}

// Signal implements sandbox.Session.
func (s *Session) Signal(ctx context.Context, sel sandbox.ProcessSelector, sig sandbox.Signal) error {
	ps, err := s.selector(ctx, sel)
	if err != nil {
		return err
	}
	if err := s.signal(ctx, ps, sig); err != nil {
		return fmt.Errorf("signalling %s: %w", selString(sel), err)
	}
	return nil
}

// WriteStdin implements sandbox.Session. On a PTY the bytes go to the
// terminal.
func (s *Session) WriteStdin(ctx context.Context, sel sandbox.ProcessSelector, b []byte) error {
	ps, err := s.selector(ctx, sel)
	if err != nil {
		return err
	}
	if err := s.sendInput(ctx, ps, b, false); err != nil {
		return fmt.Errorf("writing to the stdin of %s: %w", selString(sel), err)
	}
	return nil
}

// CloseStdin implements sandbox.Session.
func (s *Session) CloseStdin(ctx context.Context, sel sandbox.ProcessSelector) error {
	ps, err := s.selector(ctx, sel)
	if err != nil {
		return err
	}
	if err := s.closeStdin(ctx, ps); err != nil {
		return fmt.Errorf("closing the stdin of %s: %w", selString(sel), err)
	}
	return nil
}

// selector checks the session and turns sel into the wire's selector
// (the tag wins when both are set).
func (s *Session) selector(ctx context.Context, sel sandbox.ProcessSelector) (*pb.ProcessSelector, error) {
	if err := s.check(ctx); err != nil {
		return nil, err
	}
	switch {
	case sel.Tag != "":
		return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Tag{Tag: sel.Tag}}, nil
	case sel.PID > 0 && sel.PID <= 1<<31-1:
		return &pb.ProcessSelector{Selector: &pb.ProcessSelector_Pid{Pid: uint32(sel.PID)}}, nil
	}
	return nil, fmt.Errorf("no process named: give a pid (a positive number) or a tag: %w", sandbox.ErrInvalid)
}

func selString(sel sandbox.ProcessSelector) string {
	if sel.Tag != "" {
		return fmt.Sprintf("the process tagged %q", sel.Tag)
	}
	return fmt.Sprintf("process %d", sel.PID)
}

// sendInput writes b to the process's stdin, or to its terminal as such
// when pty is set.
func (s *Session) sendInput(ctx context.Context, sel *pb.ProcessSelector, b []byte, pty bool) error {
	in := &pb.ProcessInput{Input: &pb.ProcessInput_Stdin{Stdin: b}}
	if pty {
		in.Input = &pb.ProcessInput_Pty{Pty: b}
	}
	_, err := s.c.Process.SendInput(ctx, req(s, &pb.SendInputRequest{Process: sel, Input: in}))
	return wireError(err)
}

func (s *Session) closeStdin(ctx context.Context, sel *pb.ProcessSelector) error {
	_, err := s.c.Process.CloseStdin(ctx, req(s, &pb.CloseStdinRequest{Process: sel}))
	return wireError(err)
}

func (s *Session) signal(ctx context.Context, sel *pb.ProcessSelector, sig sandbox.Signal) error {
	ps := pb.Signal(sig)
	if _, ok := pb.Signal_name[int32(ps)]; !ok || ps == pb.Signal_SIGNAL_UNSPECIFIED {
		return fmt.Errorf("signal %d is not supported: %w", sig, sandbox.ErrInvalid)
	}
	_, err := s.c.Process.SendSignal(ctx, req(s, &pb.SendSignalRequest{Process: sel, Signal: ps}))
	return wireError(err)
}

// feed copies r to the stdin (or terminal) of the process sel names,
// then closes it.
func (s *Session) feed(sel *pb.ProcessSelector, r io.Reader, pty bool) {
	ctx := context.Background()
	buf := make([]byte, 64<<10)
	for {
		n, err := r.Read(buf)
		if n > 0 {
			if werr := s.sendInput(ctx, sel, buf[:n], pty); werr != nil {
				return
			}
		}
		if err != nil {
			break
		}
	}
	s.closeStdin(ctx, sel)
}
