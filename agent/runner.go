package agent

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"time"

	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"

	"github.com/cove-sandbox/cove/manifest"
	"github.com/cove-sandbox/cove/sandbox"
)

// tracer names Cove's spans; it is a no-op until a TracerProvider is
// installed (trace.Setup does when OTEL_EXPORTER_OTLP_ENDPOINT is set).
var tracer = otel.Tracer("github.com/cove-sandbox/cove/agent")

// Runner runs agents: it calls the model, routes its tool calls, asks for
// approvals and keeps the conversation. A zero Runner is ready; it holds
// no per-run state, so one Runner can run many agents concurrently.
type Runner struct {
	// Logger receives diagnostics; nil discards them.
	Logger *slog.Logger
}

// Run runs agent a on input until the model gives a final answer, a tool
// call needs approval (then Result.Interruptions and Result.State are set
// and err is nil), MaxTurns is reached (ErrMaxTurns) or ctx ends.
func (r *Runner) Run(ctx context.Context, a *Agent, input string, cfg RunConfig) (*Result, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	st := &RunState{Version: RunStateVersion, Agent: a.Name, Model: a.Model.Name()}
	st.Items = append(slices.Clone(cfg.Input), UserMessage(input))
	return r.run(ctx, a, st, cfg)
}

// Resume continues a run from its state, after every approval in
// st.Approvals was decided (else ErrUndecided). The sandbox is reattached
// if it is still alive, else recreated and its workspace restored from the
// snapshot in st. A rejected call is reported to the model as rejected.
func (r *Runner) Resume(ctx context.Context, a *Agent, st *RunState, cfg RunConfig) (*Result, error) {
	if err := a.check(); err != nil {
		return nil, err
	}
	if st == nil || st.Version != RunStateVersion {
		return nil, fmt.Errorf("resuming agent %q: missing run state or wrong schema version: %w", a.Name, sandbox.ErrInvalid)
	}
	if und := st.Undecided(); len(und) > 0 {
		ids := make([]string, len(und))
		for i, u := range und {
			ids[i] = u.CallID + " (" + u.Tool + ")"
		}
		return nil, fmt.Errorf("resuming agent %q: approve or reject %s first: %w", a.Name, strings.Join(ids, ", "), ErrUndecided)
	}
	return r.run(ctx, a, st, cfg)
}

// Continue starts a new turn of the conversation in st (a finished run's
// State) with more input from the user.
func (r *Runner) Continue(ctx context.Context, a *Agent, st *RunState, input string, cfg RunConfig) (*Result, error) {
	if len(st.Pending) > 0 {
		return nil, fmt.Errorf("continuing agent %q: the run is waiting for approvals; Resume it first: %w", a.Name, sandbox.ErrState)
	}
	st.Items = append(st.Items, UserMessage(input))
	return r.Resume(ctx, a, st, cfg)
}

// Stream is a run whose events are read as they happen.
type Stream struct {
	events chan Event
	done   chan struct{}
	res    *Result
	err    error
}

// Events yields the run's events until it ends. Read them all (or cancel
// the run's ctx): the run waits for its reader.
func (s *Stream) Events() <-chan Event { return s.events }

// Wait returns the run's result once it has ended.
func (s *Stream) Wait() (*Result, error) {
	<-s.done
	return s.res, s.err
}

// RunStreamed is Run with its events delivered on a channel.
func (r *Runner) RunStreamed(ctx context.Context, a *Agent, input string, cfg RunConfig) *Stream {
	s := &Stream{events: make(chan Event, 64), done: make(chan struct{})}
	prev := cfg.OnEvent
	cfg.OnEvent = func(e Event) {
		if prev != nil {
			prev(e)
		}
		select {
		case s.events <- e:
		case <-ctx.Done():
		}
	}
	go func() {
		defer close(s.done)
		defer close(s.events)
		s.res, s.err = r.Run(ctx, a, input, cfg)
	}()
	return s
}

// emitter serialises events from the runner and from tools' goroutines.
type emitter struct {
	mu   sync.Mutex
	fn   func(Event)
	turn int
}

func (e *emitter) emit(ev Event) {
	if e == nil || e.fn == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if ev.Turn == 0 {
		ev.Turn = e.turn
	}
	e.fn(ev)
}

func (e *emitter) setTurn(n int) {
	e.mu.Lock()
	e.turn = n
	e.mu.Unlock()
}

// session is the sandbox side of a run.
type session struct {
	sess     sandbox.Session
	env      SandboxEnv
	owned    bool
	bindings []Binding
}

// toolset is what the model may call in this run.
type toolset struct {
	byName map[string]Tool
	specs  []ToolSpec
}

func (r *Runner) logger() *slog.Logger {
	if r.Logger != nil {
		return r.Logger
	}
	return slog.New(slog.DiscardHandler)
}

// run opens the sandbox and gathers the tools of a run from st, runs its
// turns (running.loop), then closes what it opened.
func (r *Runner) run(ctx context.Context, a *Agent, st *RunState, cfg RunConfig) (res *Result, err error) {
	start := time.Now()
	ctx, span := tracer.Start(ctx, "agent.run", trace.WithAttributes(
		attribute.String("agent.name", a.Name), attribute.String("model", a.Model.Name())))
	defer func() {
		if err != nil {
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
		}
		span.End()
	}()
	rn := &running{r: r, a: a, st: st, cfg: cfg, start: start, firstNew: len(st.Items),
		em: &emitter{fn: cfg.OnEvent, turn: st.Turn}}
	rn.em.emit(Event{Type: EventRunStarted, Agent: a.Name})

	sb, err := r.openSandbox(ctx, a, st, cfg)
	if err != nil {
		rn.em.emit(Event{Type: EventRunFinished, Error: err.Error()})
		return nil, err
	}
	rn.sb = sb
	defer func() {
		if sb != nil {
			r.closeSandbox(ctx, sb, st, cfg, rn.interrupted)
		}
	}()
	tools, instructions, closeTools, err := r.prepare(ctx, a, sb)
	if err != nil {
		rn.em.emit(Event{Type: EventRunFinished, Error: err.Error()})
		return nil, err
	}
	defer closeTools()
	rn.tools, rn.instructions = tools, instructions
	return rn.loop(ctx)
}

// running is one run in progress, from its sandbox and tools being ready
// to its end: what its turns share.
type running struct {
	r            *Runner
	a            *Agent
	st           *RunState
	cfg          RunConfig
	em           *emitter
	sb           *session // nil for an agent without a sandbox
	tools        *toolset
	instructions string
	start        time.Time
	// firstNew is the first item this run added to the conversation.
	firstNew int
	// interrupted is set when the run stops to wait for approvals: its
	// sandbox is then kept for the resume.
	interrupted bool
}

// loop calls the model and answers its tool calls, turn by turn, until
// it answers without calls, a call waits for approval, the turns run out
// or something fails.
func (rn *running) loop(ctx context.Context) (*Result, error) {
	st := rn.st
	maxTurns := rn.cfg.MaxTurns
	if maxTurns <= 0 {
		maxTurns = DefaultMaxTurns
	}
	for {
		// Answer the calls of the last response: those resumed after
		// approval, or those just made.
		if len(st.Pending) > 0 {
			if err := rn.r.answer(ctx, rn.a, st, rn.tools, rn.em); err != nil {
				return rn.finish("", err)
			}
		}
		if rn.cfg.OnCheckpoint != nil {
			rn.cfg.OnCheckpoint(st)
		}
		if st.Turn >= maxTurns {
			return rn.finish("", fmt.Errorf("agent %q: %d turns without a final answer (raise MaxTurns): %w", rn.a.Name, maxTurns, ErrMaxTurns))
		}
		st.Turn++
		rn.em.setTurn(st.Turn)
		rn.em.emit(Event{Type: EventTurnStarted})
		resp, err := rn.r.callModel(ctx, rn.a, st, rn.instructions, rn.tools, rn.em)
		if err != nil {
			return rn.finish("", err)
		}
		st.Usage = st.Usage.Add(resp.Usage)
		st.Items = append(st.Items, resp.Output...)
		calls, text := rn.read(resp)
		rn.emitUsage()
		if len(calls) == 0 {
			return rn.answered(ctx, text)
		}
		st.Pending = calls
		if rn.askApprovals(ctx, calls) {
			rn.interrupted = true
			return rn.finish("", nil)
		}
	}
}

// emitUsage tells the caller what the run used so far, after each model
// call: a live display or a record need not wait for the run to stop.
func (rn *running) emitUsage() {
	u := rn.st.Usage
	ev := Event{Type: EventUsage, Usage: &u, Model: rn.a.Model.Name()}
	if c, ok := Cost(ev.Model, u, rn.cfg.Prices); ok {
		ev.Cost = &c
	}
	rn.em.emit(ev)
}

// read sorts a response's output into the tool calls to answer and the
// last text message, which it emits.
func (rn *running) read(resp *ModelResponse) (calls []Item, text string) {
	for _, it := range resp.Output {
		switch it.Type {
		case ItemToolCall:
			calls = append(calls, it)
		case ItemMessage:
			if t := Text(it.Content); t != "" {
				text = t
				rn.em.emit(Event{Type: EventMessage, Text: t})
			}
		}
	}
	return calls, text
}

// answered ends a run whose model gave its final answer, after handing a
// created sandbox to OnFinish.
func (rn *running) answered(ctx context.Context, text string) (*Result, error) {
	if sb := rn.sb; sb != nil && rn.cfg.Sandbox.OnFinish != nil {
		if err := rn.cfg.Sandbox.OnFinish(ctx, sb.sess); err != nil {
			return rn.finish(text, fmt.Errorf("finishing sandbox %s: %w", sb.sess.ID(), err))
		}
	}
	return rn.finish(text, nil)
}

// askApprovals puts the calls the agent's policy holds back in
// st.Approvals, each with its tool's view of it, and reports whether
// there are any.
func (rn *running) askApprovals(ctx context.Context, calls []Item) bool {
	st := rn.st
	st.Approvals = nil
	if rn.a.Approval == nil {
		return false
	}
	root := ""
	if rn.sb != nil {
		root = rn.sb.env.Root
	}
	for _, c := range calls {
		t := rn.tools.byName[c.Name]
		reason, need := rn.a.Approval(ctx, ApprovalRequest{Tool: c.Name, Arguments: c.Arguments, Root: root, Handler: t})
		if !need {
			continue
		}
		ap := Approval{CallID: c.CallID, Tool: c.Name, Arguments: c.Arguments, CallView: describe(t, c.Arguments), Reason: reason}
		st.Approvals = append(st.Approvals, ap)
		rn.em.emit(Event{Type: EventApprovalRequested, CallID: c.CallID, Tool: c.Name, Arguments: c.Arguments, CallView: ap.CallView, Approval: &ap})
	}
	return len(st.Approvals) > 0
}

// finish makes the run's Result and emits run_finished.
func (rn *running) finish(out string, runErr error) (*Result, error) {
	st := rn.st
	res := &Result{
		Output:   out,
		NewItems: slices.Clone(st.Items[min(rn.firstNew, len(st.Items)):]),
		Usage:    st.Usage,
		Turns:    st.Turn,
		State:    st,
		Duration: time.Since(rn.start),
	}
	if rn.sb != nil {
		res.SandboxID = rn.sb.sess.ID()
	}
	res.Cost, res.CostKnown = Cost(rn.a.Model.Name(), st.Usage, rn.cfg.Prices)
	for _, ap := range st.Approvals {
		if ap.Decision == "" {
			res.Interruptions = append(res.Interruptions, ap)
		}
	}
	ev := Event{Type: EventRunFinished, Output: out, Usage: &res.Usage}
	if res.CostKnown {
		ev.Cost = &res.Cost
	}
	if runErr != nil {
		ev.Error = runErr.Error()
	}
	rn.em.emit(ev)
	return res, runErr
}

// describe is t's view of a call with these arguments; the zero view for
// a tool that gives none, or no tool.
func describe(t Tool, arguments string) CallView {
	if d, ok := t.(Describer); ok {
		return d.Describe(arguments)
	}
	return CallView{}
}

// answer runs (or reports as rejected) every pending call and appends the
// outputs to the conversation.
func (r *Runner) answer(ctx context.Context, a *Agent, st *RunState, tools *toolset, em *emitter) error {
	for len(st.Pending) > 0 {
		call := st.Pending[0]
		var out Item
		if ap, ok := st.approval(call.CallID); ok && ap.Decision == Rejected {
			msg := "The user rejected this tool call; it was not run."
			if ap.Message != "" {
				msg += " Reason: " + ap.Message
			}
			out = toolOutput(call, TextResult(msg))
			em.emit(Event{Type: EventToolCallFinished, CallID: call.CallID, Tool: call.Name, Result: msg})
		} else {
			var err error
			out, err = r.callTool(ctx, call, tools, em)
			if err != nil {
				return err
			}
		}
		st.Items = append(st.Items, out)
		st.Pending = st.Pending[1:]
	}
	st.Pending, st.Approvals = nil, nil
	return nil
}

func toolOutput(call Item, res ToolResult) Item {
	return Item{Type: ItemToolOutput, CallID: call.CallID, Name: call.Name, Custom: call.Custom, Output: res.Output}
}

// callTool runs one tool call. Failures of the tool go back to the model
// as text; only the run's ctx ending is an error of the run.
func (r *Runner) callTool(ctx context.Context, call Item, tools *toolset, em *emitter) (Item, error) {
	ctx, span := tracer.Start(ctx, "agent.tool", trace.WithAttributes(
		attribute.String("tool.name", call.Name), attribute.String("tool.call_id", call.CallID)))
	defer span.End()
	start := time.Now()
	t, ok := tools.byName[call.Name]
	em.emit(Event{Type: EventToolCallStarted, CallID: call.CallID, Tool: call.Name, Arguments: call.Arguments, CallView: describe(t, call.Arguments)})
	var res ToolResult
	if !ok {
		names := make([]string, 0, len(tools.specs))
		for _, s := range tools.specs {
			names = append(names, s.Name)
		}
		res = TextResult(fmt.Sprintf("error: there is no tool named %q; the tools are: %s", call.Name, strings.Join(names, ", ")))
	} else {
		emit := func(e Event) {
			e.CallID, e.Tool = call.CallID, call.Name
			em.emit(e)
		}
		var err error
		res, err = t.Call(ctx, ToolCall{ID: call.CallID, Name: call.Name, Arguments: call.Arguments, Emit: emit})
		if err != nil {
			if ctx.Err() != nil {
				span.SetStatus(codes.Error, "cancelled")
				return Item{}, ctx.Err()
			}
			span.RecordError(err)
			span.SetStatus(codes.Error, err.Error())
			res = TextResult("error: " + err.Error())
		}
	}
	if res.Output == nil {
		res.Output = []Content{{Type: ContentText, Text: ""}}
	}
	ev := Event{Type: EventToolCallFinished, CallID: call.CallID, Tool: call.Name, Result: Text(res.Output), ExitCode: res.ExitCode, SessionID: res.SessionID, Duration: time.Since(start)}
	em.emit(ev)
	return toolOutput(call, res), nil
}

func (r *Runner) callModel(ctx context.Context, a *Agent, st *RunState, instructions string, tools *toolset, em *emitter) (*ModelResponse, error) {
	ctx, span := tracer.Start(ctx, "agent.turn", trace.WithAttributes(attribute.Int("turn", st.Turn)))
	defer span.End()
	mctx, mspan := tracer.Start(ctx, "model.call", trace.WithAttributes(attribute.String("model", a.Model.Name())))
	req := ModelRequest{Instructions: instructions, Input: st.Items, Tools: tools.specs, Settings: a.ModelSettings, Output: a.OutputType}
	resp, err := a.Model.Respond(mctx, req, func(d string) {
		em.emit(Event{Type: EventTextDelta, Text: d})
	})
	if err != nil {
		mspan.RecordError(err)
		mspan.SetStatus(codes.Error, err.Error())
		mspan.End()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, fmt.Errorf("calling model %s: %w", a.Model.Name(), err)
	}
	mspan.SetAttributes(attribute.Int64("usage.input_tokens", resp.Usage.InputTokens), attribute.Int64("usage.output_tokens", resp.Usage.OutputTokens))
	mspan.End()
	return resp, nil
}

// prepare gathers the tools and the system prompt of a run.
func (r *Runner) prepare(ctx context.Context, a *Agent, sb *session) (*toolset, string, func(), error) {
	ts := &toolset{byName: map[string]Tool{}}
	var closers []func()
	closeAll := func() {
		for i := len(closers) - 1; i >= 0; i-- {
			closers[i]()
		}
	}
	add := func(t Tool) error {
		s := t.Spec()
		if _, dup := ts.byName[s.Name]; dup {
			return fmt.Errorf("agent %q: two tools are named %q; rename one: %w", a.Name, s.Name, sandbox.ErrInvalid)
		}
		ts.byName[s.Name] = t
		ts.specs = append(ts.specs, s)
		return nil
	}
	var prompt strings.Builder
	prompt.WriteString(a.Instructions)
	if sb != nil {
		for _, b := range sb.bindings {
			if b.Instructions != "" {
				if prompt.Len() > 0 {
					prompt.WriteString("\n\n")
				}
				prompt.WriteString(b.Instructions)
			}
			for _, t := range b.Tools {
				if err := add(t); err != nil {
					return nil, "", closeAll, err
				}
			}
		}
	}
	for _, t := range a.Tools {
		if err := add(t); err != nil {
			return nil, "", closeAll, err
		}
	}
	for _, src := range a.ToolSources {
		tt, err := src.Tools(ctx)
		closers = append(closers, func() { _ = src.Close() })
		if err != nil {
			closeAll()
			return nil, "", func() {}, fmt.Errorf("agent %q: starting tool source: %w", a.Name, err)
		}
		for _, t := range tt {
			if err := add(t); err != nil {
				closeAll()
				return nil, "", func() {}, err
			}
		}
	}
	return ts, prompt.String(), closeAll, nil
}

// openSandbox attaches the session of a sandbox agent: the caller's, the
// one a resumed state names (reattached, or recreated from its snapshot),
// or a new one built from the manifest; then binds the agent's
// capabilities to it.
func (r *Runner) openSandbox(ctx context.Context, a *Agent, st *RunState, cfg RunConfig) (*session, error) {
	if a.Sandbox == nil {
		return nil, nil
	}
	sc := cfg.Sandbox
	if sc == nil || (sc.Session == nil && sc.Runtime == nil) {
		return nil, fmt.Errorf("agent %q is a sandbox agent: set RunConfig.Sandbox to a Session or a Runtime: %w", a.Name, sandbox.ErrInvalid)
	}
	if a.Sandbox.Capabilities == nil {
		return nil, fmt.Errorf("agent %q has no capabilities: set SandboxAgent.Capabilities (agent/capabilities.Default() gives a shell and the filesystem tools; an empty list binds none): %w", a.Name, sandbox.ErrInvalid)
	}
	ctx, span := tracer.Start(ctx, "sandbox.open")
	defer span.End()
	sb := &session{}
	switch {
	case sc.Session != nil:
		sb.sess = sc.Session
	case st.Sandbox != nil && st.Sandbox.ID != "":
		sess, err := r.reattach(ctx, sc.Runtime, st.Sandbox)
		if err != nil {
			return nil, err
		}
		sb.sess, sb.owned = sess, st.Sandbox.Owned || sess.ID() != st.Sandbox.ID
	default:
		sess, err := r.createSandbox(ctx, a, sc)
		if err != nil {
			return nil, err
		}
		sb.sess, sb.owned = sess, true
	}
	info, err := sb.sess.Info(ctx)
	if err != nil {
		r.dropOwned(ctx, sc, sb)
		return nil, fmt.Errorf("reading sandbox %s: %w", sb.sess.ID(), err)
	}
	root := info.Spec.Root
	if root == "" {
		root = sandbox.DefaultRoot
	}
	wd := a.Sandbox.Workdir
	if wd == "" {
		wd = root
	} else if !strings.HasPrefix(wd, "/") {
		wd = root + "/" + wd
	}
	sb.env = SandboxEnv{Session: traced{sb.sess}, Root: root, User: a.Sandbox.RunAs, Workdir: wd, Edits: &Edits{}}
	st.Sandbox = &SandboxState{ID: sb.sess.ID(), Spec: info.Spec, Owned: sb.owned}
	if err := r.bind(ctx, a.Sandbox.Capabilities, sb); err != nil {
		r.dropOwned(ctx, sc, sb)
		return nil, err
	}
	return sb, nil
}

// createSandbox creates a run's sandbox and fills its workspace: from the
// snapshot if there is one, else from the manifest; then Prepare. A
// sandbox that fails to get ready is deleted.
func (r *Runner) createSandbox(ctx context.Context, a *Agent, sc *SandboxRunConfig) (sandbox.Session, error) {
	m := sc.Manifest
	if m == nil {
		m = a.Sandbox.DefaultManifest
	}
	sess, err := sc.Runtime.Create(ctx, specWith(sc.Spec, m))
	if err != nil {
		return nil, fmt.Errorf("creating the sandbox for agent %q: %w", a.Name, err)
	}
	if sc.Snapshot != nil {
		if err := sess.RestoreWorkspace(ctx, bytes.NewReader(sc.Snapshot)); err != nil {
			_ = sc.Runtime.Delete(context.WithoutCancel(ctx), sess.ID())
			return nil, fmt.Errorf("restoring the workspace snapshot into sandbox %s: %w", sess.ID(), err)
		}
	} else if m != nil {
		if err := manifest.Apply(ctx, m, sess, sc.ApplyOptions); err != nil {
			_ = sc.Runtime.Delete(context.WithoutCancel(ctx), sess.ID())
			return nil, fmt.Errorf("building the workspace of sandbox %s: %w", sess.ID(), err)
		}
	}
	if sc.Prepare != nil {
		if err := sc.Prepare(ctx, sess); err != nil {
			_ = sc.Runtime.Delete(context.WithoutCancel(ctx), sess.ID())
			return nil, fmt.Errorf("preparing sandbox %s: %w", sess.ID(), err)
		}
	}
	return sess, nil
}

// specWith is spec with the workspace root and environment of manifest m
// (nil: spec as is); what spec sets itself wins.
func specWith(spec sandbox.Spec, m *manifest.Manifest) sandbox.Spec {
	if m == nil {
		return spec
	}
	if spec.Root == "" {
		spec.Root = m.RootDir()
	}
	if env := m.Env(); len(env) > 0 {
		merged := make(map[string]string, len(env)+len(spec.Env))
		for k, v := range env {
			merged[k] = v
		}
		for k, v := range spec.Env {
			merged[k] = v
		}
		spec.Env = merged
	}
	return spec
}

// bind binds caps to sb's session, in order; if one fails, those bound
// before it are closed.
func (r *Runner) bind(ctx context.Context, caps []Capability, sb *session) error {
	for _, c := range caps {
		sb.env.Capabilities = append(sb.env.Capabilities, c.Name())
	}
	for _, c := range caps {
		b, err := c.Bind(ctx, sb.env)
		if err != nil {
			r.unbind(ctx, sb)
			return fmt.Errorf("preparing the %s capability in sandbox %s: %w", c.Name(), sb.sess.ID(), err)
		}
		sb.bindings = append(sb.bindings, b)
	}
	return nil
}

// reattach finds a saved run's sandbox: still running, stopped (resumed),
// or gone (recreated from the state's spec and workspace snapshot).
func (r *Runner) reattach(ctx context.Context, rt sandbox.Runtime, ss *SandboxState) (sandbox.Session, error) {
	sess, err := rt.Get(ctx, ss.ID)
	if err == nil {
		info, err := sess.Info(ctx)
		if err == nil && info.State == sandbox.StateRunning {
			return sess, nil
		}
		if s2, err := rt.Resume(ctx, ss.ID); err == nil {
			return s2, nil
		}
		r.logger().Warn("saved sandbox cannot be resumed; recreating it", "sandbox", ss.ID)
	} else if !errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("reattaching sandbox %s: %w", ss.ID, err)
	}
	if len(ss.Workspace) == 0 {
		return nil, fmt.Errorf("sandbox %s is gone and the run state holds no snapshot of its workspace: %w", ss.ID, sandbox.ErrNotFound)
	}
	spec := ss.Spec
	sess, err = rt.Create(ctx, spec)
	if err != nil {
		return nil, fmt.Errorf("recreating sandbox %s: %w", ss.ID, err)
	}
	if err := sess.RestoreWorkspace(ctx, bytes.NewReader(ss.Workspace)); err != nil {
		_ = rt.Delete(context.WithoutCancel(ctx), sess.ID())
		return nil, fmt.Errorf("restoring the workspace of sandbox %s into %s: %w", ss.ID, sess.ID(), err)
	}
	r.logger().Info("sandbox recreated from the run state's snapshot", "old", ss.ID, "new", sess.ID())
	return sess, nil
}

func (r *Runner) unbind(ctx context.Context, sb *session) {
	ctx = context.WithoutCancel(ctx)
	for _, b := range sb.bindings {
		if b.Close != nil {
			if err := b.Close(ctx); err != nil {
				r.logger().Warn("closing capability", "sandbox", sb.sess.ID(), "err", err)
			}
		}
	}
	sb.bindings = nil
}

func (r *Runner) dropOwned(ctx context.Context, sc *SandboxRunConfig, sb *session) {
	if sb.owned && sc.Runtime != nil {
		if err := sc.Runtime.Delete(context.WithoutCancel(ctx), sb.sess.ID()); err != nil {
			r.logger().Warn("deleting sandbox", "sandbox", sb.sess.ID(), "err", err)
		}
	}
}

// closeSandbox ends a run's use of its sandbox. An interrupted run keeps
// a created sandbox running (Resume reattaches it) and saves a snapshot of
// its workspace in the state (Resume recreates it from that if it is
// gone); a finished run hands the sandbox to OnFinish and deletes it.
func (r *Runner) closeSandbox(ctx context.Context, sb *session, st *RunState, cfg RunConfig, interrupted bool) {
	ctx = context.WithoutCancel(ctx)
	r.unbind(ctx, sb)
	sc := cfg.Sandbox
	if !sb.owned {
		return
	}
	if interrupted {
		var buf bytes.Buffer
		if err := sb.sess.SnapshotWorkspace(ctx, &buf); err != nil {
			r.logger().Warn("snapshotting the workspace for resume", "sandbox", sb.sess.ID(), "err", err)
		} else {
			st.Sandbox.Workspace = buf.Bytes()
		}
		return
	}
	if sc.KeepSandbox {
		return
	}
	r.dropOwned(ctx, sc, sb)
	st.Sandbox = nil
}
