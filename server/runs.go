package server

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/cove-sandbox/cove/agent"
	"github.com/cove-sandbox/cove/agent/capabilities"
	"github.com/cove-sandbox/cove/agent/model/openai"
	"github.com/cove-sandbox/cove/agent/tool/sandboxtool"
	"github.com/cove-sandbox/cove/api"
	"github.com/cove-sandbox/cove/sandbox"
	"github.com/cove-sandbox/cove/store"
)

// Agent runs on the server (POST /v1/runs). A run is the harness
// (package agent) working in one of the team's sandboxes, driven by the
// server instead of a CLI: its events go to a log that clients follow as
// Server-Sent Events and replay from any event id; its RunState is saved
// at every turn boundary, so a restarted server goes on with it; approvals
// and follow-up messages arrive as API calls; a webhook hears when it
// stops.
//
// A run's life is a series of segments, each one Runner call (Run,
// Resume after approvals, Continue with a follow-up message), one at a
// time. Between segments the run is waiting, idle, failed or cancelled
// and costs nothing but its record.

// ModelConfig is the model endpoint runs use unless they name another.
type ModelConfig struct {
	// BaseURL is the server's model endpoint (default OpenAI's) and
	// APIKey its key: cove serve takes them from $OPENAI_BASE_URL and
	// $OPENAI_API_KEY. The key is only ever sent to BaseURL.
	BaseURL, APIKey string
	// API is "responses" or "chat" ("" picks by endpoint); DefaultModel
	// is used when a run names none.
	API, DefaultModel string
	// Prices overrides the model price table for cost estimates.
	Prices map[string]agent.Price
	// HTTPClient makes the calls to BaseURL, the operator's own endpoint
	// (default http.DefaultClient). Calls to a base URL a run names, and
	// webhook deliveries, go where a tenant says and use the server's
	// outbound policy instead (egress.go).
	HTTPClient *http.Client
}

// Server events added to the harness's own in a run's log.
const (
	// EventUserMessage is each input of the run (the first and every
	// follow-up), so a replayed log shows the whole conversation.
	EventUserMessage agent.EventType = "user_message"
	// EventRunStatus is each change of the run's status.
	EventRunStatus agent.EventType = "run_status"
)

// runEvent is an event of a run's log: the harness's, or the server's
// with Status.
type runEvent struct {
	agent.Event
	Status string `json:"status,omitempty"`
}

// runFlushInterval is how often run events reach the store: clients see
// them at once from memory; the store is for replays and restarts.
const runFlushInterval = 100 * time.Millisecond

// runOutputCap bounds the output kept in a run's log per tool call: a
// command that floods its output must not fill the server's disk or the
// browser of whoever watches.
const runOutputCap = 1 << 20

// runConfig is how a run was asked for, kept in its record.
type runConfig struct {
	Agent         api.RunAgent `json:"agent"`
	WebhookURL    string       `json:"webhook_url,omitempty"`
	WebhookSecret string       `json:"webhook_secret,omitempty"`
}

// runSummary is the part of a run's record its view shows without
// reading the whole RunState (store.Run.Usage).
type runSummary struct {
	Usage     api.RunUsage      `json:"usage"`
	Cost      *float64          `json:"cost_usd,omitempty"`
	Approvals []api.RunApproval `json:"approvals,omitempty"`
}

// cancelledByUser is the error of a run cancelled through the API.
const cancelledByUser = "cancelled by the user; send a message to go on"

var (
	errRunCancelled = errors.New("the run was cancelled")
	errShutdown     = errors.New("the server is shutting down")
)

// runHub holds the runs this server is working on or that clients are
// following.
type runHub struct {
	mu     sync.Mutex
	runs   map[string]*liveRun
	closed bool
	// ctx ends (with errShutdown) when the server closes; segments and
	// webhook deliveries run under it, counted by wg.
	ctx    context.Context
	cancel context.CancelCauseFunc
	wg     sync.WaitGroup
}

// liveRun is a run in memory. While one exists it holds the truth of its
// record (rec); the store catches up at each checkpoint and flush.
type liveRun struct {
	id, team string
	// op serialises the run's control operations (start a segment,
	// decide approvals, cancel, finish a segment).
	op sync.Mutex

	mu  sync.Mutex
	rec store.Run
	sum runSummary
	// pending are events not yet in the store, in order; changed is
	// closed (and replaced) when an event is added or the status changes.
	pending []store.RunEvent
	changed chan struct{}
	running bool
	cancel  context.CancelCauseFunc
	done    chan struct{}
	// subs counts the requests using the run; an idle run with none and
	// nothing to flush is dropped from memory.
	subs     int
	outBytes map[string]int
	// deleted ends the streams still following a run that was deleted.
	deleted bool
	// flushMu serialises writes of pending events.
	flushMu sync.Mutex
}

func newRunHub() *runHub {
	h := &runHub{runs: map[string]*liveRun{}}
	h.ctx, h.cancel = context.WithCancelCause(context.Background())
	return h
}

// add counts a goroutine of the hub in wg: false once the server is
// closing, when none may start.
func (h *runHub) add() bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.closed {
		return false
	}
	h.wg.Add(1)
	return true
}

func (s *Server) runRoutes() {
	s.handle("POST /v1/runs", s.createRun)
	s.handle("GET /v1/runs", s.listRuns)
	s.handle("GET /v1/runs/{id}", s.getRun)
	s.handle("GET /v1/runs/{id}/events", s.runEvents)
	s.handle("POST /v1/runs/{id}/approvals", s.decideRun)
	s.handle("POST /v1/runs/{id}/messages", s.messageRun)
	s.handle("POST /v1/runs/{id}/cancel", s.cancelRun)
	s.handle("DELETE /v1/runs/{id}", s.deleteRun)
}

// acquire returns the live run of team's run id, loading it from the
// store when it is not in memory. Call release when done.
func (s *Server) acquire(ctx context.Context, team, id string) (*liveRun, error) {
	h := s.runs
	h.mu.Lock()
	lr, ok := h.runs[id]
	if ok {
		if lr.team != team && team != "" {
			h.mu.Unlock()
			return nil, fmt.Errorf("run %s %w", id, sandbox.ErrNotFound)
		}
		lr.mu.Lock()
		lr.subs++
		lr.mu.Unlock()
		h.mu.Unlock()
		return lr, nil
	}
	h.mu.Unlock()
	rec, err := s.cfg.Store.GetRun(ctx, team, id)
	if err != nil {
		return nil, err
	}
	return s.adopt(rec), nil
}

// adopt puts a run record in memory (or returns the run already there),
// acquired.
func (s *Server) adopt(rec store.Run) *liveRun {
	h := s.runs
	h.mu.Lock()
	defer h.mu.Unlock()
	lr, ok := h.runs[rec.ID]
	if !ok {
		lr = &liveRun{id: rec.ID, team: rec.TeamID, rec: rec, changed: make(chan struct{}), outBytes: map[string]int{}}
		if len(rec.Usage) > 0 {
			_ = json.Unmarshal(rec.Usage, &lr.sum)
		}
		h.runs[rec.ID] = lr
	}
	lr.mu.Lock()
	lr.subs++
	lr.mu.Unlock()
	return lr
}

// release ends a use of a run; the last one of an idle run drops it from
// memory once its events are in the store.
func (s *Server) release(lr *liveRun) {
	h := s.runs
	h.mu.Lock()
	defer h.mu.Unlock()
	lr.mu.Lock()
	defer lr.mu.Unlock()
	lr.subs--
	if lr.subs <= 0 && !lr.running && len(lr.pending) == 0 {
		delete(h.runs, lr.id)
	}
}

// emit adds an event to the run's log.
func (lr *liveRun) emit(ev runEvent) {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	if ev.Time.IsZero() {
		ev.Time = time.Now()
	}
	if ev.Type == agent.EventOutput {
		switch n := lr.outBytes[ev.CallID]; {
		case n > runOutputCap:
			return // over, and said so
		case n+len(ev.Data) > runOutputCap:
			ev.Data = ev.Data[:runOutputCap-n] + "\n[cove: output past 1 MiB of this call is not kept in the run's log; the model got its own bounded copy]\n"
			lr.outBytes[ev.CallID] = runOutputCap + 1
		default:
			lr.outBytes[ev.CallID] = n + len(ev.Data)
		}
	}
	data, err := json.Marshal(ev)
	if err != nil {
		return
	}
	lr.rec.LastEventID++
	lr.pending = append(lr.pending, store.RunEvent{RunID: lr.id, Seq: lr.rec.LastEventID, Type: string(ev.Type), Data: data})
	lr.notifyLocked()
}

func (lr *liveRun) notifyLocked() {
	close(lr.changed)
	lr.changed = make(chan struct{})
}

// stopped marks the run's segment over. It comes after the segment's
// last event: a stream that sees the run not working has had everything.
func (lr *liveRun) stopped() {
	lr.mu.Lock()
	lr.running = false
	lr.notifyLocked()
	lr.mu.Unlock()
}

// setStatus records a new status and logs it as an event.
func (lr *liveRun) setStatus(status, errMsg, text string) {
	lr.mu.Lock()
	lr.rec.Status, lr.rec.Error = status, errMsg
	lr.mu.Unlock()
	lr.emit(runEvent{Event: agent.Event{Type: EventRunStatus, Error: errMsg, Text: text}, Status: status})
}

// flush writes the run's pending events to the store.
func (s *Server) flush(ctx context.Context, lr *liveRun) error {
	lr.flushMu.Lock()
	defer lr.flushMu.Unlock()
	lr.mu.Lock()
	batch := append([]store.RunEvent(nil), lr.pending...)
	lr.mu.Unlock()
	if len(batch) == 0 {
		return nil
	}
	if err := s.cfg.Store.AppendRunEvents(ctx, batch); err != nil {
		return fmt.Errorf("saving the events of run %s: %w", lr.id, err)
	}
	lr.mu.Lock()
	lr.pending = lr.pending[len(batch):]
	lr.mu.Unlock()
	return nil
}

// save writes the run's events, then its record.
func (s *Server) save(ctx context.Context, lr *liveRun) error {
	if err := s.flush(ctx, lr); err != nil {
		return err
	}
	lr.mu.Lock()
	lr.rec.UpdatedAt = s.cfg.Now()
	lr.rec.Usage, _ = json.Marshal(lr.sum)
	rec := lr.rec
	lr.mu.Unlock()
	if err := s.cfg.Store.PutRun(ctx, rec); err != nil {
		return fmt.Errorf("saving run %s: %w", lr.id, err)
	}
	return nil
}

// flushRuns writes every live run's pending events (the flush loop).
func (s *Server) flushRuns(ctx context.Context) {
	s.runs.mu.Lock()
	runs := make([]*liveRun, 0, len(s.runs.runs))
	for _, lr := range s.runs.runs {
		runs = append(runs, lr)
	}
	s.runs.mu.Unlock()
	for _, lr := range runs {
		if err := s.flush(ctx, lr); err != nil {
			s.log.Error("flushing run events", "run", lr.id, "err", err)
		}
	}
}

// closeRuns stops the segments in flight (their runs stay "running" in
// the store, to be resumed by the next server from their last turn) and
// writes what is left.
func (s *Server) closeRuns() {
	s.runs.mu.Lock()
	s.runs.closed = true
	s.runs.mu.Unlock()
	s.runs.cancel(errShutdown)
	s.runs.wg.Wait()
	s.flushRuns(context.Background())
}

// segment is one Runner call of a run.
type segment func(ctx context.Context, rn *agent.Runner, a *agent.Agent, cfg agent.RunConfig) (*agent.Result, error)

// goOn is the segment that goes on from st: a fresh run of input when
// st is nil, a resume (after approvals or a restart) when input is "",
// a follow-up otherwise.
func goOn(st *agent.RunState, input string) segment {
	return func(ctx context.Context, rn *agent.Runner, a *agent.Agent, cfg agent.RunConfig) (*agent.Result, error) {
		switch {
		case st == nil:
			return rn.Run(ctx, a, input, cfg)
		case input == "":
			return rn.Resume(ctx, a, st, cfg)
		}
		return rn.Continue(ctx, a, st, input, cfg)
	}
}

// launchAndShow launches a segment and answers with the run (or why it
// could not start). The caller holds lr.op.
func (s *Server) launchAndShow(w http.ResponseWriter, r *http.Request, lr *liveRun, do segment) {
	if err := s.launch(lr, "", do); err != nil {
		s.fail(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, lr.view())
}

// launch starts a segment of the run. The caller holds lr.op.
func (s *Server) launch(lr *liveRun, text string, do segment) error {
	h := s.runs
	if !h.add() {
		return fmt.Errorf("%w: retry on the restarted server", errShutdown)
	}
	ctx, cancel := context.WithCancelCause(h.ctx)
	lr.mu.Lock()
	lr.running, lr.cancel, lr.done = true, cancel, make(chan struct{})
	lr.subs++ // the segment's own use
	lr.rec.FinishedAt = time.Time{}
	done := lr.done
	lr.mu.Unlock()
	lr.setStatus(api.RunRunning, "", text)
	if err := s.save(ctx, lr); err != nil {
		s.log.Error("saving run", "run", lr.id, "err", err)
	}
	go func() {
		defer h.wg.Done()
		defer close(done)
		defer s.release(lr)
		defer cancel(nil)
		res, err := s.runSegment(ctx, lr, do)
		s.finish(ctx, lr, res, err)
	}()
	return nil
}

// runSegment builds the agent and its sandbox session and runs do.
func (s *Server) runSegment(ctx context.Context, lr *liveRun, do segment) (*agent.Result, error) {
	lr.mu.Lock()
	rec := lr.rec
	lr.mu.Unlock()
	var cfg runConfig
	if err := json.Unmarshal(rec.Config, &cfg); err != nil {
		return nil, fmt.Errorf("run %s's configuration is damaged: %v", lr.id, err)
	}
	a, err := s.runAgent(ctx, lr.team, cfg.Agent)
	if err != nil {
		return nil, err
	}
	sess, err := s.runSession(ctx, lr.team, rec.SandboxID)
	if err != nil {
		return nil, err
	}
	end := s.begin(rec.SandboxID) // a working agent keeps its sandbox from idling out
	defer end()
	rc := agent.RunConfig{
		MaxTurns: cfg.Agent.MaxTurns,
		Sandbox:  &agent.SandboxRunConfig{Session: sess},
		Prices:   s.cfg.Model.Prices,
		OnEvent: func(e agent.Event) {
			if e.Error != "" {
				e.Error = s.tenantText(e.Error)
			}
			lr.emit(runEvent{Event: e})
		},
		OnCheckpoint: func(st *agent.RunState) {
			data, err := json.Marshal(st)
			if err != nil {
				return
			}
			lr.mu.Lock()
			lr.rec.State = data
			lr.sum.Usage = runUsage(st.Usage)
			lr.mu.Unlock()
			if err := s.save(context.WithoutCancel(ctx), lr); err != nil {
				s.log.Error("saving a run's checkpoint", "run", lr.id, "err", err)
			}
		},
	}
	return do(ctx, &agent.Runner{Logger: s.log}, a, rc)
}

// finish records how a segment ended, tells the webhook, and lets the
// run take its next operation.
func (s *Server) finish(ctx context.Context, lr *liveRun, res *agent.Result, err error) {
	cause := context.Cause(ctx)
	bg := context.WithoutCancel(ctx)
	lr.op.Lock()
	defer lr.op.Unlock()
	if errors.Is(cause, errShutdown) {
		// Left "running" with its last checkpoint: the next server goes
		// on from there.
		lr.emit(runEvent{Event: agent.Event{Type: EventRunStatus, Text: "the server is shutting down; the run goes on from its last turn when it starts again"}, Status: api.RunRunning})
		lr.stopped()
		if err := s.save(bg, lr); err != nil {
			s.log.Error("saving run at shutdown", "run", lr.id, "err", err)
		}
		return
	}
	status, msg := api.RunIdle, ""
	lr.mu.Lock()
	if res != nil {
		if res.State != nil {
			if data, err := json.Marshal(res.State); err == nil {
				lr.rec.State = data
			}
		}
		lr.sum.Usage = runUsage(res.Usage)
		lr.sum.Cost = nil
		if res.CostKnown {
			c := res.Cost
			lr.sum.Cost = &c
		}
		lr.sum.Approvals = nil
		for _, ap := range res.Interruptions {
			lr.sum.Approvals = append(lr.sum.Approvals, approvalView(ap))
		}
	}
	switch {
	case errors.Is(cause, errRunCancelled):
		status, msg = api.RunCancelled, cancelledByUser
	case err != nil:
		status, msg = api.RunFailed, s.tenantText(err.Error())
	case len(lr.sum.Approvals) > 0:
		status = api.RunWaiting
	default:
		lr.rec.Output = res.Output
	}
	clear(lr.outBytes)
	lr.mu.Unlock()
	if err := s.end(bg, lr, status, msg); err != nil {
		s.log.Error("saving a finished run", "run", lr.id, "err", err)
	}
}

// end records that the run stopped in status (msg says why when it
// failed or was cancelled), saves it and tells its webhook.
func (s *Server) end(ctx context.Context, lr *liveRun, status, msg string) error {
	lr.mu.Lock()
	lr.rec.FinishedAt = s.cfg.Now()
	lr.mu.Unlock()
	lr.setStatus(status, msg, "")
	lr.stopped()
	err := s.save(ctx, lr)
	s.notifyWebhook(lr)
	return err
}

func runUsage(u agent.Usage) api.RunUsage {
	return api.RunUsage{Requests: u.Requests, InputTokens: u.InputTokens, CachedTokens: u.CachedInputTokens, OutputTokens: u.OutputTokens, ReasoningTokens: u.ReasoningTokens}
}

func approvalView(ap agent.Approval) api.RunApproval {
	v := api.RunApproval{CallID: ap.CallID, Tool: ap.Tool, Arguments: ap.Arguments, Reason: ap.Reason}
	if ap.Tool == "exec_command" {
		v.Command = sandboxtool.Command(ap.Arguments)
	}
	return v
}

// runAgent builds the agent of a run.
func (s *Server) runAgent(ctx context.Context, team string, ag api.RunAgent) (*agent.Agent, error) {
	m, err := s.runModel(ctx, team, ag)
	if err != nil {
		return nil, err
	}
	var policy agent.ApprovalPolicy
	switch ag.Approval {
	case "", "risky":
		policy = agent.ApproveRisky
	case "all":
		policy = agent.ApproveAll
	case "never":
	default:
		return nil, invalid("agent.approval %q: want never, risky or all", ag.Approval)
	}
	var caps []agent.Capability
	for _, c := range ag.Capabilities {
		switch c {
		case "workspace":
			caps = append(caps, capabilities.Workspace())
		case "shell":
			caps = append(caps, capabilities.Shell(sandboxtool.Options{}))
		case "filesystem":
			caps = append(caps, capabilities.Filesystem())
		case "skills":
			caps = append(caps, capabilities.Skills())
		default:
			return nil, invalid("agent.capabilities: %q is not one; want workspace, shell, filesystem or skills", c)
		}
	}
	if ag.MaxTurns < 0 || ag.MaxTurns > 1000 {
		return nil, invalid("agent.max_turns %d: want 1 to 1000 (0 for %d)", ag.MaxTurns, agent.DefaultMaxTurns)
	}
	name := ag.Name
	if name == "" {
		name = "cove"
	}
	return &agent.Agent{Name: name, Instructions: ag.Instructions, Model: m, Approval: policy,
		Sandbox: &agent.SandboxAgent{Capabilities: caps}}, nil
}

// runModel picks a run's model endpoint and key. The server's own key
// goes only to the server's own endpoint: a run that names another base
// URL gets the team's secret, or no key.
func (s *Server) runModel(ctx context.Context, team string, ag api.RunAgent) (agent.Model, error) {
	secretName, named := ag.APIKeySecret, ag.APIKeySecret != ""
	if !named {
		secretName = "OPENAI_API_KEY"
	}
	key, err := s.secret(ctx, team, secretName)
	switch {
	case errors.Is(err, sandbox.ErrNotFound) && named:
		return nil, invalid("agent.api_key_secret: the team has no secret %q; set it with PUT /v1/secrets/%s", secretName, secretName)
	case errors.Is(err, sandbox.ErrNotFound):
		key = ""
	case err != nil:
		return nil, err
	}
	own := s.ownModelURL()
	base := strings.TrimRight(ag.BaseURL, "/")
	if base == "" {
		base = own
	}
	model, apiKind := ag.Model, ag.API
	// The operator's endpoint is trusted; one a run names is reached
	// only under the outbound policy.
	client, trusted := s.egress.Client(), base == own
	if trusted {
		client = s.cfg.Model.HTTPClient
		if key == "" {
			key = s.cfg.Model.APIKey
		}
		if model == "" {
			model = s.cfg.Model.DefaultModel
		}
		if apiKind == "" {
			apiKind = s.cfg.Model.API
		}
	}
	m, err := openai.New(openai.Config{Model: model, APIKey: key, BaseURL: base, API: openai.API(apiKind),
		NoEnv: true, HTTPClient: client, Logger: s.log,
		BaseURLSetting: "the run's agent.base_url",
		KeySetting:     "the team secret " + secretName + " (PUT /v1/secrets/" + secretName + ")"})
	if err != nil {
		return nil, invalid("the run's model: %v (a team sets its key with PUT /v1/secrets/OPENAI_API_KEY; the server's own comes from OPENAI_API_KEY where cove serve runs)", err)
	}
	return tenantModel{Model: m, log: s.log, baseURL: base}, nil
}

// ownModelURL is the operator's model endpoint, as runs compare it.
func (s *Server) ownModelURL() string {
	own := strings.TrimRight(s.cfg.Model.BaseURL, "/")
	if own == "" {
		own = openai.DefaultBaseURL
	}
	return own
}

// runSession returns the live session of a run's sandbox, resuming it
// when it was stopped.
func (s *Server) runSession(ctx context.Context, team, id string) (sandbox.Session, error) {
	sess, err := s.fleet.Open(ctx, team, id)
	if errors.Is(err, sandbox.ErrNotFound) {
		return nil, fmt.Errorf("the run's sandbox %s was deleted: start a new run: %w", id, sandbox.ErrState)
	}
	return sess, err
}

// view is the API form of a live run.
func (lr *liveRun) view() api.Run {
	lr.mu.Lock()
	defer lr.mu.Unlock()
	return runView(lr.rec, lr.sum)
}

func runView(rec store.Run, sum runSummary) api.Run {
	var cfg runConfig
	_ = json.Unmarshal(rec.Config, &cfg)
	v := api.Run{ID: rec.ID, Status: rec.Status, Agent: cfg.Agent, SandboxID: rec.SandboxID, Input: rec.Input,
		Messages: rec.Messages, Output: rec.Output, Error: rec.Error, Usage: sum.Usage, CostUSD: sum.Cost,
		LastEventID: rec.LastEventID, WebhookURL: cfg.WebhookURL, CreatedAt: rec.CreatedAt, UpdatedAt: rec.UpdatedAt}
	if rec.Status == api.RunWaiting {
		v.Approvals = sum.Approvals
	}
	if !rec.FinishedAt.IsZero() {
		t := rec.FinishedAt
		v.FinishedAt = &t
	}
	return v
}

// ---- handlers ----

func (s *Server) createRun(w http.ResponseWriter, r *http.Request, c *caller) {
	req, tarFile, ok := s.decodeCreateRun(w, r)
	if !ok {
		return
	}
	if tarFile != nil {
		defer func() {
			tarFile.Close()
			os.Remove(tarFile.Name())
		}()
	}
	req.Input = strings.TrimSpace(req.Input)
	switch {
	case req.Input == "":
		s.fail(w, r, invalid("input is empty: say what the agent should do"))
		return
	case req.SandboxID != "" && (req.Sandbox != nil || len(req.Manifest) > 0 || tarFile != nil):
		s.fail(w, r, invalid("sandbox_id runs in an existing sandbox: leave out sandbox, manifest and the workspace tar, or sandbox_id"))
		return
	case len(req.Manifest) > 0 && tarFile != nil:
		s.fail(w, r, invalid("give the workspace as a manifest or as a tar, not both"))
		return
	case req.Sandbox != nil && len(req.Sandbox.Manifest) > 0 && len(req.Manifest) > 0:
		s.fail(w, r, invalid("manifest is given twice (manifest and sandbox.manifest): keep one"))
		return
	}
	ctx := context.WithoutCancel(r.Context()) // a client leaving must not leave a half-made run
	if req.WebhookURL != "" {
		if err := s.egress.CheckURL(ctx, "webhook_url", req.WebhookURL); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	if base := strings.TrimRight(req.Agent.BaseURL, "/"); base != "" && base != s.ownModelURL() {
		if err := s.egress.CheckURL(ctx, "agent.base_url", base); err != nil {
			s.fail(w, r, err)
			return
		}
	}
	// The agent is built now so a bad model, key or option is a 400 before
	// any sandbox is made.
	if _, err := s.runAgent(ctx, c.team, req.Agent); err != nil {
		s.fail(w, r, err)
		return
	}
	sandboxID, made := req.SandboxID, false
	if sandboxID != "" {
		if _, err := s.fleet.Get(ctx, c.team, sandboxID); err != nil {
			s.fail(w, r, err)
			return
		}
	} else {
		cs := api.CreateSandbox{}
		if req.Sandbox != nil {
			cs = *req.Sandbox
		}
		if len(req.Manifest) > 0 {
			cs.Manifest = req.Manifest
		}
		rec, sess, err := s.fleet.Create(ctx, c.team, cs)
		if err != nil {
			s.fail(w, r, err)
			return
		}
		if tarFile != nil {
			if err := sess.RestoreWorkspace(ctx, tarFile); err != nil {
				s.fleet.Delete(ctx, c.team, rec.ID)
				s.fail(w, r, fmt.Errorf("loading the workspace tar (the sandbox was deleted): %w", err))
				return
			}
		}
		sandboxID, made = rec.ID, true
	}
	cfg := runConfig{Agent: req.Agent, WebhookURL: req.WebhookURL, WebhookSecret: req.WebhookSecret}
	generated := ""
	if cfg.WebhookURL != "" && cfg.WebhookSecret == "" {
		generated = newID("whsec_") + newID("")
		cfg.WebhookSecret = generated
	}
	cfgJSON, _ := json.Marshal(cfg)
	now := s.cfg.Now()
	rec := store.Run{ID: newID("run_"), TeamID: c.team, SandboxID: sandboxID, Status: api.RunRunning, Config: cfgJSON,
		Input: req.Input, Messages: 1, CreatedAt: now, UpdatedAt: now}
	if err := s.cfg.Store.PutRun(ctx, rec); err != nil {
		if made {
			s.fleet.Delete(ctx, c.team, sandboxID)
		}
		s.fail(w, r, err)
		return
	}
	lr := s.adopt(rec)
	defer s.release(lr)
	lr.op.Lock()
	lr.emit(runEvent{Event: agent.Event{Type: EventUserMessage, Text: req.Input}})
	err := s.launch(lr, "", goOn(nil, req.Input))
	lr.op.Unlock()
	if err != nil {
		s.fail(w, r, err)
		return
	}
	v := lr.view()
	v.WebhookSecret = generated
	writeJSON(w, http.StatusCreated, v)
}

// decodeCreateRun reads POST /v1/runs: JSON, or multipart/form-data with
// a "run" part (the JSON) and a "workspace" part (a tar), spooled and
// checked before anything is made.
func (s *Server) decodeCreateRun(w http.ResponseWriter, r *http.Request) (api.CreateRun, *os.File, bool) {
	var req api.CreateRun
	mt, _, _ := mime.ParseMediaType(r.Header.Get("Content-Type"))
	if mt != "multipart/form-data" {
		return req, nil, s.decode(w, r, &req)
	}
	r.Body = http.MaxBytesReader(w, r.Body, s.cfg.MaxUploadBytes+s.cfg.MaxBodyBytes)
	mr, err := r.MultipartReader()
	if err != nil {
		s.fail(w, r, invalid("reading the multipart body: %v", err))
		return req, nil, false
	}
	var tarFile *os.File
	fail := func(err error) (api.CreateRun, *os.File, bool) {
		if tarFile != nil {
			tarFile.Close()
			os.Remove(tarFile.Name())
		}
		s.fail(w, r, err)
		return req, nil, false
	}
	gotRun := false
	for {
		p, err := mr.NextPart()
		if err == io.EOF {
			break
		}
		if err != nil {
			return fail(invalid("reading the multipart body: %v", err))
		}
		switch p.FormName() {
		case "run":
			if gotRun {
				return fail(invalid("the \"run\" part is given twice"))
			}
			gotRun = true
			if err := decodeJSON(io.LimitReader(p, s.cfg.MaxBodyBytes), &req); err != nil {
				return fail(invalid("the \"run\" part: %s", jsonMessage(err)))
			}
		case "workspace":
			if tarFile != nil {
				return fail(invalid("the \"workspace\" part is given twice"))
			}
			tarFile, err = s.spoolTar(p)
			if err != nil {
				return fail(fmt.Errorf("the \"workspace\" part: %w", err))
			}
		default:
			return fail(invalid("unknown part %q: send \"run\" (JSON) and \"workspace\" (a tar)", p.FormName()))
		}
	}
	if !gotRun {
		return fail(invalid("no \"run\" part: send the run's JSON as a form field named run"))
	}
	return req, tarFile, true
}

func (s *Server) getRun(w http.ResponseWriter, r *http.Request, c *caller) {
	lr, err := s.acquire(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer s.release(lr)
	writeJSON(w, http.StatusOK, lr.view())
}

func (s *Server) listRuns(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	f := store.RunFilter{TeamID: c.team, Status: q.Get("status"), After: q.Get("cursor")}
	switch f.Status {
	case "", api.RunRunning, api.RunWaiting, api.RunIdle, api.RunFailed, api.RunCancelled:
	default:
		s.fail(w, r, invalid("status %q: want running, waiting, idle, failed or cancelled", f.Status))
		return
	}
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			s.fail(w, r, invalid("limit %q: want a positive number", v))
			return
		}
		f.Limit = n
	}
	recs, next, err := s.cfg.Store.ListRuns(r.Context(), f)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	out := api.RunList{Runs: []api.Run{}, Next: next}
	for _, rec := range recs {
		s.runs.mu.Lock()
		lr := s.runs.runs[rec.ID]
		s.runs.mu.Unlock()
		if lr != nil {
			out.Runs = append(out.Runs, lr.view())
			continue
		}
		var sum runSummary
		_ = json.Unmarshal(rec.Usage, &sum)
		out.Runs = append(out.Runs, runView(rec, sum))
	}
	writeJSON(w, http.StatusOK, out)
}

// operate takes the caller's run named in the path for a control
// operation: it holds the run's operation lock until done is called. It
// comes before reading the body: another team's run is a 404 whatever
// the body says.
func (s *Server) operate(w http.ResponseWriter, r *http.Request, c *caller) (lr *liveRun, status string, state json.RawMessage, done func(), ok bool) {
	lr, err := s.acquire(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return nil, "", nil, nil, false
	}
	lr.op.Lock()
	lr.mu.Lock()
	status, state = lr.rec.Status, lr.rec.State
	lr.mu.Unlock()
	return lr, status, state, func() { lr.op.Unlock(); s.release(lr) }, true
}

func (s *Server) decideRun(w http.ResponseWriter, r *http.Request, c *caller) {
	lr, status, stateJSON, done, ok := s.operate(w, r, c)
	if !ok {
		return
	}
	defer done()
	var req api.RunDecisions
	if !s.decode(w, r, &req) {
		return
	}
	if status != api.RunWaiting {
		s.fail(w, r, fmt.Errorf("run %s is %s: no call waits for approval: %w", lr.id, status, sandbox.ErrState))
		return
	}
	st, err := agent.ParseRunState(stateJSON)
	if err != nil {
		s.fail(w, r, err)
		return
	}
	for _, d := range req.Decisions {
		switch d.Decision {
		case "approve":
			err = st.Approve(d.CallID)
		case "reject":
			err = st.Reject(d.CallID, d.Message)
		default:
			err = invalid("decision %q for call %s: want approve or reject", d.Decision, d.CallID)
		}
		if errors.Is(err, sandbox.ErrNotFound) {
			err = invalid("%v", err)
		}
		if err != nil {
			s.fail(w, r, err)
			return
		}
	}
	switch req.All {
	case "":
	case "approve":
		st.DecideAll(agent.Approved, "")
	case "reject":
		st.DecideAll(agent.Rejected, "")
	default:
		s.fail(w, r, invalid("all %q: want approve or reject", req.All))
		return
	}
	data, _ := json.Marshal(st)
	lr.mu.Lock()
	lr.rec.State = data
	lr.sum.Approvals = nil
	for _, ap := range st.Undecided() {
		lr.sum.Approvals = append(lr.sum.Approvals, approvalView(ap))
	}
	undecided := len(lr.sum.Approvals)
	lr.mu.Unlock()
	if undecided > 0 {
		if err := s.save(r.Context(), lr); err != nil {
			s.fail(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, lr.view())
		return
	}
	s.launchAndShow(w, r, lr, goOn(st, ""))
}

func (s *Server) messageRun(w http.ResponseWriter, r *http.Request, c *caller) {
	lr, status, stateJSON, done, ok := s.operate(w, r, c)
	if !ok {
		return
	}
	defer done()
	var req api.RunMessage
	if !s.decode(w, r, &req) {
		return
	}
	input := strings.TrimSpace(req.Input)
	if input == "" {
		s.fail(w, r, invalid("input is empty: say what the agent should do next"))
		return
	}
	switch status {
	case api.RunRunning:
		s.fail(w, r, fmt.Errorf("run %s is still working: wait for it to finish (or cancel it), then send the message: %w", lr.id, sandbox.ErrState))
		return
	case api.RunWaiting:
		s.fail(w, r, fmt.Errorf("run %s waits for approvals: decide them first (POST /v1/runs/%s/approvals): %w", lr.id, lr.id, sandbox.ErrState))
		return
	}
	var st *agent.RunState
	if len(stateJSON) > 0 {
		var err error
		if st, err = agent.ParseRunState(stateJSON); err != nil {
			s.fail(w, r, err)
			return
		}
		st.Abandon("the run stopped before it ran")
	}
	lr.mu.Lock()
	lr.rec.Messages++
	lr.rec.Output = ""
	lr.mu.Unlock()
	lr.emit(runEvent{Event: agent.Event{Type: EventUserMessage, Text: input}})
	s.launchAndShow(w, r, lr, goOn(st, input))
}

func (s *Server) cancelRun(w http.ResponseWriter, r *http.Request, c *caller) {
	lr, err := s.acquire(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer s.release(lr)
	lr.op.Lock()
	lr.mu.Lock()
	status, cancel, done := lr.rec.Status, lr.cancel, lr.done
	running := lr.running
	lr.mu.Unlock()
	switch {
	case running:
		lr.op.Unlock()
		cancel(errRunCancelled)
		select {
		case <-done:
		case <-r.Context().Done():
			return
		}
	case status == api.RunWaiting:
		lr.mu.Lock()
		lr.sum.Approvals = nil
		lr.mu.Unlock()
		err := s.end(r.Context(), lr, api.RunCancelled, cancelledByUser)
		lr.op.Unlock()
		if err != nil {
			s.fail(w, r, err)
			return
		}
	default:
		lr.op.Unlock()
		s.fail(w, r, fmt.Errorf("run %s is %s: nothing to cancel: %w", lr.id, status, sandbox.ErrState))
		return
	}
	writeJSON(w, http.StatusOK, lr.view())
}

// deleteRun forgets a run that is not working: its record and its log.
// Its sandbox stays (it is the team's, with its own lifecycle).
func (s *Server) deleteRun(w http.ResponseWriter, r *http.Request, c *caller) {
	lr, status, _, done, ok := s.operate(w, r, c)
	if !ok {
		return
	}
	defer done()
	lr.mu.Lock()
	running := lr.running
	lr.mu.Unlock()
	if running || status == api.RunRunning {
		s.fail(w, r, fmt.Errorf("run %s is working: cancel it first (POST /v1/runs/%s/cancel): %w", lr.id, lr.id, sandbox.ErrState))
		return
	}
	if err := s.flush(r.Context(), lr); err != nil {
		s.fail(w, r, err)
		return
	}
	if err := s.cfg.Store.DeleteRun(r.Context(), c.team, lr.id); err != nil {
		s.fail(w, r, err)
		return
	}
	s.runs.mu.Lock()
	delete(s.runs.runs, lr.id)
	s.runs.mu.Unlock()
	lr.mu.Lock()
	lr.deleted = true
	lr.notifyLocked()
	lr.mu.Unlock()
	w.WriteHeader(http.StatusNoContent)
}

// runEvents streams a run's log as Server-Sent Events from after the
// client's Last-Event-ID (or ?after=). The stream ends once the run is not
// working and everything is sent, unless ?follow=true keeps it open
// across follow-ups (with a comment every 15 s to keep proxies from
// closing it).
func (s *Server) runEvents(w http.ResponseWriter, r *http.Request, c *caller) {
	q := r.URL.Query()
	from := r.Header.Get("Last-Event-ID")
	if v := q.Get("after"); v != "" {
		from = v
	}
	var after int64
	if from != "" {
		n, err := strconv.ParseInt(from, 10, 64)
		if err != nil || n < 0 {
			s.fail(w, r, invalid("event id %q: want the number of the last event seen (0 for all)", from))
			return
		}
		after = n
	}
	follow := q.Get("follow") == "true" || q.Get("follow") == "1"
	lr, err := s.acquire(r.Context(), c.team, r.PathValue("id"))
	if err != nil {
		s.fail(w, r, err)
		return
	}
	defer s.release(lr)
	ctx, cancel := s.streamContext(r.Context())
	defer cancel()
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("Cache-Control", "no-cache")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	flusher, _ := w.(http.Flusher)
	io.WriteString(w, "retry: 2000\n\n")
	send := func(evs []store.RunEvent) bool {
		for _, e := range evs {
			if _, err := fmt.Fprintf(w, "id: %d\nevent: %s\ndata: %s\n\n", e.Seq, e.Type, e.Data); err != nil {
				return false
			}
			after = e.Seq
		}
		if flusher != nil {
			flusher.Flush()
		}
		return true
	}
	send(nil)
	keepalive := time.NewTicker(15 * time.Second)
	defer keepalive.Stop()
	for {
		// pending holds the events after those in the store, in order: a
		// client caught up reads them from memory, and the store only for
		// what came before (a replay, or a flush since the last look).
		lr.mu.Lock()
		first := lr.rec.LastEventID + 1
		if len(lr.pending) > 0 {
			first = lr.pending[0].Seq
		}
		var mem []store.RunEvent
		if i := after + 1 - first; i >= 0 && i < int64(len(lr.pending)) {
			mem = slices.Clone(lr.pending[i:])
		}
		changed, running, deleted := lr.changed, lr.running, lr.deleted
		lr.mu.Unlock()
		if deleted {
			return
		}
		if after+1 < first {
			evs, err := s.cfg.Store.RunEvents(ctx, lr.id, after, 500)
			if err != nil {
				if ctx.Err() == nil {
					s.log.Error("reading run events", "run", lr.id, "err", err)
					fmt.Fprintf(w, "event: error\ndata: {\"type\":\"error\",\"error\":%q}\n\n", "reading the run's events failed; reconnect with Last-Event-ID")
				}
				return
			}
			if len(evs) > 0 {
				if !send(evs) {
					return
				}
				continue
			}
			// None: the record counts events a crash lost before they
			// were flushed; memory goes on after them.
			after = first - 1
			continue
		}
		if len(mem) > 0 {
			if !send(mem) {
				return
			}
			continue
		}
		if !follow && !running {
			return
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return
		case <-keepalive.C:
			if _, err := io.WriteString(w, ": keepalive\n\n"); err != nil {
				return
			}
			if flusher != nil {
				flusher.Flush()
			}
		}
	}
}

// recoverRuns goes on with the runs a previous server left working: from
// their last checkpoint, or failed with the reason when they had none.
func (s *Server) recoverRuns(ctx context.Context) {
	for after := ""; ; {
		recs, next, err := s.cfg.Store.ListRuns(ctx, store.RunFilter{Status: api.RunRunning, After: after})
		if err != nil {
			s.log.Error("listing runs to recover", "err", err)
			return
		}
		for _, rec := range recs {
			s.recoverRun(rec)
		}
		if next == "" {
			return
		}
		after = next
	}
}

func (s *Server) recoverRun(rec store.Run) {
	lr := s.adopt(rec)
	defer s.release(lr)
	lr.op.Lock()
	defer lr.op.Unlock()
	lr.mu.Lock()
	running := lr.running
	lr.mu.Unlock()
	if running {
		return
	}
	st, err := agent.ParseRunState(rec.State)
	if len(rec.State) == 0 || err != nil {
		if err := s.end(context.Background(), lr, api.RunFailed, "the server restarted before the run's first turn was saved; send a message to start again"); err != nil {
			s.log.Error("saving a run that could not be recovered", "run", rec.ID, "err", err)
		}
		return
	}
	st.Abandon("the server restarted while it ran")
	text := fmt.Sprintf("the server restarted; the run goes on from turn %d", st.Turn)
	s.log.Info("resuming run after restart", "run", rec.ID, "turn", st.Turn)
	if err := s.launch(lr, text, goOn(st, "")); err != nil {
		s.log.Error("resuming run", "run", rec.ID, "err", err)
	}
}
