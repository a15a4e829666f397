package sandboxtool

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"syscall"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/sandbox"
)

// process is a command started by exec_command, from its start until the
// model has read its end.
type process struct {
	cmd string // the model's command line, for events
	tty bool
	h   sandbox.Process // set once started, then never changed

	done    chan struct{} // closed once h.Wait returned and status is set
	notify  chan struct{} // 1-buffered: output arrived
	reading chan struct{} // 1-buffered: held by the one call reading output

	// id and lastUsed are guarded by Tools.mu; id is set by register
	// before the process is shared and not changed after.
	id       int
	lastUsed time.Time

	mu  sync.Mutex // guards the fields below
	buf outBuf
	// events is output not yet sent to the run's event stream, bounded
	// by maxEventBytes; unshown counts what did not fit.
	events        []chunk
	eventBytes    int
	unshown       int
	unshownOn     string
	status        sandbox.ExitStatus
	waitErr       error
	killedBecause string
	lifetime      *time.Timer
}

// chunk is output of one stream, in arrival order.
type chunk struct {
	stream string
	data   []byte
}

func newProcess(cmd string, tty bool, bufBytes int) *process {
	return &process{
		cmd:     cmd,
		tty:     tty,
		done:    make(chan struct{}),
		notify:  make(chan struct{}, 1),
		reading: make(chan struct{}, 1),
		buf:     newOutBuf(bufBytes),
	}
}

// streamWriter is a process's stdout or stderr. The runtime calls it from
// its own goroutines; it never blocks, so a flood cannot stall them.
type streamWriter struct {
	p      *process
	stream string
}

func (w streamWriter) Write(b []byte) (int, error) {
	p := w.p
	p.mu.Lock()
	p.buf.write(b)
	switch {
	case p.eventBytes+len(b) > maxEventBytes:
		if p.unshown == 0 {
			p.unshownOn = w.stream
		}
		p.unshown += len(b)
	case len(p.events) > 0 && p.events[len(p.events)-1].stream == w.stream:
		last := &p.events[len(p.events)-1]
		last.data = append(last.data, b...)
		p.eventBytes += len(b)
	default:
		p.events = append(p.events, chunk{w.stream, append([]byte(nil), b...)})
		p.eventBytes += len(b)
	}
	p.mu.Unlock()
	select {
	case p.notify <- struct{}{}:
	default:
	}
	return len(b), nil
}

// watch waits for the process to end, in its own goroutine.
func (p *process) watch() {
	st, err := p.h.Wait(context.Background())
	p.mu.Lock()
	p.status, p.waitErr = st, err
	if p.lifetime != nil {
		p.lifetime.Stop()
	}
	p.mu.Unlock()
	close(p.done)
}

func (p *process) ended() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// kill sends SIGKILL unless the process has ended, and records why so the
// model is told on its next read.
func (p *process) kill(ctx context.Context, because string) error {
	p.mu.Lock()
	if p.lifetime != nil {
		p.lifetime.Stop()
	}
	if p.killedBecause == "" {
		p.killedBecause = because
	}
	p.mu.Unlock()
	if p.ended() {
		return nil
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), killTimeout)
	defer cancel()
	err := p.h.Signal(ctx, sandbox.SIGKILL)
	if err != nil && (errors.Is(err, sandbox.ErrNotFound) || errors.Is(err, sandbox.ErrState) || p.ended()) {
		return nil // it ended on its own meanwhile
	}
	if err != nil {
		return fmt.Errorf("killing session %d: %w", p.id, err)
	}
	return nil
}

// flush sends the output queued since the last flush to emit. Only the
// call reading the process flushes, so emit is never called after its
// tool call returned.
func (p *process) flush(emit func(agent.Event), base agent.Event) {
	p.mu.Lock()
	events, unshown, unshownOn := p.events, p.unshown, p.unshownOn
	p.events, p.eventBytes, p.unshown = nil, 0, 0
	p.mu.Unlock()
	if emit == nil {
		return
	}
	for _, c := range events {
		ev := base
		ev.Type, ev.Time, ev.Stream, ev.Data = agent.EventOutput, time.Now(), c.stream, string(c.data)
		emit(ev)
	}
	if unshown > 0 {
		ev := base
		ev.Type, ev.Time, ev.Stream = agent.EventOutput, time.Now(), unshownOn
		ev.Data = fmt.Sprintf("\n…%d bytes of output not shown…\n", unshown)
		emit(ev)
	}
}

// collect waits for output until the process ends or yield passes, as the
// SDK's collect_pty_output, streaming it to emit meanwhile (at most every
// flushInterval, so a flood reaches the event stream in a few large
// events rather than countless small ones). It returns whether the
// process has ended and the output it produced since the last read. The
// caller holds p.reading.
func (p *process) collect(ctx context.Context, yield time.Duration, emit func(agent.Event), base agent.Event) (exited bool, out text, err error) {
	deadline := time.NewTimer(yield)
	defer deadline.Stop()
	p.flush(emit, base) // output that came between two reads
	lastFlush := time.Now()
	var tick <-chan time.Time // armed while a flush is due
wait:
	for {
		select {
		case <-p.done:
			break wait
		case <-deadline.C:
			break wait
		case <-ctx.Done():
			return false, text{}, ctx.Err()
		case <-p.notify:
			if tick != nil {
				continue
			}
			if wait := flushInterval - time.Since(lastFlush); wait > 0 {
				tick = time.After(wait)
				continue
			}
			p.flush(emit, base)
			lastFlush = time.Now()
		case <-tick:
			tick = nil
			p.flush(emit, base)
			lastFlush = time.Now()
		}
	}
	exited = p.ended()
	p.flush(emit, base)
	p.mu.Lock()
	out = p.buf.take(exited)
	p.mu.Unlock()
	return exited, out, nil
}

// acquire takes the right to read p's output: parallel calls on one
// session take turns instead of splitting its output between them.
func (p *process) acquire(ctx context.Context) error {
	select {
	case p.reading <- struct{}{}:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (p *process) release() { <-p.reading }

// outcome is how an ended process is reported: its exit code and the
// notices the model needs to make sense of it.
func (p *process) outcome() (code int, notices []string) {
	p.mu.Lock()
	st, werr, killed := p.status, p.waitErr, p.killedBecause
	p.mu.Unlock()
	code = exitCode(st)
	switch {
	case werr != nil:
		code = -1
		notices = append(notices, fmt.Sprintf("Lost track of the process: %v", werr))
	case st.OOM:
		notices = append(notices, "Process killed: the sandbox ran out of memory.")
	case killed != "" && st.Signal != "":
		notices = append(notices, fmt.Sprintf("Process killed: %s.", killed))
	}
	if st.Error != "" {
		notices = append(notices, "Note: "+st.Error)
	}
	return code, notices
}

// exitCode is the status as a shell reports it: 128+n for a process killed
// by signal n, so a kill is told apart from a plain failure.
func exitCode(st sandbox.ExitStatus) int {
	if st.Signal == "" {
		return st.Code
	}
	for n := syscall.Signal(1); n < 65; n++ {
		if n.String() == st.Signal {
			return 128 + int(n)
		}
	}
	return -1
}
